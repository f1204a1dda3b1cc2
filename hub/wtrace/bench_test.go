package wtrace

import (
	"testing"
	"time"

	"github.com/vk-ci/vk/sched"
)

// The recorder's cost on the driver's goroutine: one Step of an event the
// trace keeps (a record offered to the buffer) and of one it ignores.
func BenchmarkStep(b *testing.B) {
	cfg := Config{Dir: b.TempDir()}.WithDefaults("")
	r, err := Open(cfg, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	now := time.Unix(1_800_000_000, 0)
	b.Run("demand", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			r.Step(now, sched.TicketQueued{Ticket: sched.TicketID(i), Runner: 1}, nil)
		}
	})
	b.Run("tick", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			r.Step(now, sched.Tick{}, nil)
		}
	})
}
