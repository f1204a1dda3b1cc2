package sched_test

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/vk-ci/vk/sched"
	"github.com/vk-ci/vk/sched/schedtest"
)

// spec: BS-05
//
// TestSnapshotPointInTime: a snapshot keeps showing the fleet as it was
// when taken while the Core goes on placing, and a new snapshot shows the
// change.
func TestSnapshotPointInTime(t *testing.T) {
	h := schedtest.New(sched.Policy{}, 1)
	h.Check = true
	for i := sched.NodeID(1); i <= 3; i++ {
		h.Step(schedtest.Node(i, 8, 16, 100, "linux"))
	}
	env := schedtest.Envelope(2, 4, 1)
	pl := sched.Placement{Pool: "linux", Envelope: env}
	h.ConnectRelay(1, 0, schedtest.Runner(1, 1, "linux", env))
	before := h.Core.Snapshot()
	if fits, ok := before.Fits(pl); !ok || fits != 12 {
		t.Fatalf("Fits before = %d, %v, want 12, true", fits, ok)
	}
	for j := sched.JobID(1); j <= 5; j++ {
		h.Step(sched.JobSubmitted{Job: j, Runner: 1})
	}
	after := h.Core.Snapshot()
	if fits, _ := before.Fits(pl); fits != 12 {
		t.Errorf("old snapshot's Fits changed to %d", fits)
	}
	if fits, _ := after.Fits(pl); fits != 7 {
		t.Errorf("new snapshot's Fits = %d, want 7", fits)
	}
	placed := func(s *sched.Snapshot) int {
		n := 0
		s.Nodes(func(v sched.NodeView) bool { n += v.Placed; return true })
		return n
	}
	if got := placed(before); got != 0 {
		t.Errorf("old snapshot shows %d placed, want 0", got)
	}
	if got := placed(after); got != 5 {
		t.Errorf("new snapshot shows %d placed, want 5", got)
	}
	if v, ok := after.Node(1); !ok || v.Placed != 2 {
		t.Errorf("new snapshot node 1 = %+v, %v; want 2 placed", v, ok)
	}
	var order []sched.NodeID
	after.Ranked(pl, func(r sched.RankedNode) bool { order = append(order, r.ID); return true })
	if len(order) != 3 || order[0] != 3 {
		t.Errorf("ranked = %v, want node 3 (one job) first", order)
	}
	if _, ok := after.Fits(sched.Placement{Pool: "other"}); ok {
		t.Error("Fits of a placement nobody uses: ok true")
	}
	if len(h.Failures) > 0 {
		t.Fatal(h.Failures)
	}
}

// spec: BS-05
//
// TestSnapshotConcurrentReaders: readers scan snapshots on other goroutines
// while the Core, on this one, keeps stepping (run with -race: the
// snapshot shares no memory the Core writes).
func TestSnapshotConcurrentReaders(t *testing.T) {
	h := schedtest.New(sched.Policy{ProbeLimit: 100}, 1)
	for i := sched.NodeID(1); i <= 64; i++ {
		h.Step(schedtest.Node(i, 8, 64, 100, "linux"))
	}
	env := schedtest.Envelope(1, 4, 1)
	pl := sched.Placement{Pool: "linux", Envelope: env}
	h.ConnectRelay(1, 0, schedtest.Runner(1, 1, "linux", env))
	snaps := make(chan *sched.Snapshot)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range snaps {
				total := 0
				s.Nodes(func(v sched.NodeView) bool { total += v.Placed; return true })
				fits := 0
				s.Ranked(pl, func(r sched.RankedNode) bool { fits += r.Room; return true })
				if want, _ := s.Fits(pl); fits != want {
					t.Errorf("ranked rooms sum to %d, Fits says %d", fits, want)
				}
				if total+fits != 64*16 {
					t.Errorf("placed %d + room %d != %d", total, fits, 64*16)
				}
			}
		}()
	}
	for j := sched.JobID(1); j <= 400; j++ {
		h.Step(sched.JobSubmitted{Job: j, Runner: 1})
		if j%3 == 0 {
			h.Step(sched.JobSettled{Job: j - 1})
		}
		snaps <- h.Core.Snapshot()
	}
	close(snaps)
	wg.Wait()
}

// BenchmarkSnapshot measures taking a snapshot of the target fleet (30,000
// nodes, 200,000 jobs; BS-05) once the node table exists, and a decision
// (as in BenchmarkDecision) with a snapshot taken before every one, which
// adds the copy-on-write cost of the first writes after a snapshot.
func BenchmarkSnapshot(b *testing.B) {
	f := buildFleet(b)
	before := heapMiB()
	f.c.Snapshot() // builds the node table by ID once: O(nodes)
	table := heapMiB() - before
	b.Run("take", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = f.c.Snapshot()
		}
	})
	i := 0 // with -count the sub-benchmark runs again on the same fleet
	b.Run("decision", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if i >= len(f.running) {
				b.Fatal("ran out of jobs to settle")
			}
			_ = f.c.Snapshot()
			if acts := f.c.Step(f.now, sched.JobSettled{Job: f.running[i]}); len(acts) != 2 {
				b.Fatalf("want verdict + offer, got %v", acts)
			}
			i++
			f.c.Step(f.now, sched.TicketQueued{Ticket: f.nextTk, Runner: sched.RunnerID(int(f.nextTk)%f.runners + 1)})
			f.nextTk++
		}
	})
	b.ReportMetric(table, "table-MiB")
	runtime.KeepAlive(f)
}

// BenchmarkDrainChoice measures choosing a node to drain on the target
// fleet (BS-22, BS-23): a wide ticket (a whole 32-vCPU, 128 GiB node) is
// queued on the full fleet, so the Core predicts, over all 30,000 nodes
// and their 200,000 jobs, which empties first and drains it; the ticket is
// then cancelled (the drain lifted). An op is those two Steps.
func BenchmarkDrainChoice(b *testing.B) {
	for _, priors := range []bool{false, true} {
		name := "no-priors"
		if priors {
			name = "priors"
		}
		b.Run(name, func(b *testing.B) {
			f := buildFleetWith(b, sched.Policy{DrainsPerPool: 1})
			if priors {
				f.c.Step(f.now, sched.JobFinished{Name: "build", Wall: 5 * time.Minute})
			}
			wide := schedtest.Runner(sched.RunnerID(f.runners+1), 1, "linux", schedtest.Envelope(32, 128, 100))
			wide.RequestConcurrency = 0
			f.c.Step(f.now, sched.RelayUp{Relay: 99, Session: 1})
			f.c.Step(f.now, sched.RelayInventory{Relay: 99, Runners: []sched.RunnerInfo{wide}})
			f.c.Step(f.now, sched.RelayHeartbeat{Relay: 99})
			f.c.Step(f.now, sched.TicketQueued{Ticket: f.nextTk, Runner: wide.Runner})
			if v, _ := f.c.Ticket(f.nextTk); v.Wait.Code != sched.ReasonDrain {
				b.Fatalf("the wide ticket waits for %q, want a drained node", v.Wait.Text())
			}
			f.c.Step(f.now, sched.TicketCancelled{Ticket: f.nextTk})
			f.nextTk++
			b.ReportAllocs()
			for b.Loop() {
				f.c.Step(f.now, sched.TicketQueued{Ticket: f.nextTk, Runner: wide.Runner})
				f.c.Step(f.now, sched.TicketCancelled{Ticket: f.nextTk})
				f.nextTk++
			}
			drained := 0
			for _, n := range f.c.Nodes() {
				if n.DrainFor != "" {
					drained++
				}
			}
			if drained != 0 {
				b.Fatalf("%d nodes still drained after the last cancel", drained)
			}
		})
	}
}
