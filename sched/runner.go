package sched

import (
	"slices"
	"time"
)

// runnerBlock returns why the runner's tickets may not go now, or
// ReasonNone (ARB-11, ARB-12, ARB-19, ARB-20).
func (c *Core) runnerBlock(r *runner) Reason {
	rl := r.relay
	switch {
	case rl == nil || !rl.up:
		return Reason{Code: ReasonRelayDown}
	case !rl.synced:
		return Reason{Code: ReasonHeartbeat}
	case rl.concurrent > 0 && rl.held >= rl.concurrent:
		return Reason{Code: ReasonRelayConcurrent, N: rl.concurrent}
	case r.limit > 0 && r.held >= r.limit:
		return Reason{Code: ReasonRunnerLimit, N: r.limit}
	case r.backoffEnd.After(c.now):
		return Reason{Code: ReasonBackoff}
	case c.isProbe(r) && r.probesOut > 0:
		return Reason{Code: ReasonRunnerProbe}
	}
	return Reason{}
}

// isProbe: the runner took no job within busy_secs (ARB-18).
func (c *Core) isProbe(r *runner) bool {
	return r.lastJob.IsZero() || !c.now.Before(r.lastJob.Add(time.Duration(c.pol.BusySecs)*time.Second))
}

// ticketClass is the internal class of the runner's tickets now.
func (c *Core) ticketClass(r *runner) int {
	probe := c.isProbe(r)
	switch {
	case r.production && probe:
		return clsProdProbe
	case r.production:
		return clsProd
	case probe:
		return clsNormProbe
	}
	return clsNormal
}

// refreshRunner indexes or unindexes the runner's waiting tickets to match
// its eligibility and class.
func (c *Core) refreshRunner(r *runner) {
	want := r.p != nil && c.runnerBlock(r).Code == ReasonNone
	cls := c.ticketClass(r)
	if r.indexed && (!want || cls != r.indexedCls) {
		for _, tk := range r.waiting {
			c.unindexWaiter(&tk.waiter)
		}
		r.indexed = false
	}
	if want && !r.indexed {
		r.indexed, r.indexedCls = true, cls
		for _, tk := range r.waiting {
			c.reindex(&tk.waiter)
		}
	}
	// a runner that is not yet a probe becomes one at lastJob+busy_secs
	if !r.lastJob.IsZero() && !c.isProbe(r) {
		at := r.lastJob.Add(time.Duration(c.pol.BusySecs) * time.Second)
		if !r.probeTimerAt.Equal(at) {
			r.probeTimerAt = at
			c.addTimer(at, tmRunner, uint64(r.id))
		}
	}
}

func (c *Core) refreshRelay(rl *relay) {
	for _, r := range rl.runners {
		c.refreshRunner(r)
	}
}

// runnerAddWaiting appends tk (queued) to the runner's waiting list.
func (c *Core) runnerAddWaiting(r *runner, tk *ticket) {
	i, _ := slices.BinarySearchFunc(r.waiting, tk.seq, func(t *ticket, s uint64) int {
		switch {
		case t.seq < s:
			return -1
		case t.seq > s:
			return 1
		}
		return 0
	})
	r.waiting = slices.Insert(r.waiting, i, tk)
	c.reindex(&tk.waiter)
}

func (c *Core) runnerDropWaiting(r *runner, tk *ticket) {
	c.unindexWaiter(&tk.waiter)
	if i := slices.Index(r.waiting, tk); i >= 0 {
		r.waiting = slices.Delete(r.waiting, i, i+1)
	}
}

// backoff backs the runner off after an empty or error outcome (ARB-20):
// initial·2^(n-1) capped at max, ±25% jitter from the seeded PRNG.
func (c *Core) backoff(r *runner) {
	r.backoffN++
	d := time.Duration(c.pol.BackoffInitialSecs) * time.Second
	maxD := time.Duration(c.pol.BackoffMaxSecs) * time.Second
	for i := 1; i < r.backoffN && d < maxD; i++ {
		d *= 2
	}
	d = min(d, maxD)
	// jitter in [-25%, +25%]
	j := time.Duration((c.rng.Float64()*0.5 - 0.25) * float64(d))
	r.backoffEnd = c.now.Add(d + j)
	c.addTimer(r.backoffEnd, tmRunner, uint64(r.id))
	c.refreshRunner(r)
}

// tookJob records a job outcome: backoff cleared, runner busy (not a probe).
func (c *Core) tookJob(r *runner) {
	r.backoffN, r.backoffEnd = 0, time.Time{}
	r.lastJob = c.now
	c.refreshRunner(r)
}

// probeDone ends a ticket's probe accounting.
func (c *Core) probeDone(tk *ticket) {
	if !tk.probe {
		return
	}
	tk.probe = false
	c.probesOut--
	tk.runner.probesOut--
	c.refreshRunner(tk.runner)
	if c.probesOut == c.pol.ProbeLimit-1 {
		c.markAllDirty()
	}
}

func (c *Core) markAllDirty() {
	for _, p := range c.pqs {
		c.markDirty(p)
	}
}
