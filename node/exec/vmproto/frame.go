package vmproto

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Version is the protocol version this package speaks. The host sends it
// in its hello; an agent that does not speak it answers with an error and
// closes the stream, so a node never drives a guest built from another
// release by accident. Version 2 added the script's identity and
// entrypoint and the extract's owner: an agent of version 1 would run
// every script as root.
const Version = 2

// MaxPayload bounds a frame's payload. The reader refuses a larger length
// before allocating anything: the guest is the job's, and the host must
// not let it make the node allocate at will.
const MaxPayload = 1 << 20

// headerLen is a frame's header: kind (1 byte), stream (4 bytes, big
// endian), payload length (4 bytes, big endian).
const headerLen = 9

// Kind is a frame's type.
type Kind uint8

// The frame kinds. Control frames carry a JSON object; Stdout, Stderr and
// Data carry raw bytes.
const (
	// KindHello opens the connection, both ways, on stream 0: [Hello].
	KindHello Kind = 1 + iota
	// KindRun (host → guest) starts a script on a new stream: [Run].
	KindRun
	// KindStdout and KindStderr (guest → host) carry a running script's
	// output.
	KindStdout
	KindStderr
	// KindSignal (host → guest) signals a running script's process group:
	// [Signal].
	KindSignal
	// KindExit (guest → host) ends a script's stream: [Exit].
	KindExit
	// KindArchive (host → guest) asks for a tar stream of a path of the
	// job tree on a new stream: [PathRequest]. The guest answers with Data
	// frames and one End.
	KindArchive
	// KindExtract (host → guest) sends a tar stream to unpack at a path
	// of the job tree: [PathRequest], then Data frames and one End; the
	// guest answers with one End.
	KindExtract
	// KindData carries tar bytes of an archive or extract stream.
	KindData
	// KindEnd ends an archive or extract stream, in either direction:
	// [End].
	KindEnd
	kindLimit
)

var kindNames = [...]string{"", "hello", "run", "stdout", "stderr", "signal", "exit", "archive", "extract", "data", "end"}

func (k Kind) String() string {
	if k > 0 && k < kindLimit {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// raw reports whether frames of kind k carry bytes rather than JSON.
func (k Kind) raw() bool { return k == KindStdout || k == KindStderr || k == KindData }

// Frame is one unit on the stream.
type Frame struct {
	Kind    Kind
	Stream  uint32
	Payload []byte
}

// Errors of the decoder.
var (
	// ErrFrame: the bytes are not a frame of this protocol (unknown kind,
	// oversized payload, a control payload that is not the kind's JSON).
	ErrFrame = errors.New("vmproto: malformed frame")
	// ErrVersion: the other side does not speak [Version].
	ErrVersion = errors.New("vmproto: protocol version mismatch")
	// ErrClosed: the connection ended.
	ErrClosed = errors.New("vmproto: connection closed")
)

// ReadFrame reads one frame. It returns io.EOF only when the stream ends
// cleanly between frames, io.ErrUnexpectedEOF inside one, and an error
// wrapping [ErrFrame] for bytes that are not a frame.
func ReadFrame(r io.Reader) (Frame, error) {
	var h [headerLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return Frame{}, err
	}
	f := Frame{Kind: Kind(h[0]), Stream: binary.BigEndian.Uint32(h[1:5])}
	n := binary.BigEndian.Uint32(h[5:9])
	if f.Kind == 0 || f.Kind >= kindLimit {
		return Frame{}, fmt.Errorf("%w: unknown kind %d", ErrFrame, h[0])
	}
	if n > MaxPayload {
		return Frame{}, fmt.Errorf("%w: %s payload of %d bytes exceeds %d", ErrFrame, f.Kind, n, MaxPayload)
	}
	if n > 0 {
		f.Payload = make([]byte, n)
		if _, err := io.ReadFull(r, f.Payload); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return Frame{}, err
		}
	}
	return f, nil
}

// AppendFrame appends f's encoding to b. The payload must not exceed
// [MaxPayload].
func AppendFrame(b []byte, f Frame) []byte {
	b = append(b, byte(f.Kind))
	b = binary.BigEndian.AppendUint32(b, f.Stream)
	b = binary.BigEndian.AppendUint32(b, uint32(len(f.Payload)))
	return append(b, f.Payload...)
}

// Hello is the first frame each side sends, on stream 0.
type Hello struct {
	Version int `json:"version"`
	// Error, from the agent, says why it refuses the connection.
	Error string `json:"error,omitempty"`
}

// Run starts a script in the guest.
type Run struct {
	// Script is the script's text; the agent writes it to a private file
	// and runs Shell with that file as its last argument.
	Script string `json:"script"`
	// Shell is the interpreter and its arguments; empty means
	// ["bash", "--noprofile", "--norc"].
	Shell []string `json:"shell,omitempty"`
	// Env is the script's whole environment, KEY=value.
	Env []string `json:"env,omitempty"`
	// Dir is the script's working directory (absolute, in the guest);
	// empty means the agent's job tree.
	Dir string `json:"dir,omitempty"`
	// Entrypoint runs first with Shell, the script's file and all as its
	// arguments, as a container's entrypoint gets its command: one that
	// ends with `exec "$@"` then runs the script. A name without a slash
	// is looked up in Env's PATH. Empty runs Shell directly.
	Entrypoint []string `json:"entrypoint,omitempty"`
	// Command, when set, is run instead of a script (a service's main
	// process): Entrypoint then Command, no shell, no file; Script and
	// Shell are ignored.
	Command []string `json:"command,omitempty"`
	// UID, GID and Groups are the identity the script (and its
	// entrypoint) runs as; all zero means root. The script's file is
	// given to UID.
	UID    uint32   `json:"uid,omitempty"`
	GID    uint32   `json:"gid,omitempty"`
	Groups []uint32 `json:"groups,omitempty"`
}

// Signal asks the agent to signal a script's process group. Number is a
// Linux signal number (15 graceful, 9 immediate).
type Signal struct {
	Number int `json:"number"`
}

// Exit ends a script's stream.
type Exit struct {
	// Code is the exit status, -1 when a signal ended the script.
	Code int `json:"code"`
	// Signal names the signal that ended the script ("terminated",
	// "killed"), or "".
	Signal string `json:"signal,omitempty"`
	// Error says why the script could not start; Code is then -1.
	Error string `json:"error,omitempty"`
	// OOMKilled: the guest kernel's OOM killer killed a process while the
	// script ran (an agent that does not look leaves it false).
	OOMKilled bool `json:"oom_killed,omitempty"`
}

// PathRequest names a path of the job tree, relative to it (slash
// separated, no "..", "" or "." for the whole tree).
type PathRequest struct {
	Path string `json:"path"`
	// Only, for an archive, narrows it to these paths below Path (each
	// relative to Path, as the archive's names are) and the directories
	// above them; a path the tree does not hold adds nothing. Empty: the
	// whole of Path. An agent that predates it sends the whole of Path,
	// which holds what was asked.
	Only []string `json:"only,omitempty"`
	// UID and GID, for an extract, own what it creates: the path itself,
	// the directories made on the way to it and every entry (the job's
	// user, so its scripts can change the tree). Both zero leaves root
	// the owner.
	UID uint32 `json:"uid,omitempty"`
	GID uint32 `json:"gid,omitempty"`
}

// End closes an archive or extract stream; Error is "" on success.
type End struct {
	Error string `json:"error,omitempty"`
}

// controlFor returns a fresh value of kind k's control message, nil for
// raw kinds.
func controlFor(k Kind) any {
	switch k {
	case KindHello:
		return new(Hello)
	case KindRun:
		return new(Run)
	case KindSignal:
		return new(Signal)
	case KindExit:
		return new(Exit)
	case KindArchive, KindExtract:
		return new(PathRequest)
	case KindEnd:
		return new(End)
	}
	return nil
}

// Decode returns the control message a frame carries (*Hello, *Run,
// *Signal, *Exit, *PathRequest or *End), or nil for a raw frame. A
// control payload that is not a JSON object of the kind's fields wraps
// [ErrFrame].
func Decode(f Frame) (any, error) {
	v := controlFor(f.Kind)
	if v == nil {
		if !f.Kind.raw() {
			return nil, fmt.Errorf("%w: unknown kind %d", ErrFrame, uint8(f.Kind))
		}
		return nil, nil
	}
	if err := json.Unmarshal(f.Payload, v); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrFrame, f.Kind, err)
	}
	return v, nil
}

// Control builds a control frame; msg must be one of the control types.
func Control(k Kind, stream uint32, msg any) Frame {
	b, err := json.Marshal(msg)
	if err != nil { // the control types always marshal
		panic(err)
	}
	return Frame{Kind: k, Stream: stream, Payload: b}
}
