package sched_test

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/vk-ci/vk/sched"
	"github.com/vk-ci/vk/sched/schedtest"
)

// oneSlotNode is a node of pool linux with room for one envelope of
// Envelope(1, 4, 1) (its max_concurrency), far from wide.
func oneSlotNode(id sched.NodeID) sched.NodeReport {
	n := schedtest.Node(id, 16, 64, 100, "linux")
	n.MaxConcurrency = 1
	return n
}

// offered returns the tickets offered among acts, in order.
func offered(h *schedtest.Harness, acts []sched.Action) []sched.TicketID {
	var out []sched.TicketID
	for _, a := range acts {
		if o, ok := a.(sched.Offer); ok {
			out = append(out, o.Ticket)
		}
	}
	return out
}

// warmUp runs one job of each runner to its end on a node of its own,
// which then closes (ceiling 0), so the runners are busy (their tickets
// are not probes, ARB-18). It returns the next free ticket ID.
func warmUp(t interface{ Fatalf(string, ...any) }, h *schedtest.Harness, runners int) sched.TicketID {
	const warm = sched.NodeID(1000)
	h.Step(oneSlotNode(warm))
	tk := sched.TicketID(1)
	for r := sched.RunnerID(1); r <= sched.RunnerID(runners); r++ {
		off := offerOf(h.Step(sched.TicketQueued{Ticket: tk, Runner: r}))
		if off == nil {
			t.Fatalf("warm-up ticket %d: no offer", tk)
		}
		g := h.Step(sched.OfferReplied{Node: off.Node, Reservation: off.Reservation, Accepted: true, LeaseSecs: 90})[0].(sched.Grant)
		h.Step(sched.Claimed{Admission: g.Admission})
		h.Step(sched.Outcome{Admission: g.Admission, Kind: sched.OutcomeJob})
		job := sched.JobID(10000 + tk)
		h.Step(sched.JobSubmitted{Job: job, Runner: r, Admission: g.Admission, Reservation: g.Reservation, PlaceWithin: 300 * time.Second})
		h.Step(sched.JobStartReplied{Job: job, Node: g.Node, Accepted: true})
		h.Step(sched.JobFinished{Job: job})
		h.Step(sched.JobSettled{Job: job})
		tk++
	}
	h.Step(sched.CeilingSet{Node: warm, Zero: true})
	return tk
}

// A ticket's Ahead is the number of requests of its placement the Core
// serves before it when room frees one envelope at a time: random tenants
// with random weights and initial holdings queue tickets in a random
// order, then nodes of one slot each arrive one by one.
//
// spec: ARB-09
func TestPropertyPositionIsServiceOrder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nt := rapid.IntRange(1, 3).Draw(t, "tenants")
		pol := sched.Policy{ProbeLimit: 1000, Tenants: map[sched.TenantID]sched.TenantPolicy{}}
		var runners []sched.RunnerInfo
		for i := 1; i <= nt; i++ {
			pol.Tenants[sched.TenantID(i)] = schedtest.Tenant(rapid.IntRange(1, 3).Draw(t, fmt.Sprint("weight", i)), 0)
			ri := schedtest.Runner(sched.RunnerID(i), sched.TenantID(i), "linux", schedtest.Envelope(1, 4, 1))
			ri.RequestConcurrency = 64
			runners = append(runners, ri)
		}
		h := schedtest.New(pol, 1)
		h.Check = true
		h.ConnectRelay(1, 0, runners...)
		next := warmUp(t, h, nt)
		// initial holdings: tickets offered on nodes of one slot
		node := sched.NodeID(1)
		for i := 1; i <= nt; i++ {
			for range rapid.IntRange(0, 2).Draw(t, fmt.Sprint("held", i)) {
				h.Step(oneSlotNode(node))
				node++
				if got := offered(h, h.Step(sched.TicketQueued{Ticket: next, Runner: sched.RunnerID(i)})); len(got) != 1 {
					t.Fatalf("holding ticket %d: offers %v", next, got)
				}
				next++
			}
		}
		order := rapid.SliceOfN(rapid.IntRange(1, nt), 1, 12).Draw(t, "queue order")
		want := map[sched.TicketID]int{}
		var waiting []sched.TicketID
		for _, r := range order {
			if got := offered(h, h.Step(sched.TicketQueued{Ticket: next, Runner: sched.RunnerID(r)})); len(got) != 0 {
				t.Fatalf("ticket %d offered with no room: %v", next, got)
			}
			waiting = append(waiting, next)
			next++
		}
		for _, tk := range waiting {
			p, ok := h.Core.TicketPosition(tk)
			if !ok || !p.Queued || p.Waiting != len(waiting) || p.Class != "normal" && p.Class != "normal probe" {
				t.Fatalf("ticket %d: position %+v ok %v", tk, p, ok)
			}
			want[tk] = p.Ahead
		}
		for served := range waiting {
			h.Step(oneSlotNode(node))
			node++
			got := offered(h, h.Log[len(h.Log)-1].Actions)
			if len(got) != 1 {
				t.Fatalf("node %d: offers %v", node-1, got)
			}
			if want[got[0]] != served {
				t.Fatalf("ticket %d served %d-th, its position said %d ahead (all %v)", got[0], served, want[got[0]], want)
			}
		}
		if f := h.Failures; len(f) > 0 {
			t.Fatal(f)
		}
	})
}

// The estimated wait follows the runtime statistics: unknown before any
// job finished, then the time room frees for it after the requests ahead
// took theirs, each held for the mean runtime; an offered ticket waits for
// nothing; a ticket held back by its tenant's cap has no estimate.
//
// spec: ARB-09
func TestPositionEstimatedWait(t *testing.T) {
	pol := sched.Policy{ProbeLimit: 1000, Tenants: map[sched.TenantID]sched.TenantPolicy{2: schedtest.Tenant(1, 1)}}
	h := schedtest.New(pol, 1)
	h.Check = true
	env := schedtest.Envelope(1, 4, 1)
	r1 := schedtest.Runner(1, 1, "linux", env)
	r1.RequestConcurrency = 64
	r2 := schedtest.Runner(2, 2, "linux", env)
	r2.RequestConcurrency = 64
	h.ConnectRelay(1, 0, r1, r2)
	base := warmUp(t, h, 2) - 1
	n := schedtest.Node(1, 16, 64, 100, "linux")
	n.MaxConcurrency = 2
	h.Step(n)
	h.Step(sched.TicketQueued{Ticket: base + 6, Runner: 2}) // offered: tenant 2 holds its cap of 1
	for tk := sched.TicketID(1); tk <= 5; tk++ {
		h.Step(sched.TicketQueued{Ticket: base + tk, Runner: 1}) // 1 offered, 2..5 wait
	}
	h.Step(sched.TicketQueued{Ticket: base + 7, Runner: 2})

	pos := func(tk sched.TicketID) sched.Position {
		t.Helper()
		p, ok := h.Core.TicketPosition(base + tk)
		if !ok {
			t.Fatalf("ticket %d unknown", tk)
		}
		return p
	}
	if p := pos(1); p.Ahead != 0 || !p.WaitKnown || p.Wait != 0 || p.Queued {
		t.Errorf("offered ticket 1: %+v", p)
	}
	if p := pos(3); p.WaitKnown || p.Ahead != 1 {
		t.Errorf("ticket 3 before any statistics: %+v, want 1 ahead, wait unknown", p)
	}
	h.Step(sched.JobFinished{Job: 999, Name: "build", Wall: 10 * time.Minute})
	for _, c := range []struct {
		tk    sched.TicketID
		ahead int
		wait  time.Duration
	}{
		{2, 0, 10 * time.Minute},
		{3, 1, 10 * time.Minute},
		{4, 2, 20 * time.Minute},
		{5, 3, 20 * time.Minute},
	} {
		p := pos(c.tk)
		if p.Ahead != c.ahead || !p.WaitKnown || p.Wait != c.wait || p.Waiting != 4 {
			t.Errorf("ticket %d: %+v, want %d ahead of 4, wait %v", c.tk, p, c.ahead, c.wait)
		}
	}
	if p := pos(7); p.Queued || p.WaitKnown || p.Ahead != 4 {
		t.Errorf("ticket 7 over its tenant's cap: %+v, want not queued, all 4 ahead, no estimate", p)
	}
	if _, ok := h.Core.TicketPosition(99); ok {
		t.Error("unknown ticket has a position")
	}
	if f := h.Failures; len(f) > 0 {
		t.Fatal(f)
	}
}
