package spool

import (
	"os"
	"testing"
)

func mkTemp(dir string) (string, error) { return os.MkdirTemp(dir, "spool") }

// FuzzDecodeOffset feeds arbitrary ack/finished file contents (possibly torn
// by a crash) to the offset decoder: it must never panic, never return a
// negative offset, and round-trip what it accepts.
// spec: NODE-11
func FuzzDecodeOffset(f *testing.F) {
	f.Add(encodeOffset(0))
	f.Add(encodeOffset(1 << 40))
	f.Add(encodeOffset(12345)[:7])
	f.Add([]byte{})
	f.Add(make([]byte, 12))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, ok := decodeOffset(b)
		if !ok {
			return
		}
		if n < 0 {
			t.Fatalf("decoded negative offset %d", n)
		}
		if m, ok := decodeOffset(encodeOffset(n)); !ok || m != n {
			t.Fatalf("round trip %d -> %d %v", n, m, ok)
		}
	})
}
