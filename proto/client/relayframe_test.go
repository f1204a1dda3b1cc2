package client

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRelayFrameErrors: oversize, unknown types, misplaced seq and
// malformed input are refused with their errors.
//
// spec: RSESS-01, RSESS-10
func TestRelayFrameErrors(t *testing.T) {
	big := `{"type":"report","seq":1,"host":"` + strings.Repeat("x", MaxRelayFrameBytes) + `"}`
	for _, tc := range []struct {
		name string
		in   string
		want error
	}{
		{"oversize", big, ErrFrameTooLarge},
		{"unknown type", `{"type":"gossip","seq":1}`, ErrUnknownFrame},
		{"no type", `{"seq":1}`, ErrFrameMalformed},
		{"not an object", `[1,2]`, ErrFrameMalformed},
		{"truncated", `{"type":"report","seq":1`, ErrFrameMalformed},
		{"trailing data", `{"type":"keepalive"}{"type":"keepalive"}`, ErrFrameMalformed},
		{"trailing brace", `{"type":"keepalive"}}`, ErrFrameMalformed},
		{"stateful without seq", `{"type":"heartbeat","runners":[]}`, ErrFrameMalformed},
		{"stateless with seq", `{"type":"keepalive","seq":4}`, ErrFrameMalformed},
		{"kind on relay frame", `{"type":"report","kind":"offer","seq":1}`, ErrFrameMalformed},
		{"wrong field type", `{"type":"report","seq":1,"concurrent":"ten"}`, ErrFrameMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := DecodeRelayFrame([]byte(tc.in)); !errors.Is(err, tc.want) {
				t.Errorf("DecodeRelayFrame = %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := EncodeRelayFrame(RelayFrame{Msg: &RelayReport{Host: strings.Repeat("x", MaxRelayFrameBytes)}, Seq: 1}); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("encode oversize = %v", err)
	}
	if _, err := EncodeRelayFrame(RelayFrame{Msg: &RelayHeartbeat{}}); !errors.Is(err, ErrFrameMalformed) {
		t.Errorf("encode heartbeat without seq = %v", err)
	}
	if _, err := EncodeRelayFrame(RelayFrame{Seq: 1, Msg: RelayKeepalive{}}); !errors.Is(err, ErrFrameMalformed) {
		t.Errorf("encode keepalive with seq = %v", err)
	}
	if _, err := EncodeRelayFrame(RelayFrame{}); !errors.Is(err, ErrFrameMalformed) {
		t.Errorf("encode nil = %v", err)
	}
	if b, err := EncodeRelayFrame(RelayFrame{Msg: RelayKeepalive{}}); err != nil || string(b) != `{"type":"keepalive"}` {
		t.Errorf("keepalive = %s, %v", b, err)
	}
	if RelayMinVersion(&Update{}) != 3 || RelayMinVersion(&RelayHeartbeat{}) != 2 {
		t.Error("RelayMinVersion wrong")
	}
}

// FuzzDecodeRelayFrame: the hub decodes every frame a relay sends.
// Decoding never panics; whatever decodes re-encodes and decodes again to
// the same bytes.
//
// spec: RSESS-01
func FuzzDecodeRelayFrame(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "relay_*.json"))
	more, _ := filepath.Glob(filepath.Join("testdata", "server_status_*.json"))
	for _, p := range append(files, more...) {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"type":"heartbeat","seq":1,"runners":[{"name":"x","state":"odd","last_answer":{"at":"bad"}}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := DecodeRelayFrame(b)
		if err != nil {
			return
		}
		enc, err := EncodeRelayFrame(fr)
		if err != nil {
			if errors.Is(err, ErrFrameTooLarge) {
				return // re-encoding may grow (escapes); the limit still holds
			}
			t.Fatalf("re-encode of %s: %v", b, err)
		}
		fr2, err := DecodeRelayFrame(enc)
		if err != nil {
			t.Fatalf("decode of own encoding %s: %v", enc, err)
		}
		enc2, err := EncodeRelayFrame(fr2)
		if err != nil || string(enc2) != string(enc) {
			t.Fatalf("unstable: %s vs %s (%v)", enc, enc2, err)
		}
	})
}

// TestEveryRelayMessageHasGolden: each relay frame type is pinned by at
// least one golden file.
//
// spec: PROTO-01
func TestEveryRelayMessageHasGolden(t *testing.T) {
	seen := map[RelayType]bool{}
	files, _ := filepath.Glob(filepath.Join("testdata", "*.json"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if f, err := DecodeRelayFrame(b); err == nil {
			seen[f.Msg.RelayFrameType()] = true
		}
	}
	for _, ty := range []RelayType{RelayTypeHello, RelayTypeWelcome, RelayTypeError, RelayTypeKeepalive,
		RelayTypeReport, RelayTypeHeartbeat, RelayTypeServerStatus, RelayTypeUpdate} {
		if !seen[ty] {
			t.Errorf("relay frame %q has no golden file", ty)
		}
	}
}
