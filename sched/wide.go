package sched

import (
	"cmp"
	"slices"
	"strconv"
	"time"
)

// Wide jobs (BS-20..BS-25, seed 003, DESIGN "Later: Wide jobs"), served
// by default:
//
//   - Packing (BS-21): while wide work of a pool waits for a node, and at
//     or above Policy.PackAboveUtilization of the pool, work goes to the
//     most loaded node with room first (the node index read backwards:
//     highest load, least room), so small jobs concentrate and whole nodes
//     free up; otherwise the least loaded first (PLACE-11).
//   - Automatic drain reservations (BS-22): when the first waiter of a
//     placement finds no node of its pool with room (the placement's node
//     index is empty) and its envelope is wide on some node (at least
//     Policy.WideFraction of its vCPUs or memory) that could hold it empty,
//     the node predicted to empty first is marked: it takes no new offers
//     or starts, and a waiter of the placement takes it as soon as the
//     envelope fits there. A placement holds at most one drain per waiting
//     request, a pool at most drainCap; a drain ends when a waiter of its
//     placement is placed on it (if more of the placement still waits than
//     it holds drains, the next waiter's drain is chosen in the same
//     decision, before other work takes what is left), when the placement
//     has fewer waiters than
//     drains (the latest goes) or none that waits for room and demand does
//     not return within drainGrace, when the node stops serving or
//     matching, or after Policy.DrainMaxHold (then it is chosen again from
//     fresh predictions). No drain is placed for a backed-off runner's
//     lead request, and none on a node running larger wide work.
//   - Kept whole (keptWhole): room that fits waiting wide work stays whole
//     for it; smaller normal work takes every other node's room first.
//   - Prediction (BS-23, BS-24): a node empties when its last job ends; a
//     job's remaining time comes from the wall-time distribution of its name
//     (RuntimeStats, updated on every finish rather than hourly), else from
//     the distribution of all names. Without any statistics the node with
//     the least placed work (fewest allocations, then fewest vCPUs and
//     bytes) is drained. Job timeouts are never used.
//   - No preemption (BS-25): nothing here ends, cancels or moves a started
//     job or a held reservation; a drained node only stops taking new work.

// poolStat is what the Core keeps per pool: sums over its serving nodes for
// utilization, and how many automatic drains it holds.
type poolStat struct {
	capCPUs, usedCPUs int64
	capMem, usedMem   int64
	drains            int
	// shapes counts the pool's serving nodes by capacity (a fleet has few
	// shapes), so "is this envelope wide on any node" costs no node scan
	shapes map[Resources]int

	// serving counts the pool's serving nodes; wideWaiting lists its
	// placements whose wide work waits for a node (noteWideWait)
	serving     int
	wideWaiting []*placementQueue

	// fairDrains counts its fairness drains (fairdrain.go); fairWant is
	// its starved placement of the lowest share, the candidate for one;
	// fairRetry: no fairness drain is looked for before then (Unix ns)
	fairDrains int
	fairWant   *placementQueue
	fairRetry  int64
	// drained lists its nodes under an automatic drain, wide or fairness,
	// in the order drained (backfill.go)
	drained []*node

	name string
	// refCPU and refMem are the reference capacity fair shares are
	// fractions of (share.go); seenCPU and seenMem the capacity last
	// compared with it; rekey: the pool waits in Core.rekeys.
	refCPU, refMem   float64
	seenCPU, seenMem int64
	rekey            bool
}

func (c *Core) poolStat(pool string) *poolStat {
	ps := c.pstat[pool]
	if ps == nil {
		ps = &poolStat{name: pool}
		c.pstat[pool] = ps
	}
	return ps
}

func (ps *poolStat) add(n *node, sign int64) {
	ps.capCPUs += sign * n.capacity.CPUs
	ps.usedCPUs += sign * n.used.CPUs
	ps.capMem += sign * n.capacity.MemBytes
	ps.usedMem += sign * n.used.MemBytes
}

func (ps *poolStat) utilization() float64 {
	var u float64
	if ps.capCPUs > 0 {
		u = float64(ps.usedCPUs) / float64(ps.capCPUs)
	}
	if ps.capMem > 0 {
		u = max(u, float64(ps.usedMem)/float64(ps.capMem))
	}
	return u
}

// Utilization returns a pool's utilization: the larger of the fractions of
// vCPUs and of memory its ready, reachable nodes have placed (offers,
// reservations and jobs), 0 for an unknown or empty pool (BS-21).
func (c *Core) Utilization(pool string) float64 {
	if ps := c.pstat[pool]; ps != nil {
		return ps.utilization()
	}
	return 0
}

// packing reports whether p's work goes to the most loaded node first:
// while wide work of its pool waits for a node, or at or above
// PackAboveUtilization of the pool (BS-21).
func (c *Core) packing(p *placementQueue) bool {
	ps := p.ps
	if len(ps.wideWaiting) > 0 {
		return true
	}
	return c.pol.PackAboveUtilization > 0 && ps.utilization() >= c.pol.PackAboveUtilization
}

// noteWideWait records, at the end of p's pass, whether p is wide work of
// its pool waiting for a node: starved with an envelope wide on some node
// shape of the pool. While any placement of a pool is, the pool packs.
func (c *Core) noteWideWait(p *placementQueue) {
	want := p.starved && p.nwait > 0 && c.wideSomewhere(p.ps, p.pl.Envelope)
	if want != p.wideWait {
		p.wideWait = want
		ps := p.ps
		if want {
			ps.wideWaiting = append(ps.wideWaiting, p)
		} else if i := slices.Index(ps.wideWaiting, p); i >= 0 {
			ps.wideWaiting = slices.Delete(ps.wideWaiting, i, i+1)
		}
	}
}

// keptWhole reports whether n's room is kept from a normal-class waiter of
// p for the wide work of p's pool that waits for a node: a placement of
// the pool with a larger envelope than p's, wide on n, whose wide work
// found no node with room in its last pass and still waits, and which n
// now has room for. So a node a wide job leaves whole goes to the next wide job rather
// than the first small request of the pass splitting it (only drains
// would make another one), and a node a drain emptied is not split
// either. Small work takes every other node's room first; it waits only
// while room is left nowhere but on such nodes (BS-20..22).
func (c *Core) keptWhole(n *node, p *placementQueue) bool {
	env := p.pl.Envelope
	for _, q := range p.ps.wideWaiting {
		qe := q.pl.Envelope
		if q == p || q.nwait == 0 || !larger(qe, env) {
			continue
		}
		if c.wideOn(n, qe) && matches(n, &q.pl) && roomFor(n, qe, n.used, n.placed) >= 1 {
			return true
		}
	}
	return false
}

// intern returns the index of a job name, 0 for "".
func (c *Core) intern(name string) uint32 {
	if name == "" {
		return 0
	}
	if i, ok := c.nameIdx[name]; ok {
		return i
	}
	i := uint32(len(c.names))
	c.names = append(c.names, name)
	c.nameIdx[name] = i
	return i
}

// jobRunning records that jb's node accepted it.
func (c *Core) jobRunning(jb *job) {
	jb.state = jobRunning
	jb.at, jb.started = c.now.UnixNano(), true // its deadline is spent (see job.at)
}

// wideOn reports whether env is wide on n (BS-20) and n could hold it when
// empty.
func (c *Core) wideOn(n *node, env Resources) bool { return c.wideOnCap(n.capacity, env) }

func (c *Core) wideOnCap(capacity, env Resources) bool {
	if env.MemBytes > capacity.MemBytes || env.DiskBytes > capacity.DiskBytes {
		return false
	}
	f := c.pol.WideFraction
	return capacity.CPUs > 0 && float64(env.CPUs) >= f*float64(capacity.CPUs) ||
		capacity.MemBytes > 0 && float64(env.MemBytes) >= f*float64(capacity.MemBytes)
}

// shapeOut and inShapes keep poolStat.shapes: call shapeOut before a
// node's capacity, pools or serving state change and inShapes after.
func (c *Core) shapeOut(n *node) {
	if !n.inShapes {
		return
	}
	n.inShapes = false
	for _, pool := range n.pools {
		ps := c.poolStat(pool)
		if ps.shapes[n.capacity]--; ps.shapes[n.capacity] <= 0 {
			delete(ps.shapes, n.capacity)
		}
		ps.serving--
	}
}

func (c *Core) inShapes(n *node) {
	if n.inShapes || !n.serving() {
		return
	}
	n.inShapes = true
	for _, pool := range n.pools {
		ps := c.poolStat(pool)
		if ps.shapes == nil {
			ps.shapes = map[Resources]int{}
		}
		ps.shapes[n.capacity]++
		ps.serving++
	}
}

// wideSomewhere reports whether env is wide on some serving node shape of
// the pool (labels aside).
func (c *Core) wideSomewhere(ps *poolStat, env Resources) bool {
	for shape := range ps.shapes {
		if c.wideOnCap(shape, env) {
			return true
		}
	}
	return false
}

// autoDrainFits returns a node drained for p that w may take now: the
// first of p's drains, in the order they were placed, where p's envelope
// fits and w's refusals and rules allow.
func (c *Core) autoDrainFits(p *placementQueue, w *waiter) *node {
	for _, n := range p.drains {
		if w.skip[n.id] {
			continue
		}
		n.autoDrain = nil // room as if unreserved
		room := roomFor(n, p.pl.Envelope, n.used, n.placed)
		n.autoDrain = p
		if room < 1 {
			continue
		}
		if jb := w.jb; jb != nil {
			if pp, _ := c.pol.project(jb.runnerTenant(), jb.project); len(pp.Rules) > 0 && !rulesAllow(pp.Rules, jb.ref, n.id, n.pools) {
				continue
			}
		}
		return n
	}
	return nil
}

// headroomBlocksUndrained is headroomBlocks for p's envelope on n as if
// n's automatic drain were lifted (a drained node counts no headroom room).
func (c *Core) headroomBlocksUndrained(n *node, p *placementQueue) bool {
	c.nodeChanging(n)
	n.autoDrain = nil
	c.nodeChanged(n)
	blocked := c.headroomBlocks(n, p.pl.Envelope)
	c.nodeChanging(n)
	n.autoDrain = p
	c.nodeChanged(n)
	return blocked
}

// drainCap is how many automatic drains pool ps may hold at once: the
// policy's DrainsPerPool when set, none when negative, and by default a
// quarter of the pool's serving nodes (at least one), so wide work is
// served without draining the fleet (BS-20).
func (c *Core) drainCap(ps *poolStat) int {
	switch d := c.pol.DrainsPerPool; {
	case d > 0:
		return d
	case d < 0:
		return 0
	}
	return max(1, ps.serving/4)
}

// maybeDrain places an automatic drain reservation for p, whose first
// waiter w found no node with room (BS-22). A placement holds at most one
// drain per waiter it has indexed (wide demand bounds the drains), its
// pool at most drainCap; one drain is added per pass, so a drain choice
// (a scan of the pool) is made at most once per starved placement and
// pass.
func (c *Core) maybeDrain(p *placementQueue, w *waiter) {
	if p.nodes.Len() > 0 || len(p.drains) >= p.nwait {
		return
	}
	if w.tk != nil && c.backedOff(w.tk.runner) && w.tk.runner.leadJobs == 0 {
		// the lead request of a runner whose last request found GitLab
		// empty: its demand is a guess, and emptying a node for every
		// such guess, once a second, idles a node for nothing (a lead
		// whose last answer was a job drains as before)
		return
	}
	ps := p.ps
	if ps.drains >= c.drainCap(ps) || !c.wideSomewhere(ps, p.pl.Envelope) {
		return
	}
	n := c.drainTarget(p, w)
	if n == nil {
		return
	}
	c.nodeChanging(n)
	n.autoDrain, n.drainEnd = p, c.now.Add(c.pol.DrainMaxHold).UnixNano()
	n.drainStart, n.drainUnwanted = c.now.UnixNano(), false
	n.drainReady = c.now.Add(c.expectedEmpty(n)).UnixNano()
	c.nodeChanged(n)
	ps.drainedAdd(n)
	p.drains = append(p.drains, n)
	ps.drains++
	c.addTimer(c.now.Add(c.pol.DrainMaxHold), tmDrain, uint64(n.id))
}

// liftDrain ends node n's automatic drain; the node takes work again.
func (c *Core) liftDrain(n *node) {
	p := n.autoDrain
	if p == nil {
		return
	}
	if i := slices.Index(p.drains, n); i >= 0 {
		p.drains = slices.Delete(p.drains, i, i+1)
	}
	if n.fairDrain {
		p.ps.fairDrains--
		p.fairHeld--
	} else {
		p.ps.drains--
	}
	p.ps.drainedDrop(n)
	c.nodeChanging(n)
	n.autoDrain, n.drainEnd, n.fairDrain, n.drainReady = nil, 0, false, 0
	n.drainStart, n.drainUnwanted = 0, false
	c.nodeChanged(n)
	// the pool may drain for another starved placement now
	for _, q := range c.poolQueues[p.pl.Pool] {
		if q.starved && q != p {
			c.markDirty(q)
		}
	}
}

// liftAutoDrains ends every automatic drain of p.
func (c *Core) liftAutoDrains(p *placementQueue) {
	for len(p.drains) > 0 {
		c.liftDrain(p.drains[len(p.drains)-1])
	}
}

// trimDrains lets the drains of p beyond its waiting demand go, the
// latest first: wide demand bounds the drains.
func (c *Core) trimDrains(p *placementQueue) {
	if p.fairHeld == 0 {
		c.keepDrains(p, p.nwait)
	}
}

// drainGrace is how long a drain outlives the wide demand it was placed
// for. A runner's request loop that took a node comes back with a new
// request a GitLab round trip later when GitLab has more of its work;
// lifting the drain at once threw away the emptying it had done each time
// a placement's waiting requests dipped.
const drainGrace = 10 * time.Second

// keepDrains keeps the first k of p's automatic drains and lets the rest
// go after drainGrace unless demand returns first (a waiter comes back and
// keepDrains counts it again).
func (c *Core) keepDrains(p *placementQueue, k int) {
	now := c.now.UnixNano()
	for i, n := range p.drains {
		switch {
		case i < k && n.drainUnwanted:
			n.drainUnwanted = false
			n.drainEnd = n.drainStart + int64(c.pol.DrainMaxHold)
		case i >= k && !n.drainUnwanted:
			n.drainUnwanted = true
			if end := now + int64(drainGrace); end < n.drainEnd {
				n.drainEnd = end
				c.addTimer(time.Unix(0, end), tmDrain, uint64(n.id))
			}
		}
	}
}

// redrainNode lifts n's drain and has its placement served again, so a
// drain is chosen afresh if its waiter still finds no room.
func (c *Core) redrainNode(n *node) {
	if p := n.autoDrain; p != nil {
		c.liftDrain(n)
		c.markDirty(p)
	}
}

// checkDrains lifts an automatic drain whose node stopped serving or
// matching its placement after a node event.
func (c *Core) checkDrains(ev Event) {
	var id NodeID
	switch e := ev.(type) {
	case NodeReport:
		id = e.Node
	case NodeUnreachable:
		id = e.Node
	case NodeLost:
		id = e.Node
	default:
		return
	}
	if n := c.nodes[id]; n != nil && n.autoDrain != nil && (!n.serving() || !matches(n, &n.autoDrain.pl)) {
		c.redrainNode(n)
	}
}

// fireDrain ends an automatic drain held its time (DrainMaxHold, or
// FairDrainMaxWait for a fairness drain).
func (c *Core) fireDrain(id NodeID) {
	n := c.nodes[id]
	if n == nil || n.autoDrain == nil || c.now.UnixNano() < n.drainEnd {
		return
	}
	c.redrainNode(n)
}

// liftAllDrains ends every automatic drain (policy change); they are chosen
// again under the new policy.
func (c *Core) liftAllDrains() {
	for _, k := range sortedKeys(c.queues) {
		if p := c.queues[k]; len(p.drains) > 0 {
			c.liftAutoDrains(p)
			c.markDirty(p)
		}
	}
}

// larger reports whether e is larger than than in vCPUs or memory.
func larger(e, than Resources) bool { return e.CPUs > than.CPUs || e.MemBytes > than.MemBytes }

// holdsLargerWide reports whether n runs or holds work of an envelope
// larger than env and wide on n. Such a node is not drained for env: it
// is where wider work runs, and when that work ends the room it leaves is
// kept for more of it while it waits (keptWhole); a drain for env would
// split it. (Skipping such nodes only while wider work waits served the
// 32-vCPU jobs of reference-110 less: 0.94 of their demanded share
// against 0.98, seed 1.)
func (c *Core) holdsLargerWide(n *node, env Resources) bool {
	larger := func(e Resources) bool { return larger(e, env) && c.wideOn(n, e) }
	for _, jb := range n.jobs {
		if larger(jb.env()) {
			return true
		}
	}
	for _, rs := range n.res {
		if larger(rs.env) {
			return true
		}
	}
	return false
}

// drainTarget picks the node to drain for p (BS-22..24): among the pool's
// serving, undrained nodes carrying p's labels on which p's envelope is
// wide and which could hold it empty (and which w's rules and refusals
// allow), the one predicted to empty first. It looks at every node of the
// pool and every job on them: O(pool) once per drain, not per placement.
func (c *Core) drainTarget(p *placementQueue, w *waiter) *node {
	env := p.pl.Envelope
	var rules []PlacementRule
	if jb := w.jb; jb != nil {
		pp, _ := c.pol.project(jb.runnerTenant(), jb.project)
		rules = pp.Rules
	}
	priors := c.allStats.Count > 0
	var best *node
	var bestLeft time.Duration
	for _, n := range c.poolNodes[p.pl.Pool] {
		if !n.serving() || n.drainFor != 0 || n.autoDrain != nil || !matches(n, &p.pl) || w.skip[n.id] || !c.wideOn(n, env) {
			continue
		}
		if c.holdsLargerWide(n, env) {
			continue // it serves wider work, which takes it over when it frees
		}
		if len(rules) > 0 && !rulesAllow(rules, w.jb.ref, n.id, n.pools) {
			continue
		}
		var left time.Duration
		if priors {
			bound, ties := time.Duration(-1), true
			if best != nil {
				// a node that would lose a tie stops at equality too
				bound, ties = bestLeft, c.drainBefore(n, 0, best, 0, false)
			}
			var over bool
			if left, over = c.timeToEmpty(n, bound, ties); over {
				continue // empties later than the best so far
			}
		}
		if best == nil || c.drainBefore(n, left, best, bestLeft, priors) {
			best, bestLeft = n, left
		}
	}
	return best
}

// drainBefore orders drain candidates: predicted time to empty when priors
// exist, then least placed work (allocations, vCPUs, bytes), then node ID.
func (c *Core) drainBefore(a *node, aLeft time.Duration, b *node, bLeft time.Duration, priors bool) bool {
	if priors && aLeft != bLeft {
		return aLeft < bLeft
	}
	if r := cmp.Or(cmp.Compare(a.placed, b.placed), cmp.Compare(a.used.CPUs, b.used.CPUs),
		cmp.Compare(a.used.MemBytes, b.used.MemBytes)); r != 0 {
		return r < 0
	}
	return a.id < b.id
}

// timeToEmpty predicts how long until every job on n ended: the largest
// expected remaining time of its jobs; a reservation or offer counts as a
// job about to start of no known name. With bound ≥ 0 it stops, over true,
// as soon as the prediction exceeds bound (or reaches it, unless ties).
func (c *Core) timeToEmpty(n *node, bound time.Duration, ties bool) (left time.Duration, over bool) {
	beyond := func() bool { return bound >= 0 && (left > bound || !ties && left == bound) }
	if len(n.res) > 0 {
		left = expectedLeft(&c.allStats, 0)
	}
	for _, jb := range n.jobs {
		if beyond() {
			return left, true
		}
		left = max(left, c.jobLeft(jb))
	}
	return left, beyond()
}

// expectedLeft estimates how much longer a job of wall-time distribution s
// that has run ran will run (BS-23): for a job not yet running, the mean;
// otherwise the mean of the runs that lasted longer than ran (each
// histogram bucket at its middle, at least ran; the open last bucket at the
// longest run) minus ran; a job that outran every prior is expected to run
// as long again as it has.
func expectedLeft(s *RuntimeStat, ran time.Duration) time.Duration {
	if s.Count == 0 {
		return 0
	}
	if ran <= 0 {
		return s.Total / time.Duration(s.Count)
	}
	if ran >= s.Longest {
		return ran
	}
	var sum float64
	cnt := 0
	lo := time.Duration(0)
	for i, k := range s.Buckets {
		last := i == len(s.Buckets)-1
		hi := time.Minute << i
		if k > 0 && (last && s.Longest > ran || !last && hi > ran) {
			mid := (lo + hi) / 2
			if last {
				mid = max(lo, s.Longest)
			}
			sum += float64(k) * float64(max(mid, ran))
			cnt += k
		}
		lo = hi
	}
	if cnt == 0 {
		return ran
	}
	return max(time.Duration(sum/float64(cnt))-ran, 0)
}

// plural renders n of a noun: "one renewal", "2 renewals".
func plural(n int, noun string) string {
	if n == 1 {
		return "one " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
