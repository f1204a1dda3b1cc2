package dispatch

import (
	"errors"
	"fmt"

	"github.com/vk-ci/vk/proto/internal/frame"
)

// RouteNodeSession is the WebSocket endpoint of the node session on the
// hub's node listener, as an http.ServeMux pattern. The spec does not name
// it; it mirrors the relay's /v1/gitlab/session.
const RouteNodeSession = "GET /v1/node/session"

// Size limits (NSESS-15, NSESS-23, DECISIONS 12).
const (
	// MaxFrameBytes bounds one frame as sent (its JSON encoding): 1 MiB.
	// Use it as the WebSocket read limit.
	MaxFrameBytes = 1 << 20
	// MaxOutputChunk bounds an output frame's data, in raw bytes before
	// base64: 256 KiB.
	MaxOutputChunk = 256 << 10
)

// Type is a frame's "type". Unknown types fail to decode (ErrUnknownType).
type Type string

// Frame types.
const (
	TypeHello     Type = "hello"     // node → hub, first frame: [Hello]
	TypeWelcome   Type = "welcome"   // hub → node, answer to hello: [Welcome]
	TypeError     Type = "error"     // either way, before closing: [ErrorFrame]
	TypeKeepalive Type = "keepalive" // either way: [Keepalive]
	TypeReport    Type = "report"    // node → hub: [Report]
	TypeHeartbeat Type = "heartbeat" // node → hub: [Heartbeat]
	TypeSettings  Type = "settings"  // hub → node: [Settings]
	TypeJob       Type = "job"       // either way, version ≥ 3: Kind says which
)

// Kind is a job message's "kind".
type Kind string

// Job message kinds (NSESS-04..17).
const (
	KindOffer      Kind = "offer"       // hub → node: [Offer]
	KindOfferReply Kind = "offer_reply" // node → hub: [OfferReply]
	KindRenew      Kind = "renew"       // hub → node: [Renew]
	KindLease      Kind = "lease"       // node → hub: [Lease]
	KindRelease    Kind = "release"     // hub → node: [Release]
	KindStart      Kind = "start"       // hub → node: [Start]
	KindJob        Kind = "job"         // node → hub: [JobUpdate]
	KindOutput     Kind = "output"      // node → hub: [Output]
	KindOutputAck  Kind = "output_ack"  // hub → node: [OutputAck]
	KindCancel     Kind = "cancel"      // hub → node: [Cancel]
	KindResult     Kind = "result"      // node → hub: [Result]
	KindRecorded   Kind = "recorded"    // hub → node: [Recorded]
	KindHeld       Kind = "held"        // node → hub: [Held]
	KindEgress     Kind = "egress"      // node → hub, version ≥ 6: [Egress]
)

// Message is one frame's payload: one of the message types of this
// package. The interface is sealed.
type Message interface {
	// FrameType is the frame's "type".
	FrameType() Type
	// FrameKind is the frame's "kind" for job messages, "" otherwise.
	FrameKind() Kind
	sealed()
}

// Frame is one session frame: a message and its sequence number.
type Frame struct {
	// Seq numbers state-changing frames from 1 per direction and session
	// handle; it must be 0 exactly for stateless messages (hello, welcome,
	// error, keepalive; see [Stateless]).
	Seq uint64
	// Msg is the payload. Required.
	Msg Message
}

// Errors from Encode and Decode.
var (
	// ErrTooLarge: a frame exceeds MaxFrameBytes or an output chunk
	// MaxOutputChunk.
	ErrTooLarge = frame.ErrTooLarge
	// ErrMalformed: not a JSON object of the expected shape, or a seq
	// where none belongs / missing where one does.
	ErrMalformed = frame.ErrMalformed
	// ErrUnknownType: a type or kind this version does not know; see
	// [UnknownTypeError].
	ErrUnknownType = errors.New("dispatch: unknown frame type")
)

// UnknownTypeError reports a frame of a type or kind this version does not
// know; errors.Is(err, ErrUnknownType) holds. A session may log and skip
// such a frame, or end the session (the hub does: a peer that negotiated
// our version speaks only our types).
type UnknownTypeError struct {
	// Type is the frame's type.
	Type Type
	// Kind is the frame's kind; empty unless Type is "job".
	Kind Kind
}

// Error names the unknown type and kind.
func (e *UnknownTypeError) Error() string {
	if e.Kind != "" {
		return fmt.Sprintf("dispatch: unknown frame type %q kind %q", e.Type, e.Kind)
	}
	return fmt.Sprintf("dispatch: unknown frame type %q", e.Type)
}

// Is makes errors.Is(err, ErrUnknownType) true.
func (e *UnknownTypeError) Is(target error) bool { return target == ErrUnknownType }

// Stateless reports whether m carries no session state and so no seq.
func Stateless(m Message) bool {
	switch m.FrameType() {
	case TypeHello, TypeWelcome, TypeError, TypeKeepalive:
		return true
	}
	return false
}

// Encode writes f as one frame: compact JSON, header first. It fails with
// ErrTooLarge past MaxFrameBytes or for output data past MaxOutputChunk,
// and with ErrMalformed for a nil message or a seq that does not match
// [Stateless].
func Encode(f Frame) ([]byte, error) {
	if f.Msg == nil {
		return nil, fmt.Errorf("dispatch: encode: %w: no message", ErrMalformed)
	}
	if err := checkSeq(f); err != nil {
		return nil, fmt.Errorf("dispatch: encode: %w", err)
	}
	if n := outputLen(f.Msg); n > MaxOutputChunk {
		return nil, fmt.Errorf("dispatch: encode: %w: output chunk %d bytes, limit %d", ErrTooLarge, n, MaxOutputChunk)
	}
	b, err := frame.Encode(frame.Header{Type: string(f.Msg.FrameType()), Kind: string(f.Msg.FrameKind()), Seq: f.Seq}, f.Msg, MaxFrameBytes)
	if err != nil {
		return nil, fmt.Errorf("dispatch: encode: %w", err)
	}
	return b, nil
}

// Decode reads one frame; its Msg is a pointer to one of this package's
// message types (*Offer, *Start, …). Unknown fields are ignored; unknown types and
// kinds fail with *UnknownTypeError; oversize input with ErrTooLarge
// (checked before parsing); anything else malformed with ErrMalformed.
// Decode does not check the session version: see [MinVersion].
func Decode(b []byte) (Frame, error) {
	h, err := frame.DecodeHeader(b, MaxFrameBytes)
	if err != nil {
		return Frame{}, fmt.Errorf("dispatch: decode: %w", err)
	}
	m := newMessage(Type(h.Type), Kind(h.Kind))
	if m == nil {
		return Frame{}, &UnknownTypeError{Type: Type(h.Type), Kind: Kind(h.Kind)}
	}
	if err := frame.DecodePayload(b, m); err != nil {
		return Frame{}, fmt.Errorf("dispatch: decode %s %s: %w", h.Type, h.Kind, err)
	}
	f := Frame{Seq: h.Seq, Msg: m}
	if err := checkSeq(f); err != nil {
		return Frame{}, fmt.Errorf("dispatch: decode: %w", err)
	}
	if o, ok := m.(*Output); ok && len(o.Data) > MaxOutputChunk {
		return Frame{}, fmt.Errorf("dispatch: decode: %w: output chunk %d bytes, limit %d", ErrTooLarge, len(o.Data), MaxOutputChunk)
	}
	return f, nil
}

func checkSeq(f Frame) error {
	switch st := Stateless(f.Msg); {
	case st && f.Seq != 0:
		return fmt.Errorf("%w: %s frame carries seq %d", ErrMalformed, f.Msg.FrameType(), f.Seq)
	case !st && f.Seq == 0:
		return fmt.Errorf("%w: %s %s frame without seq", ErrMalformed, f.Msg.FrameType(), f.Msg.FrameKind())
	}
	return nil
}

func outputLen(m Message) int {
	switch o := m.(type) {
	case *Output:
		return len(o.Data)
	case Output:
		return len(o.Data)
	}
	return 0
}

// newMessage returns a new zero message for a type and kind, nil if
// unknown. Decode fills it.
func newMessage(t Type, k Kind) Message {
	switch t {
	case TypeHello:
		return new(Hello)
	case TypeWelcome:
		return new(Welcome)
	case TypeError:
		return new(ErrorFrame)
	case TypeKeepalive:
		return new(Keepalive)
	case TypeReport:
		return new(Report)
	case TypeHeartbeat:
		return new(Heartbeat)
	case TypeSettings:
		return new(Settings)
	case TypeJob:
		switch k {
		case KindOffer:
			return new(Offer)
		case KindOfferReply:
			return new(OfferReply)
		case KindRenew:
			return new(Renew)
		case KindLease:
			return new(Lease)
		case KindRelease:
			return new(Release)
		case KindStart:
			return new(Start)
		case KindJob:
			return new(JobUpdate)
		case KindOutput:
			return new(Output)
		case KindOutputAck:
			return new(OutputAck)
		case KindCancel:
			return new(Cancel)
		case KindResult:
			return new(Result)
		case KindRecorded:
			return new(Recorded)
		case KindHeld:
			return new(Held)
		case KindEgress:
			return new(Egress)
		}
	}
	return nil
}
