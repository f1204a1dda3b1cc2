package sched

import (
	"slices"
	"time"
)

// Backfilling drained nodes (BS-22, BS-23).
//
// A node drained for wide work idles piece by piece while its jobs end, and
// a node held for a starved placement (fairdrain.go) idles until enough of
// it frees. When a drain is placed, the Core predicts when it completes
// (drainReady): for wide work, the expected time until the last of the
// node's jobs ends (the expected maximum of their remaining times, each
// from the wall-time distribution of its name); for a fairness drain, the
// predicted fit. Until then, work whose own predicted run time (the mean
// wall time of its job name, or for a request of a runner, of the runner's
// jobs; else of every job) ends before drainReady may use the drained
// node's free room: on a prediction it is gone before the drained-for work
// could start, so it does not delay that work past its predicted start.
// The fixed drainReady keeps backfill from
// pushing the prediction later; once it passes, nothing more backfills
// there. Nothing running is touched (BS-25).
//
// Backfill takes only work that would otherwise wait: a waiter goes to a
// drained node only when no undrained node has room for it, so it adds
// what runs and moves nothing that had somewhere else to go.

// maxBackfillScan bounds how many drained nodes one decision looks at.
const maxBackfillScan = 32

// drainedAdd and drainedDrop keep poolStat.drained, the pool's nodes
// under an automatic drain.
func (ps *poolStat) drainedAdd(n *node) { ps.drained = append(ps.drained, n) }

func (ps *poolStat) drainedDrop(n *node) {
	if i := slices.Index(ps.drained, n); i >= 0 {
		ps.drained = slices.Delete(ps.drained, i, i+1)
	}
}

// backfillNode returns a drained node of p's pool on which w may run now
// and is predicted to end before the drain completes, nil when none.
func (c *Core) backfillNode(p *placementQueue, w *waiter, cls int) *node {
	ps := p.ps
	if len(ps.drained) == 0 || c.allStats.Count == 0 {
		return nil
	}
	end := c.now.Add(c.predictedRun(w)).UnixNano()
	env := p.pl.Envelope
	var rules []PlacementRule
	if jb := w.jb; jb != nil {
		pp, _ := c.pol.project(jb.runnerTenant(), jb.project)
		rules = pp.Rules
	}
	for i, n := range ps.drained {
		if i >= maxBackfillScan {
			break
		}
		if n.autoDrain == p || end >= n.drainReady || w.skip[n.id] || !matches(n, &p.pl) {
			continue
		}
		if roomUndrained(n, env) < 1 {
			continue
		}
		if len(rules) > 0 && !rulesAllow(rules, w.jb.ref, n.id, n.pools) {
			continue
		}
		if isNormalClass(cls) && c.headroomBlocks(n, env) {
			continue
		}
		return n
	}
	return nil
}

// roomUndrained is roomFor on n as if its drain were lifted.
func roomUndrained(n *node, env Resources) int {
	saved, savedFor := n.autoDrain, n.drainFor
	n.autoDrain, n.drainFor = nil, 0
	room := roomFor(n, env, n.used, n.placed)
	n.autoDrain, n.drainFor = saved, savedFor
	return room
}

// predictedRun is how long w's job is expected to run: the mean wall time
// of its job's name, or for a ticket of its runner's jobs, else of every
// job (BS-23).
func (c *Core) predictedRun(w *waiter) time.Duration {
	var r *runner
	if jb := w.jb; jb != nil {
		if st := c.statOf(jb); st != &c.allStats {
			return expectedLeft(st, 0)
		}
		r = jb.runner
	} else {
		r = w.tk.runner
	}
	if r != nil && r.stats.Count > 0 {
		return expectedLeft(&r.stats, 0)
	}
	return expectedLeft(&c.allStats, 0)
}

// survival returns the fraction of the runs of s that lasted longer than
// x, runs spread evenly within each histogram bucket (the last one up to
// the longest run).
func survival(s *RuntimeStat, x time.Duration) float64 {
	if s.Count == 0 || x >= s.Longest {
		return 0
	}
	if x <= 0 {
		return 1
	}
	var above float64
	lo := time.Duration(0)
	for i, k := range s.Buckets {
		hi := time.Minute << i
		if i == len(s.Buckets)-1 || hi > s.Longest {
			hi = max(s.Longest, lo)
		}
		switch {
		case k == 0 || hi <= x:
		case lo >= x:
			above += float64(k)
		default:
			above += float64(k) * float64(hi-x) / float64(hi-lo)
		}
		if hi >= s.Longest {
			break
		}
		lo = hi
	}
	return above / float64(s.Count)
}

// remaining is one allocation's distribution of remaining time: its
// runtime distribution conditioned on having run ran; fixed > 0 when it
// outran every prior (expected to run as long again, exactly).
type remaining struct {
	st    *RuntimeStat
	ran   time.Duration
	s0    float64 // survival at ran
	fixed time.Duration
}

// left returns P(remaining time > t).
func (r *remaining) left(t time.Duration) float64 {
	if r.fixed > 0 {
		if t < r.fixed {
			return 1
		}
		return 0
	}
	return survival(r.st, r.ran+t) / r.s0
}

// emptySteps is how many points expectedEmpty integrates over.
const emptySteps = 48

// expectedEmpty predicts how long until every allocation on n ended: the
// expected maximum of their remaining times, taken as independent, each
// from the wall-time distribution of its job's name (else of every job;
// a reservation or offer as a job about to start). This is later than the
// largest expected remaining time whenever several jobs run.
func (c *Core) expectedEmpty(n *node) time.Duration {
	rs := c.remScratch[:0]
	var horizon time.Duration
	add := func(st *RuntimeStat, ran time.Duration) {
		r := remaining{st: st, ran: ran, s0: survival(st, ran)}
		if r.s0 <= 0 {
			r.fixed = max(ran, time.Second)
			horizon = max(horizon, r.fixed)
		} else {
			horizon = max(horizon, st.Longest-ran)
		}
		rs = append(rs, r)
	}
	for range n.res {
		add(&c.allStats, 0)
	}
	for _, jb := range n.jobs {
		add(c.statOf(jb), c.jobRan(jb))
	}
	c.remScratch = rs[:0]
	if len(rs) == 0 || horizon <= 0 {
		return 0
	}
	// E[max] = ∫ P(max > t) dt = ∫ 1 - Π (1 - P(R_i > t)) dt, midpoints
	dt := horizon / emptySteps
	var sum float64
	for k := range emptySteps {
		t := dt*time.Duration(k) + dt/2
		none := 1.0
		for i := range rs {
			none *= 1 - rs[i].left(t)
		}
		sum += 1 - none
	}
	return time.Duration(sum * float64(dt))
}
