package sched

import "time"

func (c *Core) onTicketQueued(e TicketQueued) {
	if tk := c.tickets[e.Ticket]; tk != nil {
		// API-44: a retried request answers its existing ticket.
		if tk.state == tkGranted {
			c.verdict(VerdictOK, "")
		} else {
			c.verdict(VerdictPending, "")
		}
		return
	}
	r := c.runners[e.Runner]
	switch {
	case r == nil || r.relay == nil || !r.relay.up || r.p == nil:
		c.verdict(VerdictUnavailable, "relay session not connected or runner not in its inventory")
		return
	case r.reqConc > 0 && r.open >= r.reqConc:
		c.verdict(VerdictUnavailable, MsgRunnerLimit)
		return
	case c.relayUnended(r.relay) >= c.pol.RelayTicketLimit:
		c.verdict(VerdictUnavailable, MsgRelayLimit)
		return
	case len(c.tickets)+c.bare >= c.pol.TicketLimit:
		c.verdict(VerdictUnavailable, MsgHubLimit)
		return
	}
	c.seq++
	tk := &ticket{id: e.Ticket, runner: r, lastPoll: c.now}
	tk.waiter.seq, tk.waiter.tk = c.seq, tk
	c.tickets[tk.id] = tk
	r.tickets[tk.id] = tk
	c.openDelta(r, +1)
	tk.idleTm = c.addTimer(c.now.Add(c.pol.TicketIdle), tmIdle, uint64(tk.id))
	tk.immediate = true
	c.justQueued = tk
	c.runnerAddWaiting(r, tk)
	c.verdict(VerdictPending, "")
}

func (c *Core) onTicketPolled(id TicketID) {
	tk := c.tickets[id]
	if tk == nil || tk.state == tkEnded {
		c.verdict(VerdictGone, "")
		return
	}
	tk.lastPoll = c.now
	if tk.state == tkGranted || tk.state == tkClaimed {
		c.verdict(VerdictOK, "")
		return
	}
	c.verdict(VerdictPending, "")
}

func (c *Core) onTicketCancelled(id TicketID) {
	tk := c.tickets[id]
	switch {
	case tk == nil || tk.state == tkEnded:
		c.verdict(VerdictOK, "")
	case tk.state == tkClaimed:
		c.verdict(VerdictConflict, "ticket already claimed")
	default:
		c.cancelTicket(tk, "cancelled")
		c.verdict(VerdictOK, "")
	}
}

// cancelTicket ends an unclaimed ticket, releasing any offered or granted
// reservation.
func (c *Core) cancelTicket(tk *ticket, why string) {
	if rs := tk.res; rs != nil && (rs.state == resOffered || rs.state == resHeld) {
		c.emit(Release{Reservation: rs.id, Node: rs.node.id})
		c.resGone(rs)
	}
	if a := tk.adm; a != nil && a.state == admGranted {
		c.admissionEnded(a)
	}
	c.endTicket(tk, why)
}

// endTicket marks the ticket ended and answers its next poll 410.
func (c *Core) endTicket(tk *ticket, why string) {
	if tk.state == tkEnded {
		return
	}
	if tk.state == tkQueued {
		c.runnerDropWaiting(tk.runner, tk)
	}
	if tk.state != tkClaimed {
		c.openDelta(tk.runner, -1)
	}
	tk.state, tk.endWhy = tkEnded, why
	c.dropTimer(&tk.idleTm)
	if tk.charged {
		tk.charged = false
		c.hold(tk.runner, tk.chargedTo, -1)
		tk.chargedTo = nil
		c.charge(tk.runner, -1)
	}
	c.probeDone(tk)
	delete(tk.runner.tickets, tk.id)
	delete(c.tickets, tk.id)
	c.emit(Expire{Ticket: tk.id, Reason: why})
}

// resGone frees a reservation's room and forgets it.
func (c *Core) resGone(rs *reservation) {
	c.dropTimer(&rs.tm)
	if rs.state == resOffered || rs.state == resHeld {
		c.nodeDropRes(rs.node, rs)
		c.alloc(rs.node, rs.env, -1)
	}
	rs.state = resGone
	delete(c.res, rs.id)
	if rs.ticket != nil && rs.ticket.res == rs {
		rs.ticket.res = nil
	}
	if rs.adm != nil && rs.adm.res == rs {
		rs.adm.res = nil
	}
	if rs.job != nil && rs.job.res == rs {
		rs.job.res = nil
	}
}

// offerFailed handles a refused or unanswered offer: the node is skipped
// for this ticket until every fitting node was tried (ARB-23).
func (c *Core) offerFailed(rs *reservation) {
	tk, n := rs.ticket, rs.node
	c.resGone(rs)
	if tk == nil || tk.state != tkOffered {
		return
	}
	tk.state, tk.immediate = tkQueued, false
	if tk.charged {
		tk.charged = false
		c.hold(tk.runner, tk.chargedTo, -1)
		tk.chargedTo = nil
		c.charge(tk.runner, -1)
	}
	if tk.skip == nil {
		tk.skip = map[NodeID]bool{}
	}
	tk.skip[n.id] = true
	// back in line first, so a lead request ending here leads again
	c.runnerAddWaiting(tk.runner, tk)
	c.probeDone(tk)
}

func (c *Core) onOfferReplied(e OfferReplied) {
	rs := c.res[e.Reservation]
	if rs == nil || rs.state != resOffered || rs.node.id != e.Node {
		if e.Accepted {
			// a late acceptance of an offer given up on
			c.emit(Release{Reservation: e.Reservation, Node: e.Node})
		}
		return
	}
	if !e.Accepted {
		c.offerFailed(rs)
		return
	}
	tk := rs.ticket
	lease := e.LeaseSecs
	if lease <= 0 {
		lease = c.pol.LeaseSecs
	}
	rs.state, rs.leaseSecs = resHeld, lease
	rs.leaseEnd = c.now.Add(time.Duration(lease) * time.Second)
	a := &admission{id: AdmissionID(c.mintID()), runner: tk.runner, state: admGranted, res: rs, ticket: tk}
	rs.adm = a
	c.adms[a.id] = a
	c.liveAdms[a.id] = a
	if tk.runner.relay != nil {
		tk.runner.relay.adms[a.id] = a
	}
	tk.state, tk.adm = tkGranted, a
	clear(tk.skip)
	c.dropTimer(&rs.tm)
	rs.tm = c.addTimer(rs.leaseEnd, tmLease, uint64(rs.id))
	c.emit(Grant{Ticket: tk.id, Admission: a.id, Reservation: rs.id, Node: rs.node.id, Envelope: rs.env, LeaseSecs: lease})
}

func (c *Core) onClaimed(id AdmissionID) {
	a := c.adms[id]
	if _, ok := c.admJobs[id]; ok && a == nil {
		c.verdict(VerdictOK, "")
		return
	}
	switch {
	case a == nil || a.state == admEnded:
		c.verdict(VerdictGone, "no such grant")
	case a.state == admClaimed || a.state == admJob:
		c.verdict(VerdictOK, "")
	case a.res == nil || a.res.state != resHeld:
		c.verdict(VerdictGone, "reservation gone")
	default:
		a.state, a.claimedAt = admClaimed, c.now
		c.dropTimer(&a.res.tm) // the lease end no longer releases it (ARB-27)
		if a.runner.relay != nil {
			a.session = a.runner.relay.session
		}
		if tk := a.ticket; tk != nil {
			tk.state = tkClaimed
			c.openDelta(tk.runner, -1)
			c.dropTimer(&tk.idleTm)
			if tk.charged {
				tk.charged, a.charged = false, true
				a.chargedTo, tk.chargedTo = tk.chargedTo, nil
			}
		}
		c.verdict(VerdictOK, "")
	}
}

func (c *Core) onOutcome(e Outcome) {
	a := c.adms[e.Admission]
	if a == nil {
		if _, ok := c.admJobs[e.Admission]; ok {
			if e.Kind == OutcomeJob {
				c.verdict(VerdictOK, "")
			} else {
				c.verdict(VerdictConflict, "admission already has outcome job")
			}
			return
		}
		c.verdict(VerdictNotFound, "no such admission")
		return
	}
	if e.Kind == OutcomeNone || e.Kind > OutcomeReleased {
		c.verdict(VerdictInvalid, "no outcome")
		return
	}
	if a.outcome != OutcomeNone || a.state == admEnded {
		// API-28: once decided, only a repeat of the same outcome is fine.
		if a.outcome == e.Kind {
			c.verdict(VerdictOK, "")
		} else {
			c.verdict(VerdictConflict, "admission already has outcome "+a.outcome.String())
		}
		return
	}
	if a.state == admGranted {
		if e.Kind != OutcomeReleased {
			c.verdict(VerdictConflict, "grant not claimed")
			return
		}
		a.outcome = OutcomeReleased
		if tk := a.ticket; tk != nil {
			c.cancelTicket(tk, "released")
		}
		c.verdict(VerdictOK, "")
		return
	}
	a.outcome = e.Kind
	switch e.Kind {
	case OutcomeJob:
		a.state = admJob
		c.tookJob(a.runner)
		if a.ticket != nil {
			c.probeDone(a.ticket)
		}
	case OutcomeEmpty, OutcomeError:
		c.endAdmission(a, e.Kind.String())
		c.backoff(a.runner)
	case OutcomeReleased:
		c.endAdmission(a, "released")
		c.releasedInBackoff(a.runner)
	}
	c.verdict(VerdictOK, "")
}

// onSubmissionRefused ends, as empty, an admission whose job submission
// the driver refused (API-34).
func (c *Core) onSubmissionRefused(id AdmissionID) {
	a := c.adms[id]
	if a == nil || a.job != nil || a.state == admEnded || a.state == admGranted {
		return
	}
	if a.outcome != OutcomeNone && a.outcome != OutcomeJob {
		return
	}
	a.outcome = OutcomeEmpty
	c.endAdmission(a, "job refused")
}

// endAdmission ends an admission without a job, releasing its reservation
// (ARB-34).
func (c *Core) endAdmission(a *admission, why string) {
	if rs := a.res; rs != nil && rs.state == resHeld {
		c.emit(Release{Reservation: rs.id, Node: rs.node.id})
		c.resGone(rs)
	}
	c.admissionEnded(a)
	if a.charged {
		a.charged = false
		c.hold(a.runner, a.chargedTo, -1)
		a.chargedTo = nil
		c.charge(a.runner, -1)
	}
	if tk := a.ticket; tk != nil {
		c.probeDone(tk)
		tk.state = tkEnded
		delete(tk.runner.tickets, tk.id)
		delete(c.tickets, tk.id)
		a.ticket = nil
		c.forgetAdmission(a)
		c.emit(AdmissionEnded{Admission: a.id, Ticket: tk.id, Reason: why})
		return
	}
	c.forgetAdmission(a)
	c.emit(AdmissionEnded{Admission: a.id, Reason: why})
}

// AdmissionMemory is how long an ended admission is remembered, so a
// repeated outcome or claim answers as the first did (API-27); later it is
// unknown (404 / 410).
const AdmissionMemory = 10 * time.Minute

// admissionEnded marks a ended and schedules its removal.
func (c *Core) admissionEnded(a *admission) {
	if a.state == admEnded {
		return
	}
	a.state = admEnded
	delete(c.liveAdms, a.id)
	c.bareGone(a)
	c.forgetAdmission(a)
	c.addTimer(c.now.Add(AdmissionMemory), tmForget, uint64(a.id))
}

// forgetAdmission drops an ended admission from its relay's set.
func (c *Core) forgetAdmission(a *admission) {
	if a.runner.relay != nil {
		delete(a.runner.relay.adms, a.id)
	}
}

func (c *Core) onRenewRequested(id AdmissionID) {
	a := c.adms[id]
	_, jobbed := c.admJobs[id]
	switch {
	case a == nil && jobbed:
		c.verdict(VerdictGone, "reservation gone: its job was submitted")
	case a == nil:
		c.verdict(VerdictNotFound, "no such admission")
	case a.res == nil || a.res.state != resHeld:
		c.verdict(VerdictGone, "reservation gone")
	case a.state != admGranted && c.pol.ClaimRenewals > 0 && int(a.renewals) >= c.pol.ClaimRenewals:
		// ARB-32: a claimed grant covers one job request plus one renewal.
		c.verdict(VerdictConflict, "renewal already used: a claimed grant covers one job request plus "+
			plural(c.pol.ClaimRenewals, "renewal"))
	default:
		if a.state != admGranted {
			a.renewals++
		}
		c.emit(Renew{Reservation: a.res.id, Node: a.res.node.id, LeaseSecs: c.pol.LeaseSecs})
		c.verdict(VerdictOK, "")
	}
}

func (c *Core) onReleased(id AdmissionID) {
	if a := c.adms[id]; a != nil {
		if a.state == admGranted && a.ticket != nil {
			c.cancelTicket(a.ticket, "released")
		} else if rs := a.res; rs != nil && rs.state == resHeld {
			c.emit(Release{Reservation: rs.id, Node: rs.node.id})
			c.resGone(rs)
		}
	}
	c.verdict(VerdictOK, "")
}

func (c *Core) onLeaseGone(id ReservationID, why string) {
	rs := c.res[id]
	if rs == nil || (rs.state != resHeld && rs.state != resOffered) {
		return
	}
	tk := rs.ticket
	c.resGone(rs)
	if tk != nil && (tk.state == tkGranted || tk.state == tkOffered) {
		if a := tk.adm; a != nil && a.state == admGranted {
			c.admissionEnded(a)
		}
		c.endTicket(tk, "reservation gone: "+why)
	}
}

// Verdict messages of the limits on unended reservations (API-20).
const (
	MsgRunnerLimit = "runner has request_concurrency tickets outstanding"
	MsgRelayLimit  = "relay holds its limit of unended reservations"
	MsgHubLimit    = "reservation queue full"
)

// relayUnended counts a relay's unended reservations: its runners' live
// tickets (claimed ones too, until their admission ends or becomes a job)
// and its restored admissions, which have no ticket.
func (c *Core) relayUnended(rl *relay) int {
	n := rl.bare
	for _, r := range rl.runners {
		n += len(r.tickets)
	}
	return n
}

// bareGone uncounts an admission without a ticket leaving the live set.
func (c *Core) bareGone(a *admission) {
	if a.ticket != nil {
		return
	}
	c.bare--
	if a.runner.relay != nil {
		a.runner.relay.bare--
	}
}

// openDelta counts tickets waiting, offered or granted (not claimed).
func (c *Core) openDelta(r *runner, d int) {
	r.open += d
	c.open += d
	if r.relay != nil {
		r.relay.open += d
	}
}
