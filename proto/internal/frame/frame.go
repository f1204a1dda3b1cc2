// Package frame reads and writes the session frame envelope shared by the
// node session (package dispatch) and the relay session (package client):
// one JSON object per WebSocket text message, {"type": …, "kind": …,
// "seq": …, …payload fields}, the payload's fields flattened beside the
// header's. Encoding is compact (json.Marshal), header first.
package frame

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Header is the envelope's fixed part.
type Header struct {
	// Type is the message type, e.g. "hello" or "job". Required.
	Type string `json:"type"`
	// Kind is the payload kind of "job" messages; empty otherwise.
	Kind string `json:"kind,omitempty"`
	// Seq numbers state-changing frames; 0 (absent) on stateless ones.
	Seq uint64 `json:"seq,omitempty"`
}

// Sentinel errors; callers' packages wrap or re-export them.
var (
	ErrTooLarge  = errors.New("frame too large")
	ErrMalformed = errors.New("malformed frame")
)

// Reserved lists the JSON keys a payload must not use.
var Reserved = []string{"type", "kind", "seq"}

// Encode writes h and payload (which must encode to a JSON object) as one
// frame of at most max bytes.
func Encode(h Header, payload any, max int) ([]byte, error) {
	hb, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrMalformed, err)
	}
	pb, err := json.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("%w: %s payload: %v", ErrMalformed, h.Type, err)
	}
	if len(pb) < 2 || pb[0] != '{' {
		return nil, fmt.Errorf("%w: %s payload is not a JSON object", ErrMalformed, h.Type)
	}
	var out []byte
	if string(pb) == "{}" {
		out = hb
	} else {
		out = make([]byte, 0, len(hb)+len(pb))
		out = append(out, hb[:len(hb)-1]...)
		out = append(out, ',')
		out = append(out, pb[1:]...)
	}
	if len(out) > max {
		return nil, fmt.Errorf("%w: %s frame is %d bytes, limit %d", ErrTooLarge, h.Type, len(out), max)
	}
	return out, nil
}

// DecodeHeader checks b's size against max and reads its header. A job
// frame as Encode writes it (type, kind and seq first) is read without
// scanning its payload, which matters for large output frames; any other
// frame is read in full.
func DecodeHeader(b []byte, max int) (Header, error) {
	if len(b) > max {
		return Header{}, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(b), max)
	}
	h, ok := leadingHeader(b)
	if !ok {
		h = Header{}
		if err := json.Unmarshal(b, &h); err != nil {
			return Header{}, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
	}
	if h.Type == "" {
		return Header{}, fmt.Errorf("%w: no type", ErrMalformed)
	}
	return h, nil
}

// leadingHeader reads a header whose type, kind and seq are b's first
// three keys, in any order, as Encode writes job frames. It reports false
// for anything else (fewer header keys, other keys first), leaving the
// full decode to the caller. It does not validate the rest of b
// (DecodePayload does). A frame repeating a header key later is ambiguous;
// the first occurrence wins here.
func leadingHeader(b []byte) (Header, bool) {
	var h Header
	d := json.NewDecoder(bytes.NewReader(b))
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return h, false
	}
	seen := 0
	for seen < 3 && d.More() {
		t, err := d.Token()
		if err != nil {
			return h, false
		}
		var dst any
		switch t {
		case "type":
			dst = &h.Type
		case "kind":
			dst = &h.Kind
		case "seq":
			dst = &h.Seq
		default:
			return h, false
		}
		if err := d.Decode(dst); err != nil {
			return h, false
		}
		seen++
	}
	return h, seen == 3 && h.Type != "" && h.Kind != "" && h.Seq != 0
}

// DecodePayload decodes b's payload fields into v, ignoring the header's
// and any unknown fields. Trailing data after the object is an error.
func DecodePayload(b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return nil
}
