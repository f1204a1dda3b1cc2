package client

import (
	"errors"
	"fmt"

	"github.com/vk-ci/vk/proto/internal/frame"
)

// MaxRelayFrameBytes bounds one relay session frame as sent: 1 MiB.
const MaxRelayFrameBytes = 1 << 20

// RelayType is a relay session frame's "type".
type RelayType string

// Relay session frame types.
const (
	RelayTypeHello        RelayType = "hello"         // relay → hub: [RelayHello]
	RelayTypeWelcome      RelayType = "welcome"       // hub → relay: [RelayWelcome]
	RelayTypeError        RelayType = "error"         // hub → relay: [RelayError]
	RelayTypeKeepalive    RelayType = "keepalive"     // either way: [RelayKeepalive]
	RelayTypeReport       RelayType = "report"        // relay → hub: [RelayReport]
	RelayTypeHeartbeat    RelayType = "heartbeat"     // relay → hub: [RelayHeartbeat]
	RelayTypeServerStatus RelayType = "server_status" // hub → relay: [ServerStatus]
	RelayTypeUpdate       RelayType = "update"        // hub → relay, version ≥ 3: [Update]
)

// RelayMessage is a relay session frame's payload: one of the relay
// message types of this package. The interface is sealed.
type RelayMessage interface {
	// RelayFrameType is the frame's "type".
	RelayFrameType() RelayType
	relaySealed()
}

// RelayFrame is one relay session frame.
type RelayFrame struct {
	// Seq numbers state-changing frames from 1 per direction; 0 exactly for
	// hello, welcome, error and keepalive.
	Seq uint64
	// Msg is the payload. Required.
	Msg RelayMessage
}

// Relay frame errors.
var (
	// ErrFrameTooLarge: a relay frame exceeds MaxRelayFrameBytes.
	ErrFrameTooLarge = frame.ErrTooLarge
	// ErrFrameMalformed: not a JSON object of the expected shape, or a
	// wrong seq.
	ErrFrameMalformed = frame.ErrMalformed
	// ErrUnknownFrame: a frame type this version does not know.
	ErrUnknownFrame = errors.New("client: unknown relay frame type")
)

func relayStateless(t RelayType) bool {
	switch t {
	case RelayTypeHello, RelayTypeWelcome, RelayTypeError, RelayTypeKeepalive:
		return true
	}
	return false
}

func checkRelaySeq(t RelayType, seq uint64) error {
	switch st := relayStateless(t); {
	case st && seq != 0:
		return fmt.Errorf("%w: %s frame carries seq %d", ErrFrameMalformed, t, seq)
	case !st && seq == 0:
		return fmt.Errorf("%w: %s frame without seq", ErrFrameMalformed, t)
	}
	return nil
}

// EncodeRelayFrame writes f as compact JSON {"type": …, "seq": …, …}.
func EncodeRelayFrame(f RelayFrame) ([]byte, error) {
	if f.Msg == nil {
		return nil, fmt.Errorf("client: encode relay frame: %w: no message", ErrFrameMalformed)
	}
	t := f.Msg.RelayFrameType()
	if err := checkRelaySeq(t, f.Seq); err != nil {
		return nil, fmt.Errorf("client: encode relay frame: %w", err)
	}
	b, err := frame.Encode(frame.Header{Type: string(t), Seq: f.Seq}, f.Msg, MaxRelayFrameBytes)
	if err != nil {
		return nil, fmt.Errorf("client: encode relay frame: %w", err)
	}
	return b, nil
}

// DecodeRelayFrame reads one relay frame; its Msg is a pointer to one of
// the relay message types. Unknown fields are ignored; unknown types fail
// with ErrUnknownFrame, oversize input with ErrFrameTooLarge.
func DecodeRelayFrame(b []byte) (RelayFrame, error) {
	h, err := frame.DecodeHeader(b, MaxRelayFrameBytes)
	if err != nil {
		return RelayFrame{}, fmt.Errorf("client: decode relay frame: %w", err)
	}
	var m RelayMessage
	switch t := RelayType(h.Type); t {
	case RelayTypeHello:
		m = new(RelayHello)
	case RelayTypeWelcome:
		m = new(RelayWelcome)
	case RelayTypeError:
		m = new(RelayError)
	case RelayTypeKeepalive:
		m = new(RelayKeepalive)
	case RelayTypeReport:
		m = new(RelayReport)
	case RelayTypeHeartbeat:
		m = new(RelayHeartbeat)
	case RelayTypeServerStatus:
		m = new(ServerStatus)
	case RelayTypeUpdate:
		m = new(Update)
	default:
		return RelayFrame{}, fmt.Errorf("%w: %q", ErrUnknownFrame, h.Type)
	}
	if h.Kind != "" {
		return RelayFrame{}, fmt.Errorf("client: decode relay frame: %w: kind %q on a relay frame", ErrFrameMalformed, h.Kind)
	}
	if err := frame.DecodePayload(b, m); err != nil {
		return RelayFrame{}, fmt.Errorf("client: decode relay frame %s: %w", h.Type, err)
	}
	if err := checkRelaySeq(m.RelayFrameType(), h.Seq); err != nil {
		return RelayFrame{}, fmt.Errorf("client: decode relay frame: %w", err)
	}
	return RelayFrame{Seq: h.Seq, Msg: m}, nil
}

// RelayMinVersion returns the oldest relay session version in which m may
// be sent: 3 for update, 2 for the rest (the oldest built).
func RelayMinVersion(m RelayMessage) int {
	if m.RelayFrameType() == RelayTypeUpdate {
		return RelayVersionUpdates
	}
	return RelayVersionAdmissions
}

// RelayFrameType returns RelayTypeHello.
func (RelayHello) RelayFrameType() RelayType { return RelayTypeHello }

// RelayFrameType returns RelayTypeWelcome.
func (RelayWelcome) RelayFrameType() RelayType { return RelayTypeWelcome }

// RelayFrameType returns RelayTypeError.
func (RelayError) RelayFrameType() RelayType { return RelayTypeError }

// RelayFrameType returns RelayTypeKeepalive.
func (RelayKeepalive) RelayFrameType() RelayType { return RelayTypeKeepalive }

// RelayFrameType returns RelayTypeReport.
func (RelayReport) RelayFrameType() RelayType { return RelayTypeReport }

// RelayFrameType returns RelayTypeHeartbeat.
func (RelayHeartbeat) RelayFrameType() RelayType { return RelayTypeHeartbeat }

// RelayFrameType returns RelayTypeServerStatus.
func (ServerStatus) RelayFrameType() RelayType { return RelayTypeServerStatus }

// RelayFrameType returns RelayTypeUpdate.
func (Update) RelayFrameType() RelayType { return RelayTypeUpdate }

func (RelayHello) relaySealed()     {}
func (RelayWelcome) relaySealed()   {}
func (RelayError) relaySealed()     {}
func (RelayKeepalive) relaySealed() {}
func (RelayReport) relaySealed()    {}
func (RelayHeartbeat) relaySealed() {}
func (ServerStatus) relaySealed()   {}
func (Update) relaySealed()         {}
