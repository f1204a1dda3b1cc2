package sched

import (
	"cmp"
	"slices"
)

func (c *Core) onNodeReport(e NodeReport) {
	n := c.nodes[e.Node]
	if n == nil {
		n = &node{id: e.Node}
		c.nodes[n.id] = n
	}
	// out of every index and sum while the reported fields change
	c.nodeChanging(n)
	c.shapeOut(n)
	pools := sortedSet(e.Pools)
	for _, p := range n.pools {
		if _, ok := slices.BinarySearch(pools, p); !ok {
			c.poolNodes[p] = slices.DeleteFunc(c.poolNodes[p], func(x *node) bool { return x == n })
		}
	}
	// poolNodes lists a node under exactly the pools in n.pools (lost nodes
	// included), so only the difference needs updating.
	for _, p := range pools {
		if _, ok := slices.BinarySearch(n.pools, p); !ok {
			c.poolNodes[p] = append(c.poolNodes[p], n)
		}
	}
	// attachNode takes n out of its indexes using cached keys, so the
	// fields may change first.
	n.pools, n.labels = pools, sortedSet(e.Labels)
	n.capacity, n.maxConc, n.local, n.state = e.Capacity, max(e.MaxConcurrency, 0), e.LocalRunner, e.State
	n.known, n.reachable = true, true
	n.imageIdle = max(e.ImageCacheIdle, 0)
	c.attachNode(n)
	c.inShapes(n)
	if e.Held != nil {
		c.reconcileHeld(n, e.Held)
	}
}

func sortedRes(rs []*reservation) []*reservation {
	out := slices.Clone(rs)
	slices.SortFunc(out, func(a, b *reservation) int { return cmp.Compare(a.id, b.id) })
	return out
}

func sortedJobs(js []*job) []*job {
	out := slices.Clone(js)
	slices.SortFunc(out, func(a, b *job) int { return cmp.Compare(a.id, b.id) })
	return out
}

// reconcileHeld applies a node's held list (NSESS-24, FAIL-15, FAIL-17,
// FAIL-19, DECISIONS 6).
func (c *Core) reconcileHeld(n *node, h *Held) {
	resSet := make(map[ReservationID]bool, len(h.Reservations))
	for _, r := range h.Reservations {
		resSet[r] = true
	}
	for _, rs := range sortedRes(n.res) {
		if resSet[rs.id] {
			continue
		}
		if rs.state == resOffered {
			c.offerFailed(rs)
		} else {
			c.onLeaseGone(rs.id, "unknown")
		}
	}
	ids := slices.Clone(h.Reservations)
	slices.Sort(ids)
	for _, rid := range slices.Compact(ids) {
		if rs := c.res[rid]; rs != nil && rs.node == n {
			continue
		}
		if ra, ok := c.restored[rid]; ok && ra.node == n.id && ra.adm.state != admEnded && ra.adm.res == nil {
			// DECISIONS 6: adopt the persisted claimed admission's reservation.
			rs := &reservation{id: rid, node: n, env: ra.env, state: resHeld, adm: ra.adm,
				leaseSecs: c.pol.LeaseSecs, leaseEnd: c.now.Add(secs(c.pol.LeaseSecs)), nodeIdx: -1}
			c.res[rid] = rs
			c.nodeAddRes(n, rs)
			c.alloc(n, rs.env, +1)
			ra.adm.res = rs
			if jb := ra.adm.job; jb != nil && jb.state == jobQueued {
				jb.res, rs.job = rs, jb
			}
			delete(c.restored, rid)
			continue
		}
		c.emit(Release{Reservation: rid, Node: n.id})
	}
	for rid, ra := range c.restored {
		if ra.node == n.id && !resSet[rid] {
			delete(c.restored, rid) // its reservation is gone
		}
	}
	jobSet := make(map[JobID]bool, len(h.Jobs))
	for _, j := range h.Jobs {
		jobSet[j] = true
	}
	for _, jb := range sortedJobs(n.jobs) {
		switch {
		case jobSet[jb.id] && jb.state == jobStarting:
			c.jobRunning(jb) // FAIL-15: the lost answer was "accepted"
		case jobSet[jb.id]:
		case jb.state == jobStarting:
			c.jobLeavesNode(jb) // the node never took it: place it again
			c.requeueJob(jb)
		default:
			c.jobLost(jb)
		}
	}
	jids := slices.Clone(h.Jobs)
	slices.Sort(jids)
	for _, jid := range slices.Compact(jids) {
		jb := c.jobs[jid]
		switch {
		case jb != nil && jb.state == jobFinished:
			// its result is on the way; nothing to do
		case jb == nil, jb.state == jobEnded, jb.node != n:
			// unknown, given up on (FAIL-17), or placed elsewhere since
			c.emit(CancelJob{Node: n.id, Job: jid})
		}
	}
}

func (c *Core) onNodeUnreachable(id NodeID) {
	n := c.nodes[id]
	if n == nil {
		return
	}
	c.nodeChanging(n)
	c.shapeOut(n)
	n.reachable = false
	c.nodeChanged(n)
	for _, rs := range sortedRes(n.res) {
		if rs.state == resOffered {
			c.offerFailed(rs)
		}
	}
}

func (c *Core) onNodeLost(id NodeID) {
	n := c.nodes[id]
	if n == nil {
		return
	}
	for _, rs := range sortedRes(n.res) {
		if rs.state == resOffered {
			c.offerFailed(rs)
		} else {
			c.onLeaseGone(rs.id, "node lost")
		}
	}
	for _, jb := range sortedJobs(n.jobs) {
		c.jobLost(jb)
	}
	c.nodeChanging(n)
	c.shapeOut(n)
	n.known, n.reachable = false, false
	c.nodeChanged(n)
}

// nodeAddRes, nodeDropRes, nodeAddJob and nodeDropJob keep a node's
// reservation and job lists, each entry knowing its index so that it
// leaves in O(1).
func (c *Core) nodeAddRes(n *node, r *reservation) {
	r.nodeIdx = len(n.res)
	n.res = append(n.res, r)
}

func (c *Core) nodeDropRes(n *node, r *reservation) {
	i := r.nodeIdx
	if i < 0 || i >= len(n.res) || n.res[i] != r {
		return
	}
	last := n.res[len(n.res)-1]
	n.res[i], last.nodeIdx = last, i
	n.res[len(n.res)-1] = nil // no stale pointer in the backing array
	n.res = n.res[:len(n.res)-1]
	r.nodeIdx = -1
}

func (c *Core) nodeAddJob(n *node, j *job) {
	j.nodeIdx = int32(len(n.jobs))
	n.jobs = append(n.jobs, j)
}

func (c *Core) nodeDropJob(n *node, j *job) {
	i := int(j.nodeIdx)
	if i < 0 || i >= len(n.jobs) || n.jobs[i] != j {
		return
	}
	last := n.jobs[len(n.jobs)-1]
	n.jobs[i], last.nodeIdx = last, int32(i)
	n.jobs[len(n.jobs)-1] = nil
	n.jobs = n.jobs[:len(n.jobs)-1]
	j.nodeIdx = -1
}
