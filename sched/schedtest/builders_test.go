package schedtest

import (
	"testing"
	"time"

	"github.com/vk-ci/vk/sched"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"16G", 16 << 30, true},
		{"512M", 512 << 20, true},
		{"1T", 1 << 40, true},
		{"4K", 4 << 10, true},
		{"1024", 1024, true},
		{"", 0, false},
		{"-1G", 0, false},
		{"G", 0, false},
		{"1.5G", 0, false},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

// TestHarnessStartTracking: a start the node's held list omits is resolved,
// so re-placing that job is not reported as a double start; and a Start
// for a job whose earlier start is unresolved is.
func TestHarnessStartTracking(t *testing.T) {
	h := New(sched.Policy{}, 1)
	h.Step(Node(1, 8, 64, 100, "linux"))
	h.ConnectRelay(1, 0, Runner(1, 1, "linux", Envelope(1, 4, 1)))
	h.Step(sched.JobSubmitted{Job: 1, Runner: 1, PlaceWithin: 300 * time.Second})
	held := Node(1, 8, 64, 100, "linux")
	held.Held = &sched.Held{}
	acts := h.Step(held) // omits job 1: the Core starts it again
	if len(acts) != 1 || acts[0].(sched.Start).Job != 1 {
		t.Fatalf("after an empty held: %v, want a new start of job 1", acts)
	}
	if len(h.Failures) != 0 {
		t.Fatalf("re-placement after an empty held reported: %v", h.Failures)
	}
	// the same start again, with nothing resolving the first, is flagged
	h.starting[2] = 1
	h.Log = nil
	h.Step(sched.JobSubmitted{Job: 2, Runner: 1, PlaceWithin: 300 * time.Second})
	if len(h.Failures) != 1 {
		t.Fatalf("failures = %v, want one double start of job 2", h.Failures)
	}
}
