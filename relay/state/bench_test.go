package state

import "testing"

// BenchmarkStorePut measures one durable record write (temp file, fsync,
// rename, directory fsync) with 10 jobs in the file — the cost the relay pays
// per job phase change and per accepted trace patch.
func BenchmarkStorePut(b *testing.B) {
	s, err := Open(b.TempDir(), "r", "relay-1")
	if err != nil {
		b.Fatal(err)
	}
	for i := range int64(10) {
		if err := s.Put(job(i + 1)); err != nil {
			b.Fatal(err)
		}
	}
	j := job(5)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		j.TraceOffset = int64(i)
		if err := s.Put(j); err != nil {
			b.Fatal(err)
		}
	}
}
