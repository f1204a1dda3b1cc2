package sched_test

import (
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/vk-ci/vk/sched"
	"github.com/vk-ci/vk/sched/schedtest"
)

// widePolicy is testPolicy with packing and automatic drains on and a
// drain hold short enough for generated histories to reach it.
func widePolicy() sched.Policy {
	p := testPolicy()
	p.PackAboveUtilization = 0.6
	p.DrainsPerPool = 1
	p.DrainMaxHold = 90 * time.Second
	p.ClaimRenewals = 1
	return p
}

// preemptionCheck tracks jobs a node accepted (running there) and fails
// when the Core ends one other than as lost, starts it again, or cancels
// it on its node (BS-25).
type preemptionCheck struct {
	running map[sched.JobID]sched.NodeID
}

func (pc *preemptionCheck) check(t *rapid.T, h *schedtest.Harness, _ []sched.NodeView, ev sched.Event, acts []sched.Action) {
	for _, a := range acts {
		switch a := a.(type) {
		case sched.EndJob:
			if n, ok := pc.running[a.Job]; ok && a.Failure != "lost" {
				t.Fatalf("job %d running on node %d ended %s %q: preempted", a.Job, n, a.Failure, a.Message)
			}
			delete(pc.running, a.Job)
		case sched.Start:
			if n, ok := pc.running[a.Job]; ok {
				t.Fatalf("job %d running on node %d started again on node %d: moved", a.Job, n, a.Node)
			}
		case sched.CancelJob:
			if n, ok := pc.running[a.Job]; ok && n == a.Node {
				t.Fatalf("job %d running on node %d cancelled there: preempted", a.Job, n)
			}
		}
	}
	switch e := ev.(type) {
	case sched.JobStartReplied:
		if v, ok := h.Core.Job(e.Job); ok && e.Accepted && v.State == "running" && v.Node == e.Node {
			pc.running[e.Job] = e.Node
		}
	case sched.JobFinished:
		delete(pc.running, e.Job)
	case sched.JobSettled:
		delete(pc.running, e.Job)
	}
}

// drainCheck fails when a node that was drained before a step and is still
// drained the same way after it received an offer or a start of anything
// but what the drain holds it for (BS-22), except backfill before the
// automatic drain's predicted completion (the Core itself checks that the
// backfilled work was predicted to end before it). Steps that may lift drains by
// design (time passing: drain_hold; policy changes; the driver's own
// DrainReserve) are not judged.
func drainCheck(t *rapid.T, h *schedtest.Harness, before []sched.NodeView, ev sched.Event, acts []sched.Action) {
	switch ev.(type) {
	case sched.Tick, sched.PolicyChanged, sched.DrainReserve:
		return
	}
	after := map[sched.NodeID]sched.NodeView{}
	for _, n := range h.Core.Nodes() {
		after[n.ID] = n
	}
	held := map[sched.NodeID]sched.NodeView{}
	for _, b := range before {
		if a, ok := after[b.ID]; ok && (b.DrainJob != 0 || b.DrainFor != "") && a.DrainJob == b.DrainJob && a.DrainFor == b.DrainFor {
			held[b.ID] = b
		}
	}
	for _, a := range acts {
		var node sched.NodeID
		var env sched.Resources
		var job sched.JobID
		switch a := a.(type) {
		case sched.Offer:
			node, env = a.Node, a.Envelope
		case sched.Start:
			if a.Reservation != 0 {
				continue // a reservation held before the drain
			}
			node, env, job = a.Node, a.Envelope, a.Job
		default:
			continue
		}
		d, ok := held[node]
		if !ok {
			continue
		}
		if d.DrainJob != 0 && job == d.DrainJob {
			continue
		}
		if d.DrainFor != "" && (sched.Placement{Pool: "linux", Envelope: env}).Key() == d.DrainFor {
			continue
		}
		if d.DrainFor != "" && h.Now.Before(d.DrainReady) {
			continue // backfill before the drain's predicted completion
		}
		t.Fatalf("after %T: %v placed on node %d while it is drained (job %d, placement %q)", ev, a, node, d.DrainJob, d.DrainFor)
	}
}

// spec: BS-21, BS-22, BS-25, ARB-32
//
// TestPropertyWide: over generated histories with packing, automatic drain
// reservations and a wide runner, every invariant holds (including the
// utilization sums and one drain per pool), no job a node accepted is ever
// ended (except lost with its node), moved or cancelled on its node, and
// a node drained across a step receives no placement but its drain's.
func TestPropertyWide(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		pc := &preemptionCheck{running: map[sched.JobID]sched.NodeID{}}
		historyWith(t, rapid.Uint64().Draw(t, "seed"), genOpts{policy: widePolicy, runners: 5,
			check: func(t *rapid.T, h *schedtest.Harness, before []sched.NodeView, ev sched.Event, acts []sched.Action) {
				pc.check(t, h, before, ev, acts)
				drainCheck(t, h, before, ev, acts)
			}})
	})
}

// spec: BS-05
//
// TestPropertyWideDeterministic: with the wide-job policy too, the same
// seed and events give a byte-identical transcript, and taking a snapshot
// after every step changes nothing the Core decides.
func TestPropertyWideDeterministic(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		seed := rapid.Uint64().Draw(t, "seed")
		h1, log := historyWith(t, seed, genOpts{policy: widePolicy, runners: 5})
		h2 := schedtest.New(widePolicy(), seed)
		for _, e := range log {
			h2.Now = e.at
			h2.Step(e.ev)
			snap := h2.Core.Snapshot()
			if got, want := snap.Len(), len(h2.Core.Nodes()); got != want {
				t.Fatalf("snapshot holds %d nodes, the Core %d", got, want)
			}
		}
		if a, b := h1.Transcript(), h2.Transcript(); a != b {
			t.Fatalf("transcripts differ:\n--- first\n%s\n--- replay with snapshots\n%s", a, b)
		}
	})
}

// spec: BS-20, BS-22, BS-23, BS-24, BS-25
//
// TestPropertyWideJobStarts: on a pool of identical nodes kept busy by
// small jobs that keep arriving and finish after random runtimes (named, so
// some have priors), a wide job that fits a node's total capacity starts
// within twice the longest small runtime of being submitted (plus the steps
// it takes to notice), however the small jobs fall: its drain reservation
// keeps new small work off one node but work predicted to end before the
// drain's predicted completion (at most the longest runtime away), which
// may backfill the node and, the runtimes here being unrelated to their
// names' statistics, run up to the longest runtime past it; no running job
// is touched.
func TestPropertyWideJobStarts(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		pol := sched.Policy{ProbeLimit: 10, DrainsPerPool: 1, DrainMaxHold: 24 * time.Hour,
			PackAboveUtilization: rapid.SampledFrom([]float64{0, 0.5, 0.7}).Draw(t, "pack")}
		h := schedtest.New(pol, rapid.Uint64().Draw(t, "seed"))
		h.Check = true
		nNodes := rapid.IntRange(1, 5).Draw(t, "nodes")
		for i := 1; i <= nNodes; i++ {
			h.Step(schedtest.Node(sched.NodeID(i), 8, 16, 100, "linux"))
		}
		small := schedtest.Runner(1, 1, "linux", schedtest.Envelope(2, 4, 1))
		wide := schedtest.Runner(2, 2, "linux", schedtest.Envelope(8, 16, 1))
		h.ConnectRelay(1, 0, small, wide)
		const maxRun = 30 * time.Minute
		names := []string{"a", "b", "c", ""}
		// finished statistics for some names, sometimes
		if rapid.Bool().Draw(t, "priors") {
			for _, n := range names[:3] {
				h.Step(sched.JobFinished{Name: n, Wall: time.Duration(rapid.IntRange(1, 30).Draw(t, "prior")) * time.Minute})
			}
		}
		ends := map[sched.JobID]time.Time{} // running small jobs and when they finish
		pc := &preemptionCheck{running: map[sched.JobID]sched.NodeID{}}
		var next sched.JobID = 1
		const wideJob = 1_000_000
		var wideAt time.Time
		wideStarted := false
		absorb := func(acts []sched.Action) {
			for _, a := range acts {
				s, ok := a.(sched.Start)
				if !ok {
					continue
				}
				if s.Job == wideJob {
					wideStarted = true
				}
				ev := sched.JobStartReplied{Job: s.Job, Node: s.Node, Accepted: true}
				more := h.Step(ev)
				pc.check(t, h, nil, ev, more)
				if s.Job != wideJob {
					ends[s.Job] = h.Now.Add(time.Duration(rapid.IntRange(1, int(maxRun/time.Minute)).Draw(t, "run")) * time.Minute)
				}
			}
		}
		submit := func(n int) {
			for range n {
				ev := sched.JobSubmitted{Job: next, Runner: 1, Name: rapid.SampledFrom(names).Draw(t, "name")}
				next++
				acts := h.Step(ev)
				pc.check(t, h, nil, ev, acts)
				absorb(acts)
			}
		}
		submit(nNodes * 4)
		steps := rapid.IntRange(1, 20).Draw(t, "warmup")
		for i := 0; ; i++ {
			h.Now = h.Now.Add(time.Minute)
			h.Step(sched.Tick{})
			// finish what is due, oldest first
			var due []sched.JobID
			for j, at := range ends {
				if !at.After(h.Now) {
					due = append(due, j)
				}
			}
			slices.Sort(due)
			for _, j := range due {
				delete(ends, j)
				ev := sched.JobFinished{Job: j}
				acts := h.Step(ev)
				pc.check(t, h, nil, ev, acts)
				absorb(acts)
				h.Step(sched.JobSettled{Job: j})
			}
			// keep the fleet under pressure from small work
			submit(rapid.IntRange(0, 3).Draw(t, "arrivals"))
			if i == steps {
				wideAt = h.Now
				ev := sched.JobSubmitted{Job: wideJob, Runner: 2}
				acts := h.Step(ev)
				absorb(acts)
			}
			if wideStarted {
				break
			}
			if !wideAt.IsZero() && h.Now.Sub(wideAt) > 2*maxRun+2*time.Minute {
				t.Fatalf("wide job not started %v after its submission (nodes %+v)", h.Now.Sub(wideAt), h.Core.Nodes())
			}
			if len(h.Failures) > 0 {
				t.Fatalf("invariants: %v", h.Failures)
			}
		}
	})
}
