package spool

import (
	"bytes"
	"testing"

	"pgregory.net/rapid"
)

// hub models the hub's side of NODE-12: it appends each chunk at its stored
// length, trims an overlap and treats a gap as a protocol error.
type hub struct {
	t    *rapid.T
	data []byte
}

func (h *hub) receive(off int64, b []byte) {
	if off > int64(len(h.data)) {
		h.t.Fatalf("gap: chunk at %d, hub holds %d", off, len(h.data))
	}
	if end := off + int64(len(b)); end > int64(len(h.data)) {
		h.data = append(h.data, b[int64(len(h.data))-off:]...)
	}
}

// spec: NODE-11, NODE-12, NODE-13, NSESS-24, FAIL-18
func TestPropertyResendReproducesStream(t *testing.T) {
	dir := t.TempDir()
	rapid.Check(t, func(t *rapid.T) {
		sub, err := mkTemp(dir)
		if err != nil {
			t.Fatal(err)
		}
		s, err := Open(sub, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { s.Close() }()
		var stream []byte // everything produced
		h := &hub{t: t}
		var sendOff int64
		seed := byte(0)
		steps := rapid.IntRange(1, 60).Draw(t, "steps")
		for range steps {
			switch rapid.IntRange(0, 6).Draw(t, "op") {
			case 0, 1: // produce, within the room left
				st := s.Status()
				n := rapid.IntRange(0, 600<<10).Draw(t, "n")
				n = int(min(int64(n), Window-(st.Produced-st.Acked)))
				p := make([]byte, n)
				for i := range p {
					seed++
					p[i] = seed
				}
				if _, err := s.Append(t.Context(), p); err != nil {
					t.Fatal(err)
				}
				stream = append(stream, p...)
			case 2: // send the next chunk
				b, err := s.ReadFrom(sendOff, rapid.IntRange(1, MaxChunk).Draw(t, "max"))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(b, stream[sendOff:sendOff+int64(len(b))]) {
					t.Fatalf("chunk at %d differs from the stream", sendOff)
				}
				if rapid.Bool().Draw(t, "lost") {
					// The message is lost with the connection; on the new
					// session the hub acks what it holds and the sender
					// resends from there.
					sendOff = int64(len(h.data))
					if err := s.Ack(sendOff); err != nil {
						t.Fatal(err)
					}
					break
				}
				h.receive(sendOff, b)
				sendOff += int64(len(b))
			case 3: // the hub acks part of what it holds
				st := s.Status()
				off := rapid.Int64Range(st.Acked, int64(len(h.data))).Draw(t, "ack")
				if err := s.Ack(off); err != nil {
					t.Fatal(err)
				}
			case 4: // node restart
				s.Close()
				if s, err = Open(sub, Options{}); err != nil {
					t.Fatal(err)
				}
				if st := s.Status(); st.Produced != int64(len(stream)) {
					t.Fatalf("produced after reopen = %d, want %d", st.Produced, len(stream))
				}
				sendOff = int64(len(h.data))
				if err := s.Ack(sendOff); err != nil {
					t.Fatal(err)
				}
			default: // read from an arbitrary offset at or after the ack
				st := s.Status()
				off := rapid.Int64Range(st.Acked, st.Produced).Draw(t, "from")
				var got []byte
				for {
					b, err := s.ReadFrom(off+int64(len(got)), rapid.IntRange(1, MaxChunk).Draw(t, "max"))
					if err != nil {
						t.Fatal(err)
					}
					if len(b) == 0 {
						break
					}
					got = append(got, b...)
				}
				end := min(st.Produced, st.Acked+Window)
				if !bytes.Equal(got, stream[off:end]) {
					t.Fatalf("read from %d: %d bytes, want %d of the stream", off, len(got), end-off)
				}
			}
		}
		// The job ends: send and ack everything; the result waits for it.
		n, err := s.Finish()
		if err != nil || n != int64(len(stream)) {
			t.Fatalf("Finish = %d %v", n, err)
		}
		for !s.AllAcked() {
			b, err := s.ReadFrom(sendOff, MaxChunk)
			if err != nil {
				t.Fatal(err)
			}
			h.receive(sendOff, b)
			sendOff += int64(len(b))
			if err := s.Ack(int64(len(h.data))); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(h.data, stream) {
			t.Fatalf("hub holds %d bytes, want the %d produced, byte for byte", len(h.data), len(stream))
		}
	})
}
