// Package dispatch defines the frames of the node session (NSESS-*): the
// WebSocket a node holds with its hub, over which the hub reserves room,
// starts and cancels jobs, and the node reports inventory, load, leases, job
// states, output and results.
//
// # Frames
//
// Each WebSocket text message is one JSON object, at most [MaxFrameBytes]
// (NSESS-23): {"type": …, "seq": …, …fields}. Session-level messages have
// their own type (hello, welcome, error, keepalive, report, heartbeat,
// settings); job messages (NSESS-01) are {"type": "job", "kind": …,
// …fields} with the kinds offer, offer_reply, renew, lease, release, start,
// job, output, output_ack, cancel, result, recorded, held and egress. The
// payload's fields sit beside the header's (flattened). [Encode] and
// [Decode] read and write frames; each message type names its type and kind
// in its doc comment.
//
// Every state-changing frame carries a seq (STYLE C6): each side numbers
// the frames it sends from 1, +1 per frame, for the life of a session
// handle. hello, welcome, error and keepalive carry no state and no seq. A
// node resuming a session names the handle and the last hub seq it
// processed in its hello; the hub's welcome names the last node seq it
// processed. The session layer decides what to resend; the durable
// mechanisms (held, output offsets, result until recorded) make resends
// safe.
//
// Unions are flat: a tag field (offer_reply.reply, lease.state, job.state)
// says which of the optional fields beside it are set. Unknown enum values
// (refusal reasons, lease-gone reasons, job states, node states) decode to
// the enum's Other value (NSESS-22, STYLE C5).
//
// # Versions
//
// The node session has its own version space (DECISIONS 3), negotiated in
// hello/welcome from ranges by [Negotiate]:
//
//   - 1, 2: hello, report and heartbeat (upstream, before jobs). Not built:
//     a node at most 2 would never be offered a job (NSESS-03), and we have
//     no such nodes, so the hub refuses it at the handshake naming both
//     ranges.
//   - 3 (2026-11-30, JOBS): the "job" message type each way (NSESS-01);
//     job messages below 3 are a protocol error (NSESS-02). The oldest
//     version we build.
//   - 4, 5 (upstream, additive): running.guest (NSESS-18) and the refusal
//     reasons ceiling, concurrency and runner (NSESS-22). Both are read
//     leniently by design, so this implementation sends them at every
//     version and keys no behaviour on 4 or 5.
//   - 6 (2026-11-30, EGRESS): egress frames from node to hub while a job
//     runs (NSESS-17); below 6 only the result carries egress (NSESS-20).
//
// The hub accepts [HubVersions] (3..6) and a node speaks [NodeVersions]
// (3..6), so today both settle on [Version] 6; the ranges exist so a later
// version can be added without stopping a running fleet. Bump [Version] and
// extend this list on every semantic change.
//
// # Sizes
//
// MaxFrameBytes (1 MiB) bounds a frame as sent, its encoded JSON.
// MaxOutputChunk (256 KiB) bounds an output frame's data in raw bytes,
// before base64 (DECISIONS 12); base64 makes that 341 KiB, well inside a
// frame.
//
// This package imports the standard library and proto/client and proto/job
// only.
package dispatch
