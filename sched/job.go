package sched

import (
	"slices"
	"time"
)

func (c *Core) onJobSubmitted(e JobSubmitted) {
	if c.jobs[e.Job] != nil {
		c.verdict(VerdictOK, "") // a repeat of the same submission
		return
	}
	r := c.runners[e.Runner]
	if r == nil || r.p == nil {
		c.verdict(VerdictUnavailable, "runner not in its relay's inventory")
		return
	}
	a, ok := c.admissionForJob(e, r)
	if !ok {
		return
	}
	c.seq++
	jb := &job{id: e.Job, runner: r, p: r.p, project: e.Project, ref: e.Ref, legacy: e.Legacy, nodeIdx: -1,
		name: c.intern(e.Name)}
	jb.waiter.seq, jb.waiter.jb = c.seq, jb
	if e.PlaceWithin > 0 {
		jb.at = c.now.Add(e.PlaceWithin).UnixNano() // its deadline, until it starts
	}
	pp, _ := c.pol.project(r.tenant.id, e.Project)
	switch {
	case jb.placeBy() != 0:
		jb.cls = uint8(clsDeadline)
	case r.production || pp.Production:
		jb.cls = uint8(clsProd)
	default:
		jb.cls = uint8(clsNormal)
	}
	if a != nil {
		a.job = jb
		jb.admID = a.id
		jb.charged, a.charged = a.charged, false
		if jb.charged && a.chargedTo != jb.p {
			// held under the ticket's placement until now
			c.hold(r, a.chargedTo, -1)
			c.hold(r, jb.p, +1)
			c.tenantChanged(r.tenant)
		}
		a.chargedTo = nil
		delete(c.adms, a.id)
		delete(c.liveAdms, a.id)
		c.bareGone(a)
		c.forgetAdmission(a)
		c.admJobs[a.id] = jb.id
		if a.res != nil && a.res.state == resHeld {
			jb.res = a.res
			a.res.job = jb
		}
		if a.ticket != nil {
			tk := a.ticket
			c.dropTimer(&tk.idleTm)
			delete(tk.runner.tickets, tk.id)
			delete(c.tickets, tk.id)
			a.ticket = nil
		}
	}
	c.jobs[jb.id] = jb
	if k := affinityKey(e.Project, e.Images); k != "" {
		c.jobAff[jb.id] = k
	}
	c.verdict(VerdictOK, "")
	c.placeJob(jb)
}

// admissionForJob checks a submission against the admission it names
// (API-31, API-34) and, the first time, turns the admission into a job
// outcome. It answers the verdict itself when the submission is refused
// (ok false); a submission without an admission returns a nil admission.
func (c *Core) admissionForJob(e JobSubmitted, r *runner) (a *admission, ok bool) {
	if e.Admission != 0 {
		a = c.adms[e.Admission]
		_, jobbed := c.admJobs[e.Admission]
		switch {
		case a == nil && jobbed:
			c.verdict(VerdictConflict, "admission already used")
			return nil, false
		case a == nil:
			c.verdict(VerdictNotFound, "no such admission")
			return nil, false
		case a.runner != r || e.Reservation != 0 && a.res != nil && a.res.id != e.Reservation:
			// API-31, API-34: a mismatching job ends its admission as empty.
			if a.state == admClaimed && a.outcome == OutcomeNone {
				a.outcome = OutcomeEmpty
				c.endAdmission(a, "job did not match its admission")
			}
			c.verdict(VerdictForbidden, "job does not match its admission")
			return nil, false
		case a.job != nil:
			c.verdict(VerdictConflict, "admission already used")
			return nil, false
		case a.state == admGranted:
			c.verdict(VerdictConflict, "grant not claimed")
			return nil, false
		case a.state == admEnded || a.outcome != OutcomeNone && a.outcome != OutcomeJob:
			c.verdict(VerdictConflict, "admission ended")
			return nil, false
		}
		if a.outcome == OutcomeNone {
			a.outcome, a.state = OutcomeJob, admJob
			c.tookJob(r)
			if a.ticket != nil {
				c.probeDone(a.ticket)
			}
		}
	} else if e.Reservation != 0 {
		c.verdict(VerdictForbidden, "a job on a queued reservation must name its admission")
		return nil, false
	}
	return a, true
}

// placeJob starts a submitted job on its reservation, or queues it
// (ARB-36, ARB-37, ARB-41, PLACE-24).
func (c *Core) placeJob(jb *job) {
	jb.state = jobQueued
	c.armDeadline(jb)
	pp, listed := c.pol.project(jb.runnerTenant(), jb.project)
	if !listed && !jb.legacy {
		if !jb.held {
			jb.held = true
			c.heldJobs = append(c.heldJobs, jb)
		}
		return
	}
	if rs := jb.res; rs != nil && rs.state == resHeld {
		n := rs.node
		// PLACE-18: a warm node takes the job; the reservation is released.
		if k := c.jobAff[jb.id]; k != "" && !c.isWarm(n, k) {
			if w := c.affinityNode(jb, pp.Rules); w != nil && w != n {
				c.emit(Release{Reservation: rs.id, Node: n.id})
				c.resGone(rs)
				c.startJob(jb, w, nil)
				return
			}
		}
		switch {
		case len(pp.Rules) > 0 && !rulesAllow(pp.Rules, jb.ref, n.id, n.pools):
			// PLACE-24: rules do not steer reservations.
			c.emit(Release{Reservation: rs.id, Node: n.id})
			c.resGone(rs)
			jb.rulesHit = true
		case n.known && n.reachable:
			c.startJob(jb, n, rs)
			return
		default:
			c.emit(Release{Reservation: rs.id, Node: n.id})
			c.resGone(rs)
		}
	}
	c.requeueJob(jb)
}

// requeueJob puts a job back to wait for a node (FAIL-14), or ends it when
// its deadline already passed.
func (c *Core) requeueJob(jb *job) {
	jb.state, jb.node = jobQueued, nil
	if by := jb.placeBy(); by != 0 && c.now.UnixNano() >= by {
		msg := MsgNoCapacity
		if jb.rulesHit {
			msg = MsgPlacementRules
		}
		c.endQueuedJob(jb, "no_capacity", msg)
		return
	}
	c.armDeadline(jb)
	c.reindex(&jb.waiter)
}

// armDeadline sets the job's place_within timer while it waits.
func (c *Core) armDeadline(jb *job) {
	if by := jb.placeBy(); by != 0 && jb.deadlineSeq == 0 {
		jb.deadlineSeq = c.addTimer(time.Unix(0, by), tmDeadline, uint64(jb.id)).seq
	}
}

// dropDeadline removes the job's place_within timer.
func (c *Core) dropDeadline(jb *job) {
	if jb.deadlineSeq != 0 {
		c.timers.Delete(timer{at: jb.placeBy(), seq: jb.deadlineSeq, id: uint64(jb.id), kind: tmDeadline})
		jb.deadlineSeq = 0
	}
}

// endQueuedJob ends a job that never ran (FAIL-10). It stays charged until
// settled (ARB-35).
func (c *Core) endQueuedJob(jb *job, failure, msg string) {
	c.unindexWaiter(&jb.waiter)
	if jb.held {
		jb.held = false
		if i := slices.Index(c.heldJobs, jb); i >= 0 {
			c.heldJobs = slices.Delete(c.heldJobs, i, i+1)
		}
	}
	if rs := jb.res; rs != nil && rs.state == resHeld {
		c.emit(Release{Reservation: rs.id, Node: rs.node.id})
		c.resGone(rs)
	}
	jb.state = jobEnded
	c.dropDeadline(jb)
	c.jobDrainDone(jb)
	c.emit(EndJob{Job: jb.id, Failure: failure, Message: msg})
}

func (c *Core) onJobStartReplied(e JobStartReplied) {
	jb := c.jobs[e.Job]
	if jb == nil || jb.state == jobEnded {
		if e.Accepted {
			c.emit(CancelJob{Node: e.Node, Job: e.Job})
		}
		return
	}
	if jb.state != jobStarting || jb.node == nil || jb.node.id != e.Node {
		return
	}
	if e.Accepted {
		c.jobRunning(jb)
		return
	}
	// FAIL-14: refused, so no node has it: place it again elsewhere.
	n := jb.node
	c.jobLeavesNode(jb)
	if jb.skip == nil {
		jb.skip = map[NodeID]bool{}
	}
	jb.skip[n.id] = true
	c.requeueJob(jb)
}

// jobLeavesNode frees the job's room on its node.
func (c *Core) jobLeavesNode(jb *job) {
	if n := jb.node; n != nil {
		c.nodeDropJob(n, jb)
		c.alloc(n, jb.env(), -1)
		jb.node = nil
	}
}

func (c *Core) onJobFinished(e JobFinished) {
	jb := c.jobs[e.Job]
	switch {
	case e.Name != "":
		var r *runner
		if jb != nil {
			r = jb.runner
		}
		c.noteRuntime(e.Name, e.Wall, r)
	case jb != nil && jb.name != 0 && (jb.state == jobStarting || jb.state == jobRunning):
		wall := e.Wall
		if at := jb.startedAt(); wall == 0 && jb.state == jobRunning && at > 0 {
			wall = c.now.Sub(time.Unix(0, at))
		}
		c.noteRuntime(c.names[jb.name], wall, jb.runner)
	}
	if jb == nil || (jb.state != jobStarting && jb.state != jobRunning) {
		return
	}
	if n := jb.node; n != nil {
		c.noteWarm(n, jb) // the image cache idles from its last use
	}
	c.jobLeavesNode(jb)
	jb.state = jobFinished
	if jb.charged && !jb.idle {
		jb.idle = true
		c.hold(jb.runner, jb.p, -1) // it holds no node room any more
		c.tenantChanged(jb.runner.tenant)
	}
}

func (c *Core) onJobSettled(id JobID) {
	jb := c.jobs[id]
	if jb == nil {
		c.verdict(VerdictOK, "")
		return
	}
	switch jb.state {
	case jobQueued:
		c.endQueuedJob(jb, "canceled", "settled before it was placed")
	case jobStarting, jobRunning:
		c.jobLeavesNode(jb)
	}
	if jb.charged {
		jb.charged = false
		if !jb.idle {
			c.hold(jb.runner, jb.p, -1)
		}
		c.charge(jb.runner, -1)
	}
	jb.idle = false
	if jb.admID != 0 {
		delete(c.admJobs, jb.admID)
	}
	delete(c.jobAff, jb.id)
	c.dropDeadline(jb)
	delete(c.jobs, id)
	c.verdict(VerdictOK, "")
}

// jobLost ends a started job whose node is lost (FAIL-11, FAIL-16).
func (c *Core) jobLost(jb *job) {
	c.jobLeavesNode(jb)
	jb.state = jobEnded
	c.emit(EndJob{Job: jb.id, Failure: "lost", Message: MsgNodeLost})
}
