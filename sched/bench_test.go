package sched_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/vk-ci/vk/sched"
	"github.com/vk-ci/vk/sched/schedtest"
)

// Fleet shape of the scale target (seed 003, BS-07/08, issue 3).
const (
	benchNodes   = 30_000
	benchAllocs  = 200_000
	benchWaiting = 10_000
	benchTenants = 1_000
	benchRelays  = 32
	benchPerRly  = 63 // runners per relay (≤ 64, RSESS-09)
)

type benchFleet struct {
	c       *sched.Core
	now     time.Time
	running []sched.JobID // jobs to settle, oldest first
	nextTk  sched.TicketID
	nextJob sched.JobID
	runners int
}

// buildFleet builds the target state through the Core's ordinary events:
// every allocation is a job that went ticket → offer → grant → claim →
// outcome job → submission → start, so the state is what a hub holds.
func buildFleet(tb testing.TB) *benchFleet { return buildFleetWith(tb, sched.Policy{}) }

// buildFleetWith is buildFleet with the wide-job fields of extra
// (PackAboveUtilization, DrainsPerPool, WideFraction, DrainMaxHold) set.
func buildFleetWith(tb testing.TB, extra sched.Policy) *benchFleet {
	// The 10,000 waiting tickets exceed API-20's default 4,096
	// (256 per relay): the benchmark lifts both limits in its policy. Offers
	// made in the timed loop stay unanswered (time is frozen), so they count
	// as outstanding tickets too.
	pol := sched.Policy{ProbeLimit: 1, TicketLimit: 1 << 30, RelayTicketLimit: 1 << 30,
		PackAboveUtilization: extra.PackAboveUtilization, DrainsPerPool: extra.DrainsPerPool,
		WideFraction: extra.WideFraction, DrainMaxHold: extra.DrainMaxHold}
	f := &benchFleet{c: sched.New(pol, 1), now: schedtest.Start, nextTk: 1, nextJob: 1}
	env := schedtest.Envelope(2, 8, 20)
	step := func(ev sched.Event) []sched.Action { return f.c.Step(f.now, ev) }
	// caps sum to benchAllocs: the fleet is full once they all run
	for i := 1; i <= benchNodes; i++ {
		r := schedtest.Node(sched.NodeID(i), 32, 128, 1000, "linux")
		r.MaxConcurrency = benchAllocs / benchNodes
		if i <= benchAllocs%benchNodes {
			r.MaxConcurrency++
		}
		step(r)
	}
	rid := sched.RunnerID(1)
	for rl := sched.RelayID(1); rl <= benchRelays; rl++ {
		var rs []sched.RunnerInfo
		for range benchPerRly {
			t := sched.TenantID(int(rid)%benchTenants + 1)
			ri := schedtest.Runner(rid, t, "linux", env)
			ri.RequestConcurrency = 0 // no per-runner bound: offers made during the run stay outstanding
			rs = append(rs, ri)
			rid++
		}
		step(sched.RelayUp{Relay: rl, Session: 1})
		step(sched.RelayInventory{Relay: rl, Runners: rs})
		step(sched.RelayHeartbeat{Relay: rl})
	}
	f.runners = int(rid - 1)
	// fill the fleet through the full admission path
	for len(f.running) < benchAllocs {
		r := sched.RunnerID(len(f.running)%f.runners + 1)
		acts := step(sched.TicketQueued{Ticket: f.nextTk, Runner: r})
		f.nextTk++
		var off *sched.Offer
		for _, a := range acts {
			if o, ok := a.(sched.Offer); ok {
				off = &o
			}
		}
		if off == nil {
			tb.Fatalf("no offer at %d allocations: %v", len(f.running), acts)
		}
		var g sched.Grant
		for _, a := range step(sched.OfferReplied{Node: off.Node, Reservation: off.Reservation, Accepted: true, LeaseSecs: 90}) {
			if x, ok := a.(sched.Grant); ok {
				g = x
			}
		}
		step(sched.Claimed{Admission: g.Admission})
		step(sched.Outcome{Admission: g.Admission, Kind: sched.OutcomeJob})
		step(sched.JobSubmitted{Job: f.nextJob, Runner: r, Admission: g.Admission, Reservation: g.Reservation, PlaceWithin: 300 * time.Second})
		step(sched.JobStartReplied{Job: f.nextJob, Node: g.Node, Accepted: true})
		f.running = append(f.running, f.nextJob)
		f.nextJob++
	}
	// then the waiting tickets: the fleet is full, so they wait
	for range benchWaiting {
		r := sched.RunnerID(int(f.nextTk)%f.runners + 1)
		if acts := step(sched.TicketQueued{Ticket: f.nextTk, Runner: r}); len(acts) != 1 || acts[0].(sched.Verdict).Code != sched.VerdictPending {
			tb.Fatalf("a waiting ticket was placed on a full fleet: %v", acts)
		}
		f.nextTk++
	}
	return f
}

func heapMiB() float64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapAlloc) / (1 << 20)
}

// BenchmarkDecision measures one arbitration + placement decision on the
// target fleet: a job settles (its room frees), the Core picks the next
// ticket among 10,000 waiting (class, then tenant share, then age) and the
// least loaded node with room, and sends an offer; a new ticket is queued so
// the queue stays at 10,000. heap-MiB is the live heap of that state.
// It measures the budgets of BS-03/BS-04 (figures in docs/benchmarks.md);
// TestScaleState asserts the memory budget.
func BenchmarkDecision(b *testing.B) { benchDecision(b, sched.Policy{}) }

// spec: BS-04, BS-21
//
// BenchmarkDecisionWide is BenchmarkDecision with the wide-job policy on
// (PackAboveUtilization 0.7, DrainsPerPool 1): the full fleet is above the
// threshold, so every decision packs (reads its node index backwards).
func BenchmarkDecisionWide(b *testing.B) {
	benchDecision(b, sched.Policy{PackAboveUtilization: 0.7, DrainsPerPool: 1})
}

func benchDecision(b *testing.B, extra sched.Policy) {
	before := heapMiB()
	f := buildFleetWith(b, extra)
	heap := heapMiB() - before
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		if i >= len(f.running) {
			b.Fatal("ran out of jobs to settle")
		}
		acts := f.c.Step(f.now, sched.JobSettled{Job: f.running[i]})
		i++
		if len(acts) != 2 {
			b.Fatalf("want verdict + offer, got %v", acts)
		}
		f.c.Step(f.now, sched.TicketQueued{Ticket: f.nextTk, Runner: sched.RunnerID(int(f.nextTk)%f.runners + 1)})
		f.nextTk++
	}
	b.ReportMetric(heap, "heap-MiB")
	runtime.KeepAlive(f)
}

// BenchmarkNodeHeartbeat measures ingesting one node heartbeat (a new
// 1-minute load average) on the same full fleet: the node is re-keyed in
// its placements' indexes (BS-09: about 4,000 reports/s per instance).
// About 20,000 nodes have room, so most heartbeats move an index entry.
// It measures BS-09's ingest budget (figures in docs/benchmarks.md).
func BenchmarkNodeHeartbeat(b *testing.B) {
	f := buildFleet(b)
	// free one slot on most nodes (the first 30,000 jobs went one per node);
	// 10,000 of them go to the waiting tickets, the rest stay in the index
	for _, j := range f.running[:benchNodes] {
		f.c.Step(f.now, sched.JobSettled{Job: j})
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		f.c.Step(f.now, sched.NodeHeartbeat{Node: sched.NodeID(i%benchNodes + 1), Load1: float64(i % 32), HasLoad: true})
	}
}

// spec: BS-07, BS-08
//
// TestScaleState builds the target state (30,000 nodes, 200,000 running
// jobs, 10,000 waiting tickets, 1,000 tenants) through ordinary events and
// checks its live heap stays within 64 MiB and that a freed slot still goes
// to a waiting ticket.
func TestScaleState(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 200,000 jobs")
	}
	before := heapMiB()
	f := buildFleet(t)
	if heap := heapMiB() - before; heap > 64 {
		t.Errorf("live heap of the target state = %.1f MiB, want ≤ 64", heap)
	}
	acts := f.c.Step(f.now, sched.JobSettled{Job: f.running[0]})
	if len(acts) != 2 {
		t.Fatalf("settling a job on the full fleet = %v, want verdict + offer", acts)
	}
	if _, ok := acts[1].(sched.Offer); !ok {
		t.Fatalf("second action %v, want an offer", acts[1])
	}
	runtime.KeepAlive(f)
}
