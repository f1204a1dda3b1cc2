// Package vmproto is the protocol between the node and vk-agent, the
// agent inside a job's microVM: one byte stream (vsock, or a
// virtio-serial port behind a Unix socket on the host) carrying framed,
// multiplexed requests.
//
// # Frames
//
// A frame is a 9-byte header — kind (1 byte), stream id (4 bytes, big
// endian), payload length (4 bytes, big endian, at most [MaxPayload]) —
// and the payload. Control kinds carry a JSON object; stdout, stderr and
// data carry raw bytes. The host opens a stream per request with a fresh
// id; the guest answers on the same id.
//
//	host → guest                       guest → host
//	hello {version}                    hello {version, error?}
//	run {script, shell, env, dir}      stdout…, stderr…, exit {code, signal, error}
//	signal {number}                    (the script's process group is signalled)
//	archive {path, only?}              data… (a tar stream), end {error}
//	extract {path}, data…, end         end {error}
//
// The hello comes first: the host names [Version]; an agent of another
// version answers with an error and closes. A script runs in its own
// process group under the shell (bash by default) with exactly the
// environment given; when it exits, whatever it left in its group is
// killed and the guest sends its exit once both output pipes closed (or
// after a bounded wait). Archive and extract work on paths of the job
// tree through an os.Root, so nothing the job put in the tree (a
// symbolic link, a tar entry named ../x) makes the agent read or write
// outside it; no archiver is needed in the job's image (XFER-24). An
// archive's only narrows it to some paths and the directories above
// them; the version stays 2, since an agent that ignores it sends the
// whole path, which holds what was asked.
//
// # Trust
//
// The guest runs the job's code, so the host treats every guest frame as
// hostile: the decoder refuses unknown kinds and oversized lengths before
// allocating, and [Client] ends the connection on any frame it did not
// ask for. FuzzReadFrame exercises the decoder.
//
// Flow control is the stream's own: the Client's reader writes output to
// the caller's writers in order, so a slow writer slows the connection.
package vmproto
