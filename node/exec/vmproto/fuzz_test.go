package vmproto

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"pgregory.net/rapid"
)

// FuzzReadFrame feeds arbitrary bytes, as a hostile guest could send
// them, to the host's decoder: it must never panic, never accept a
// payload over MaxPayload, and every frame it accepts must encode back to
// the bytes it was read from.
func FuzzReadFrame(f *testing.F) {
	f.Add(AppendFrame(nil, Control(KindHello, 0, Hello{Version: Version})))
	f.Add(AppendFrame(AppendFrame(nil, Frame{Kind: KindStdout, Stream: 1, Payload: []byte("hi\n")}), Control(KindExit, 1, Exit{Code: 3})))
	f.Add(AppendFrame(nil, Control(KindEnd, 7, End{Error: "no"})))
	f.Add([]byte{byte(KindData), 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{byte(KindRun), 0, 0, 0, 1, 0, 0, 0, 2, '{', '}'})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		for {
			before := len(b) - r.Len()
			fr, err := ReadFrame(r)
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, ErrFrame) {
					t.Fatalf("ReadFrame: unexpected error %v", err)
				}
				return
			}
			if len(fr.Payload) > MaxPayload {
				t.Fatalf("payload of %d bytes accepted", len(fr.Payload))
			}
			after := len(b) - r.Len()
			if enc := AppendFrame(nil, fr); !bytes.Equal(enc, b[before:after]) {
				t.Fatalf("re-encoding differs: %x vs %x", enc, b[before:after])
			}
			msg, err := Decode(fr)
			if err != nil {
				if !errors.Is(err, ErrFrame) {
					t.Fatalf("Decode: unexpected error %v", err)
				}
				continue
			}
			if (msg == nil) != fr.Kind.raw() {
				t.Fatalf("%s decoded to %T", fr.Kind, msg)
			}
		}
	})
}

// Any sequence of frames survives encoding and decoding unchanged.
func TestFramesRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		frames := rapid.SliceOf(rapid.Custom(func(t *rapid.T) Frame {
			return Frame{
				Kind:    Kind(rapid.IntRange(1, int(kindLimit)-1).Draw(t, "kind")),
				Stream:  rapid.Uint32().Draw(t, "stream"),
				Payload: rapid.SliceOfN(rapid.Byte(), 0, 300).Draw(t, "payload"),
			}
		})).Draw(t, "frames")
		var b []byte
		for _, f := range frames {
			b = AppendFrame(b, f)
		}
		r := bytes.NewReader(b)
		for i, want := range frames {
			got, err := ReadFrame(r)
			if err != nil {
				t.Fatalf("frame %d: %v", i, err)
			}
			if got.Kind != want.Kind || got.Stream != want.Stream || !bytes.Equal(got.Payload, want.Payload) {
				t.Fatalf("frame %d: got %+v, want %+v", i, got, want)
			}
		}
		if _, err := ReadFrame(r); !errors.Is(err, io.EOF) {
			t.Fatalf("after the last frame: %v, want EOF", err)
		}
	})
}

// Every control message decodes to what was encoded.
func TestControlRoundTrip(t *testing.T) {
	msgs := []struct {
		kind Kind
		msg  any
	}{
		{KindHello, &Hello{Version: 1, Error: "x"}},
		{KindRun, &Run{Script: "echo", Shell: []string{"sh", "-e"}, Env: []string{"A=b"}, Dir: "/builds"}},
		{KindSignal, &Signal{Number: 15}},
		{KindExit, &Exit{Code: -1, Signal: "killed"}},
		{KindRun, &Run{Entrypoint: []string{"/entry"}, Command: []string{"httpd", "-f"}, UID: 1000, GID: 1001, Groups: []uint32{2000}}},
		{KindArchive, &PathRequest{Path: "out"}},
		{KindExtract, &PathRequest{Path: "group/p", UID: 1000, GID: 1000}},
		{KindEnd, &End{Error: "e"}},
	}
	for _, m := range msgs {
		got, err := Decode(Control(m.kind, 1, m.msg))
		if err != nil {
			t.Fatalf("%s: %v", m.kind, err)
		}
		if a, b := Control(m.kind, 1, got), Control(m.kind, 1, m.msg); !bytes.Equal(a.Payload, b.Payload) {
			t.Errorf("%s: %s, want %s", m.kind, a.Payload, b.Payload)
		}
	}
}
