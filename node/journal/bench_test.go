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
