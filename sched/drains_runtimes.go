package sched

import "time"

// Drain reservations and runtime statistics, the two seams for wide jobs
// (BS-20..24): a per-node drain reservation the driver places for a job,
// and per-job-name runtime statistics. The Core's own wide-job policy (packing, automatic drains on
// the node predicted from these statistics to empty first) is in wide.go.

// DrainReserve marks Node as reserved for Job (a queued job too wide for any
// node now): the node takes no new offers or starts except that job, which
// starts there as soon as it fits (BS-22). Job zero clears the mark. The
// mark also clears when the job starts anywhere or ends.
type DrainReserve struct {
	Node NodeID
	Job  JobID
}

func (DrainReserve) isEvent() {}

// RuntimeStat is plain data about finished jobs of one name (BS-23): how
// many, their total and longest wall time, and a histogram of wall times
// in powers of two minutes (bucket i counts runs shorter than 2^i minutes,
// the last bucket everything longer).
type RuntimeStat struct {
	Count   int
	Total   time.Duration
	Longest time.Duration
	Buckets [12]int
}

// RuntimeStats returns the statistics of jobs named name (the driver's
// job name, e.g. GitLab project path + job name), zero when none finished.
func (c *Core) RuntimeStats(name string) RuntimeStat {
	if s := c.stats[name]; s != nil {
		return *s
	}
	return RuntimeStat{}
}

// RuntimeStatNames returns the job names with statistics, sorted.
func (c *Core) RuntimeStatNames() []string { return sortedKeys(c.stats) }

// noteRuntime adds a finished run of wall time to the statistics of its
// name, of every name and, when r is non-nil, of its runner.
func (c *Core) noteRuntime(name string, wall time.Duration, r *runner) {
	if name == "" || wall < 0 {
		return
	}
	s := c.stats[name]
	if s == nil {
		s = &RuntimeStat{}
		c.stats[name] = s
	}
	s.add(wall)
	c.allStats.add(wall)
	if r != nil {
		r.stats.add(wall)
	}
}

func (s *RuntimeStat) add(wall time.Duration) {
	s.Count++
	s.Total += wall
	s.Longest = max(s.Longest, wall)
	i := 0
	for limit := time.Minute; wall >= limit && i < len(s.Buckets)-1; limit *= 2 {
		i++
	}
	s.Buckets[i]++
}

// statOf returns the statistics a job's remaining time is predicted from:
// its name's, else every name's (BS-23).
func (c *Core) statOf(jb *job) *RuntimeStat {
	if jb.name != 0 {
		if s := c.stats[c.names[jb.name]]; s != nil && s.Count > 0 {
			return s
		}
	}
	return &c.allStats
}

func (c *Core) onDrainReserve(e DrainReserve) {
	n := c.nodes[e.Node]
	if n == nil {
		return
	}
	if old := n.drainFor; old != 0 {
		delete(c.drains, old)
	}
	if n.autoDrain != nil && e.Job != 0 {
		c.redrainNode(n) // the driver's mark replaces the automatic one
	}
	c.nodeChanging(n)
	n.drainFor = e.Job
	c.nodeChanged(n)
	if e.Job != 0 {
		if jb := c.jobs[e.Job]; jb != nil && jb.state == jobQueued {
			if prev := c.drains[e.Job]; prev != nil && prev != n {
				c.clearDrain(prev)
			}
			c.drains[e.Job] = n
			c.markDirty(jb.p)
		} else {
			c.clearDrain(n)
		}
	}
}

// clearDrain lifts a node's drain reservation.
func (c *Core) clearDrain(n *node) {
	if n.drainFor == 0 {
		return
	}
	delete(c.drains, n.drainFor)
	c.nodeChanging(n)
	n.drainFor = 0
	c.nodeChanged(n)
}

// drainNode returns the node reserved for jb when the job fits there now.
func (c *Core) drainNode(jb *job) *node {
	n := c.drains[jb.id]
	if n == nil || n.drainFor != jb.id {
		return nil
	}
	saved := n.drainFor
	n.drainFor = 0 // room as if unreserved
	room := roomFor(n, jb.env(), n.used, n.placed)
	n.drainFor = saved
	if room < 1 || !matches(n, &jb.p.pl) {
		return nil
	}
	return n
}

// jobDone clears what a job that left the queue for good held: its drain
// reservation.
func (c *Core) jobDrainDone(jb *job) {
	if n := c.drains[jb.id]; n != nil {
		c.clearDrain(n)
	}
}
