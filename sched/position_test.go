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
	var ids []sched.RunnerID
	for r := sched.RunnerID(1); r <= sched.RunnerID(runners); r++ {
		ids = append(ids, r)
	}
	return warmUpRunners(t, h, ids)
}

// warmUpRunners is warmUp for the given runners.
func warmUpRunners(t interface{ Fatalf(string, ...any) }, h *schedtest.Harness, runners []sched.RunnerID) sched.TicketID {
	return warmUpOn(t, h, oneSlotNode(1000), runners)
}

// warmUpOn is warmUpRunners on the given node.
func warmUpOn(t interface{ Fatalf(string, ...any) }, h *schedtest.Harness, warmNode sched.NodeReport, runners []sched.RunnerID) sched.TicketID {
	warm := warmNode.Node
	h.Step(warmNode)
	tk := sched.TicketID(1)
	for _, r := range runners {
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

// A ticket's Ahead is the number of competing requests the Core serves
// before it when room frees one envelope at a time, and SamePlacement how
// many of them are of its own placement: random tenants with random
// weights and initial holdings queue tickets of two placements of one
// pool (envelopes of different sizes, both fitting every node) in a
// random order, then nodes of one slot each arrive one by one, each
// serving whichever placement's request is first.
//
// spec: ARB-09
// spec: ARB-05
func TestPropertyPositionIsServiceOrder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nt := rapid.IntRange(1, 3).Draw(t, "tenants")
		envB := rapid.SampledFrom([]sched.Resources{
			schedtest.Envelope(2, 4, 1), schedtest.Envelope(1, 8, 1), schedtest.Envelope(3, 12, 1),
		}).Draw(t, "second envelope")
		pol := sched.Policy{ProbeLimit: 1000, Tenants: map[sched.TenantID]sched.TenantPolicy{}}
		var runners []sched.RunnerInfo
		var ids []sched.RunnerID
		for i := 1; i <= nt; i++ {
			pol.Tenants[sched.TenantID(i)] = schedtest.Tenant(rapid.IntRange(1, 3).Draw(t, fmt.Sprint("weight", i)), 0)
			for k, env := range []sched.Resources{schedtest.Envelope(1, 4, 1), envB} {
				ri := schedtest.Runner(sched.RunnerID(10*k+i), sched.TenantID(i), "linux", env)
				ri.RequestConcurrency = 64
				runners = append(runners, ri)
				ids = append(ids, ri.Runner)
			}
		}
		placement := func(r sched.RunnerID) int { return int(r) / 10 }
		h := schedtest.New(pol, 1)
		h.Check = true
		h.ConnectRelay(1, 0, runners...)
		next := warmUpRunners(t, h, ids)
		// initial holdings: tickets offered on nodes of one slot
		node := sched.NodeID(1)
		for i := 1; i <= nt; i++ {
			for j := range rapid.IntRange(0, 2).Draw(t, fmt.Sprint("held", i)) {
				h.Step(oneSlotNode(node))
				node++
				r := rapid.SampledFrom(ids).Draw(t, fmt.Sprint("held runner", i, j))
				r = sched.RunnerID(10*placement(r) + i)
				if got := offered(h, h.Step(sched.TicketQueued{Ticket: next, Runner: r})); len(got) != 1 {
					t.Fatalf("holding ticket %d: offers %v", next, got)
				}
				next++
			}
		}
		order := rapid.SliceOfN(rapid.SampledFrom(ids), 1, 12).Draw(t, "queue order")
		type want struct{ ahead, same, placement int }
		wants := map[sched.TicketID]want{}
		var waiting []sched.TicketID
		for _, r := range order {
			if got := offered(h, h.Step(sched.TicketQueued{Ticket: next, Runner: r})); len(got) != 0 {
				t.Fatalf("ticket %d offered with no room: %v", next, got)
			}
			waiting = append(waiting, next)
			wants[next] = want{placement: placement(r)}
			next++
		}
		for _, tk := range waiting {
			p, ok := h.Core.TicketPosition(tk)
			if !ok || !p.Queued || p.Waiting != len(waiting) || p.Class != "normal" && p.Class != "normal probe" {
				t.Fatalf("ticket %d: position %+v ok %v", tk, p, ok)
			}
			w := wants[tk]
			w.ahead, w.same = p.Ahead, p.SamePlacement
			wants[tk] = w
		}
		servedOf := map[int]int{} // per placement, tickets served so far
		for served := range waiting {
			h.Step(oneSlotNode(node))
			node++
			got := offered(h, h.Log[len(h.Log)-1].Actions)
			if len(got) != 1 {
				t.Fatalf("node %d: offers %v", node-1, got)
			}
			w := wants[got[0]]
			if w.ahead != served || w.same != servedOf[w.placement] {
				t.Fatalf("ticket %d served %d-th (%d-th of its placement), its position said %d ahead (%d of its placement) (all %v)",
					got[0], served, servedOf[w.placement], w.ahead, w.same, wants)
			}
			servedOf[w.placement]++
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

// Only requests that may take the same room compete: placements whose
// queues share a serving node where both envelopes fit. Nodes of one slot
// are either ssd or hdd; placement X wants ssd, Y hdd, Z either, W an
// envelope no node holds. One tenant, so requests go by age. The
// estimated wait lets every competing request ahead take its turn.
//
// spec: ARB-05
func TestPositionCountsCompetingPlacements(t *testing.T) {
	pol := sched.Policy{ProbeLimit: 1000}
	h := schedtest.New(pol, 1)
	h.Check = true
	env := schedtest.Envelope(1, 4, 1)
	runner := func(id sched.RunnerID, env sched.Resources, labels ...string) sched.RunnerInfo {
		r := schedtest.Runner(id, 1, "linux", env)
		r.Placement.Labels = labels
		r.RequestConcurrency = 64
		return r
	}
	const x, y, z, w = 1, 2, 3, 4
	h.ConnectRelay(1, 0, runner(x, env, "ssd"), runner(y, env, "hdd"), runner(z, env), runner(w, schedtest.Envelope(1, 128, 1)))
	warm := schedtest.Node(1000, 16, 256, 100, "linux")
	warm.MaxConcurrency = 1
	warm.Labels = []string{"hdd", "ssd"}
	next := warmUpOn(t, h, warm, []sched.RunnerID{x, y, z, w})
	h.Step(sched.NodeLost{Node: 1000}) // it served them all: gone, it shares no room
	for i, label := range []string{"ssd", "hdd"} {
		n := oneSlotNode(sched.NodeID(1 + i))
		n.Labels = []string{label}
		h.Step(n)
	}
	// fill both nodes, then queue
	for _, r := range []sched.RunnerID{x, y} {
		if got := offered(h, h.Step(sched.TicketQueued{Ticket: next, Runner: r})); len(got) != 1 {
			t.Fatalf("filling ticket %d: offers %v", next, got)
		}
		next++
	}
	queued := map[string]sched.TicketID{}
	for _, q := range []struct {
		name string
		r    sched.RunnerID
	}{{"x1", x}, {"y1", y}, {"w1", w}, {"z1", z}, {"x2", x}} {
		h.Step(sched.TicketQueued{Ticket: next, Runner: q.r})
		queued[q.name] = next
		next++
	}
	// every job runs 10 minutes: each node's offer ends then, and each
	// request ahead holds the room it takes as long
	h.Step(sched.JobFinished{Job: 999, Name: "build", Wall: 10 * time.Minute})
	for _, c := range []struct {
		name                 string
		ahead, same, waiting int
		wait                 time.Duration // 0: unknown
	}{
		{"x1", 0, 0, 3, 10 * time.Minute}, // x1 x2 z1; node 1 frees at 10m
		{"y1", 0, 0, 2, 10 * time.Minute}, // y1 z1
		{"w1", 0, 0, 1, 0},                // fits no node: competes with nobody
		{"z1", 2, 0, 4, 20 * time.Minute}, // x1 y1 z1 x2; nodes 1 and 2 free at 10m, x1 and y1 take them
		{"x2", 2, 1, 3, 30 * time.Minute}, // x1 z1 x2; node 1 alone, each ahead holds it 10m
	} {
		p, ok := h.Core.TicketPosition(queued[c.name])
		if !ok || !p.Queued || p.Ahead != c.ahead || p.SamePlacement != c.same || p.Waiting != c.waiting ||
			p.WaitKnown != (c.wait > 0) || p.Wait != c.wait {
			t.Errorf("%s: %+v, want %d ahead (%d of its placement) of %d, wait %v", c.name, p, c.ahead, c.same, c.waiting, c.wait)
		}
	}
	if f := h.Failures; len(f) > 0 {
		t.Fatal(f)
	}
}

// BenchmarkTicketPosition is one position in a full pool of 1,000 nodes
// with about 3,000 tickets of 100 tenants waiting in two placements, half
// of the nodes serving only one of them.
func BenchmarkTicketPosition(b *testing.B) {
	pol := sched.Policy{ProbeLimit: 1, TicketLimit: 1 << 20, RelayTicketLimit: 1 << 20}
	c := sched.New(pol, 1)
	now := schedtest.Start
	for i := 1; i <= 1000; i++ {
		n := schedtest.Node(sched.NodeID(i), 16, 64, 100, "linux")
		n.MaxConcurrency = 1
		if i%2 == 0 {
			n.Labels = []string{"ssd"}
		}
		c.Step(now, n)
	}
	var rs []sched.RunnerInfo
	for i := 1; i <= 200; i++ {
		r := schedtest.Runner(sched.RunnerID(i), sched.TenantID(i%100+1), "linux", schedtest.Envelope(1+int64(i%2), 4, 1))
		if i%2 == 0 {
			r.Placement.Labels = []string{"ssd"}
		}
		r.RequestConcurrency = 0
		rs = append(rs, r)
	}
	c.Step(now, sched.RelayUp{Relay: 1, Session: 1})
	c.Step(now, sched.RelayInventory{Relay: 1, Runners: rs})
	c.Step(now, sched.RelayHeartbeat{Relay: 1})
	for tk := sched.TicketID(1); tk <= 3000; tk++ {
		c.Step(now, sched.TicketQueued{Ticket: tk, Runner: sched.RunnerID(int(tk)%200 + 1)})
	}
	if p, _ := c.TicketPosition(2999); p.Waiting < 2000 || p.SamePlacement == p.Ahead {
		b.Fatalf("position %+v: want 2,000 waiting in two placements", p)
	}
	b.ResetTimer()
	for i := range b.N {
		if _, ok := c.TicketPosition(sched.TicketID(1000 + i%2000)); !ok {
			b.Fatal("no position")
		}
	}
}
