package job

import "testing"

func BenchmarkRedacted(b *testing.B) {
	j := fullJob()
	b.ReportAllocs()
	for b.Loop() {
		_ = j.Redacted()
	}
}

func BenchmarkCheckSize(b *testing.B) {
	s := NewGitLabCI(fullJob())
	b.ReportAllocs()
	for b.Loop() {
		if err := s.CheckSize(); err != nil {
			b.Fatal(err)
		}
	}
}
