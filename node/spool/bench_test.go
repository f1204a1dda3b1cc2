package spool

import (
	"testing"
)

// BenchmarkAppendSendAck measures the output path: 128-byte trace lines
// appended, sent in chunks of up to 256 KiB (one fsync each) and acked.
func BenchmarkAppendSendAck(b *testing.B) {
	s, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	line := make([]byte, 128)
	var sent int64
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		if _, err := s.Append(b.Context(), line); err != nil {
			b.Fatal(err)
		}
		if st := s.Status(); st.Produced-sent >= MaxChunk {
			c, err := s.ReadFrom(sent, MaxChunk)
			if err != nil {
				b.Fatal(err)
			}
			sent += int64(len(c))
			s.Ack(sent)
		}
	}
}
