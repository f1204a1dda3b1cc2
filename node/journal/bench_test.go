package journal

import (
	"fmt"
	"testing"
)

// BenchmarkAccept measures a durable start (write + fsync) with a 4 KiB spec:
// the latency the node adds before answering accepted.
func BenchmarkAccept(b *testing.B) {
	j, err := Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	spec := make([]byte, 4096)
	i := 0
	for b.Loop() {
		if _, _, err := j.Accept(fmt.Sprint(i), "", spec); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkJobCycle measures one job's whole life in a journal at its
// steady size (KeepRecorded tombstones, eight jobs under way): Accept with
// a 4 KiB spec, Running, Finished with a small result, Recorded. Each of
// the four writes is synced; the figure is what the journal costs a node
// per job, compactions included.
func BenchmarkJobCycle(b *testing.B) {
	j, err := Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	spec, result := make([]byte, 4096), make([]byte, 200)
	n := 0
	cycle := func() {
		id := fmt.Sprintf("job-%08d", n)
		n++
		if _, _, err := j.Accept(id, "r", spec); err != nil {
			b.Fatal(err)
		}
		if err := j.Running(id, "step_script"); err != nil {
			b.Fatal(err)
		}
		if err := j.Finished(id, result); err != nil {
			b.Fatal(err)
		}
		if err := j.Recorded(id); err != nil {
			b.Fatal(err)
		}
	}
	for range 8 {
		if _, _, err := j.Accept(fmt.Sprintf("live-%d", n), "r", spec); err != nil {
			b.Fatal(err)
		}
		n++
	}
	for range KeepRecorded {
		cycle()
	}
	b.ResetTimer()
	for b.Loop() {
		cycle()
	}
}
