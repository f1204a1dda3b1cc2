package sched

import (
	"slices"
	"time"
)

// runnerBlock returns why the runner's tickets may not go now, or
// ReasonNone (ARB-11, ARB-12, ARB-19, ARB-20). While the runner is backed
// off only its lead request may go (runnerMode); the other tickets wait
// with ReasonBackoff.
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
	case r.backoffEnd.After(c.now) && (r.leadOut >= r.leadAllow() || r.leadEnd.After(c.now)):
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

// backedOff reports whether the runner is backed off (ARB-20): then only
// its lead requests go, oldest first, one at a time until they bring jobs,
// each the base interval after the previous one's empty answer
// (DECISIONS 14, docs/capacity-policy.md).
func (c *Core) backedOff(r *runner) bool { return r.backoffEnd.After(c.now) }

// leadAllow is how many lead requests a backed-off runner may have out:
// one, and one more for each job its leads brought in a row.
func (r *runner) leadAllow() int { return max(1, r.leadJobs) }

// leadsToClear is the number of jobs in a row that clears a runner's
// backoff: its request_concurrency (every loop may then ask), at least 2.
func (r *runner) leadsToClear() int { return max(2, r.reqConc) }

// refreshRunner indexes or unindexes the runner's waiting tickets to match
// its eligibility and class: all of them, none, or while it is backed off
// only its oldest (the lead request).
func (c *Core) refreshRunner(r *runner) {
	want := r.p != nil && c.runnerBlock(r).Code == ReasonNone
	lead := c.backedOff(r)
	cls := c.ticketClass(r)
	if r.indexed && (!want || cls != r.indexedCls || lead != r.indexedLead) {
		for _, tk := range r.waiting {
			c.unindexWaiter(&tk.waiter)
		}
		r.indexed = false
	}
	if want && !r.indexed {
		r.indexed, r.indexedCls, r.indexedLead = true, cls, lead
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
	i := slices.Index(r.waiting, tk)
	if i >= 0 {
		r.waiting = slices.Delete(r.waiting, i, i+1)
	}
	if i == 0 && r.indexed && r.indexedLead && len(r.waiting) > 0 {
		c.reindex(&r.waiting[0].waiter) // the next oldest leads now
	}
}

// backoff backs the runner off after an empty or error outcome (ARB-20,
// DECISIONS 14). Its requests but one wait initial·2^(n-1), capped at
// max, ±25 % jitter from the seeded PRNG; the lead request — the oldest
// waiting, one at a time — waits only the base interval (initial, with
// the same jitter). So an idle runner asks GitLab about once per base
// interval, as gitlab-runner with check_interval = 1 does, and a job that
// arrives waits about that long, not up to max.
func (c *Core) backoff(r *runner) {
	r.backoffN++
	r.leadJobs = 0
	base := time.Duration(c.pol.BackoffInitialSecs) * time.Second
	d := c.backoffInterval(r.backoffN)
	// jitter in [-25%, +25%]
	j := c.rng.Float64()*0.5 - 0.25
	r.backoffEnd = c.now.Add(d + time.Duration(j*float64(d)))
	r.leadEnd = c.now.Add(base + time.Duration(j*float64(base)))
	c.addTimer(r.backoffEnd, tmRunner, uint64(r.id))
	c.addTimer(r.leadEnd, tmRunner, uint64(r.id))
	c.refreshRunner(r)
}

// releasedInBackoff restarts the backoff of a runner whose last answer
// from GitLab was empty when one of its claimed requests comes back
// released: the relay gave it back unasked, or Workhorse held it and
// answered 204 itself (the runner's queue changed, or the long poll ran
// out). Neither is news of work, so the runner's other requests wait the
// current interval again, from now; its lead request may go at once
// (the queue may have changed for a job). Without this, a long poll that
// outlasted the interval left the runner unbacked when it came back, and
// every loop asked GitLab for the one job that had arrived: one 201 and
// empty answers for the rest (docs/capacity-policy.md, "One request for
// one job under long polling").
func (c *Core) releasedInBackoff(r *runner) {
	if r.backoffN == 0 {
		return
	}
	d := c.backoffInterval(r.backoffN)
	j := c.rng.Float64()*0.5 - 0.25
	r.backoffEnd = c.now.Add(d + time.Duration(j*float64(d)))
	r.leadEnd = c.now
	c.addTimer(r.backoffEnd, tmRunner, uint64(r.id))
	c.refreshRunner(r)
}

// backoffInterval is initial·2^(n-1), capped at max (ARB-20).
func (c *Core) backoffInterval(n int) time.Duration {
	base := time.Duration(c.pol.BackoffInitialSecs) * time.Second
	maxD := time.Duration(c.pol.BackoffMaxSecs) * time.Second
	d := base
	for i := 1; i < n && d < maxD; i++ {
		d *= 2
	}
	return min(d, maxD)
}

// tookJob records a job outcome: the runner is busy (not a probe) and its
// backoff eases one request at a time. A backed-off runner's first job
// lets its lead request go again at once, still one at a time; its k-th
// job in a row lets k requests ask; once the jobs in a row reach its
// request_concurrency (at least 2) the backoff clears and every request
// of the runner goes again. A single job after a quiet spell so costs
// GitLab one more request, not one per request loop, and a short run of
// jobs ends with about one empty answer, while a runner that keeps
// finding jobs has all its loops back within a few round trips
// (DECISIONS 14, docs/capacity-policy.md).
func (c *Core) tookJob(r *runner) {
	r.lastJob = c.now
	if c.backedOff(r) && r.leadJobs+1 < r.leadsToClear() {
		r.leadJobs++
		r.leadEnd = c.now
		c.refreshRunner(r)
		return
	}
	r.backoffN, r.backoffEnd, r.leadEnd, r.leadJobs = 0, time.Time{}, time.Time{}, 0
	c.refreshRunner(r)
}

// leadDone ends a ticket's lead accounting: the runner may send its next
// lead request once the base interval passed.
func (c *Core) leadDone(tk *ticket) {
	if !tk.lead {
		return
	}
	tk.lead = false
	tk.runner.leadOut--
	c.refreshRunner(tk.runner)
}

// probeDone ends a ticket's probe and lead accounting.
func (c *Core) probeDone(tk *ticket) {
	c.leadDone(tk)
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
	for _, p := range c.queues {
		c.markDirty(p)
	}
}
