package sched

import (
	"cmp"
	"slices"
	"time"
)

// Fairness drains (DECISIONS 13 against fragmentation, built on the
// automatic drains of wide.go).
//
// Room frees in pieces: when a 2-vCPU job ends, its 2 vCPUs fit no 8-vCPU
// request, so work conservation (ARB-10) gives them to whoever has 2-vCPU
// work waiting, over its share or not, and a tenant whose requests are
// larger than the pieces that free gets room only when enough of one node
// frees at once — with the other tenant backlogged, never. So when a
// tenant above the share of another is about to take room while that other
// tenant's placement of the same pool and of the same or a better class
// starves (no node has room for its envelope, which is not wide: wide work
// has its own drains), one node of the pool is held for the starved
// placement instead: the node predicted to fit its envelope soonest, as
// its jobs end in the order of their expected remaining time (BS-23;
// before any job finished there is no prediction and no such hold). It
// takes no other work until the envelope fits and the placement's first
// waiter takes it. The hold is bounded: a node is chosen only when its
// fit is predicted within Policy.FairDrainMaxWait, it is lifted after
// that long, a placement holds at most one drain per waiting request, and
// a pool at most fairDrainCap fairness drains, and none while its wide work
// waits for a drain it could still get (wide drains first: a node held
// for fairness is one wide work cannot drain). Nothing running is touched
// (BS-25).

// fairDrainCap is how many fairness drains pool ps may hold at once: a
// quarter of its serving nodes, at least one (as many as drainCap's
// default for wide work).
func fairDrainCap(ps *poolStat) int { return max(1, ps.serving/4) }

// noteStarved records p, whose first waiter w found no node with room, as
// its pool's candidate for a fairness drain when p's envelope is not wide
// and p's waiter has a lower share than the candidate's.
func (c *Core) noteStarved(p *placementQueue, w *waiter) {
	ps := p.ps
	if c.pol.FairDrainMaxWait < 0 || c.wideSomewhere(ps, p.pl.Envelope) {
		return
	}
	if f := ps.fairWant; f != nil && f != p && f.starved {
		if fw, _ := c.pick(f, false); fw != nil && fw.tq.kShare <= w.tq.kShare {
			return
		}
	}
	ps.fairWant = p
}

// maybeFairDrain holds a node for the pool's starved placement before w,
// of placement p and internal class cls, takes room, when the starved
// placement's first waiter has a lower share and a class ranked no lower.
// It reports whether it placed a drain (the node index changed).
func (c *Core) maybeFairDrain(p *placementQueue, w *waiter, cls int) bool {
	ps := p.ps
	q := ps.fairWant
	if q == nil || q == p {
		return false
	}
	if !q.starved || q.nwait == 0 {
		ps.fairWant = nil
		return false
	}
	if c.allStats.Count == 0 {
		return false // no finished job yet: no prediction to hold a node on
	}
	if len(ps.wideWaiting) > 0 && ps.drains < c.drainCap(ps) || c.now.UnixNano() < ps.fairRetry {
		return false
	}
	qw, qcls := c.pick(q, q.skipNormal)
	if qw == nil || c.rank(qcls) > c.rank(cls) || qw.tq.kShare >= w.tq.kShare {
		return false
	}
	if ps.fairDrains >= fairDrainCap(ps) && !c.freeFairDrain(ps, p) {
		return false
	}
	n, wait := c.fairTarget(q, qw)
	if n == nil {
		// no node fits soon enough: look again a second later, not on
		// every decision (each look scans the pool)
		ps.fairRetry = c.now.Add(time.Second).UnixNano()
		return false
	}
	c.nodeChanging(n)
	n.autoDrain, n.fairDrain = q, true
	n.drainEnd = c.now.Add(c.pol.FairDrainMaxWait).UnixNano()
	n.drainReady = c.now.Add(wait).UnixNano()
	c.nodeChanged(n)
	ps.drainedAdd(n)
	q.drains = append(q.drains, n)
	q.fairHeld++
	ps.fairDrains++
	c.addTimer(c.now.Add(c.pol.FairDrainMaxWait), tmDrain, uint64(n.id))
	return true
}

// freeFairDrain lifts one of pool ps's fairness drains that no longer
// holds a node for a starved placement, so that one for another may take
// its place under fairDrainCap: a drain held for p, whose waiter is about
// to take room elsewhere with a higher share than the starved placement's
// (the over-share tenant keeps no node held for it), or for a placement
// with nothing waiting or no longer starved. Without it such a drain
// outlived its reason for up to FairDrainMaxWait and, with the cap
// reached, the tenant now starving got no node held at all. It reports
// whether it lifted one.
func (c *Core) freeFairDrain(ps *poolStat, p *placementQueue) bool {
	for _, n := range ps.drained {
		if r := n.autoDrain; n.fairDrain && (r == p || r.nwait == 0 || !r.starved) {
			c.liftDrain(n)
			return true
		}
	}
	return false
}

// fairTarget picks the node to hold for q, whose first waiter is w: among
// the pool's serving, undrained nodes carrying q's labels that could hold
// q's envelope empty (and that w's rules and refusals allow), the one
// predicted to fit it soonest, within FairDrainMaxWait, and the predicted
// wait; nil when none.
// It scans the pool: O(pool) once per fairness drain placed.
func (c *Core) fairTarget(q *placementQueue, w *waiter) (*node, time.Duration) {
	env := q.pl.Envelope
	var rules []PlacementRule
	if jb := w.jb; jb != nil {
		pp, _ := c.pol.project(jb.runnerTenant(), jb.project)
		rules = pp.Rules
	}
	var best *node
	bestWait, bestEnds := time.Duration(0), 0
	for _, n := range c.poolNodes[q.pl.Pool] {
		if !n.serving() || n.closed || n.drainFor != 0 || n.autoDrain != nil || !matches(n, &q.pl) || w.skip[n.id] {
			continue
		}
		if env.MemBytes > n.capacity.MemBytes || env.DiskBytes > n.capacity.DiskBytes {
			continue
		}
		if len(rules) > 0 && !rulesAllow(rules, w.jb.ref, n.id, n.pools) {
			continue
		}
		wait, ends, ok := c.timeToFit(n, env)
		if !ok || wait > c.pol.FairDrainMaxWait {
			continue
		}
		if best == nil || cmp.Or(cmp.Compare(wait, bestWait), cmp.Compare(ends, bestEnds), cmp.Compare(n.id, best.id)) < 0 {
			best, bestWait, bestEnds = n, wait, ends
		}
	}
	return best, bestWait
}

// allocLeft is one allocation on a node: what it frees and when it is
// expected to.
type allocLeft struct {
	left time.Duration
	env  Resources
}

// timeToFit predicts how long until env fits on n (PLACE-05's room: memory,
// disk and the node's cap) as its allocations end, each after its expected
// remaining time (a reservation or offer as a job about to start of no
// known name), soonest first; ends is how many must end. ok is false when
// env cannot fit even with n empty.
func (c *Core) timeToFit(n *node, env Resources) (wait time.Duration, ends int, ok bool) {
	freeMem := n.capacity.MemBytes - n.used.MemBytes
	freeDisk := n.capacity.DiskBytes - n.used.DiskBytes
	placed, limit := n.placed, n.nodeCap()
	fits := func() bool {
		return freeMem >= env.MemBytes && freeDisk >= env.DiskBytes && (limit <= 0 || placed < limit)
	}
	if fits() {
		return 0, 0, true
	}
	allocs := c.fitScratch[:0]
	fresh := expectedLeft(&c.allStats, 0)
	for _, rs := range n.res {
		allocs = append(allocs, allocLeft{fresh, rs.env})
	}
	for _, jb := range n.jobs {
		allocs = append(allocs, allocLeft{c.jobLeft(jb), jb.env()})
	}
	slices.SortFunc(allocs, func(a, b allocLeft) int { return cmp.Compare(a.left, b.left) })
	c.fitScratch = allocs[:0]
	for i, a := range allocs {
		freeMem += a.env.MemBytes
		freeDisk += a.env.DiskBytes
		placed--
		if fits() {
			return a.left, i + 1, true
		}
	}
	return 0, 0, false
}

// jobLeft is a job's expected remaining time from the wall times of its
// name, else of every name (BS-23).
func (c *Core) jobLeft(jb *job) time.Duration { return expectedLeft(c.statOf(jb), c.jobRan(jb)) }

// jobRan is how long a running job has run, 0 for one not yet running.
func (c *Core) jobRan(jb *job) time.Duration {
	if now, at := c.now.UnixNano(), jb.startedAt(); jb.state == jobRunning && at > 0 && at <= now {
		return time.Duration(now - at)
	}
	return 0
}
