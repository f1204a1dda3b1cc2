package sched

import "time"

// Deadlines are data (STYLE C6): one ordered set of (time, seq) entries,
// fired in order by every Step. An entry is a hint: on firing, the owner's
// state decides whether it still applies, so stale entries cost nothing.
type timer struct {
	at   int64 // Unix nanoseconds
	seq  uint64
	id   uint64
	kind timerKind
}

type timerKind uint8

const (
	tmOffer    timerKind = iota // reservation offered: 5 s answer deadline (ARB-23)
	tmLease                     // reservation lease end (ARB-27)
	tmIdle                      // ticket unpolled for 120 s (ARB-03)
	tmRetry                     // waiter parked after all nodes tried (ARB-23)
	tmRunner                    // runner backoff end or busy_secs end
	tmDeadline                  // job place_within deadline (ARB-37)
	tmForget                    // drop an ended admission's record
	tmDrain                     // automatic drain held DrainMaxHold (BS-22)
)

func timerLess(a, b timer) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

func (c *Core) addTimer(at time.Time, k timerKind, id uint64) timer {
	c.timerSeq++
	t := timer{at: at.UnixNano(), seq: c.timerSeq, kind: k, id: id}
	c.timers.Set(t)
	return t
}

// dropTimer removes a pending timer an owner no longer needs, so timers
// stay as many as the things actually waiting.
func (c *Core) dropTimer(t *timer) {
	if t.seq != 0 {
		c.timers.Delete(*t)
		*t = timer{}
	}
}

func (c *Core) fireTimers() {
	for {
		t, ok := c.timers.Min()
		if !ok || t.at > c.now.UnixNano() {
			return
		}
		c.timers.Delete(t)
		c.fire(t)
	}
}

func (c *Core) fire(t timer) {
	switch t.kind {
	case tmOffer:
		rs := c.res[ReservationID(t.id)]
		if rs != nil && rs.tm.seq == t.seq {
			rs.tm = timer{}
		}
		if rs != nil && rs.state == resOffered && !c.now.Before(rs.offeredAt.Add(c.pol.OfferTimeout)) {
			c.offerFailed(rs)
		}
	case tmLease:
		rs := c.res[ReservationID(t.id)]
		if rs != nil && rs.tm.seq == t.seq {
			rs.tm = timer{}
		}
		if rs == nil || rs.state != resHeld || c.now.Before(rs.leaseEnd) {
			return
		}
		if tk := rs.ticket; tk != nil && tk.state == tkGranted {
			// ARB-27: a grant not claimed before its lease ran out.
			c.emit(Release{Reservation: rs.id, Node: rs.node.id})
			c.resGone(rs)
			c.endTicket(tk, "grant not claimed before its lease ran out")
		}
	case tmIdle:
		tk := c.tickets[TicketID(t.id)]
		if tk == nil || tk.idleTm.seq != t.seq {
			return
		}
		tk.idleTm = timer{}
		if tk.state == tkClaimed || tk.state == tkEnded {
			return
		}
		if due := tk.lastPoll.Add(c.pol.TicketIdle); c.now.Before(due) {
			tk.idleTm = c.addTimer(due, tmIdle, t.id)
			return
		}
		c.cancelTicket(tk, "not polled for 120 s")
	case tmRetry:
		var w *waiter
		if t.id&1 == 0 {
			if tk := c.tickets[TicketID(t.id>>1)]; tk != nil {
				w = &tk.waiter
			}
		} else if jb := c.jobs[JobID(t.id>>1)]; jb != nil {
			w = &jb.waiter
		}
		if w != nil && w.retryAt != 0 && w.retryAt <= c.now.UnixNano() {
			w.retryAt = 0
			c.reindex(w)
		}
	case tmRunner:
		if r := c.runners[RunnerID(t.id)]; r != nil {
			c.refreshRunner(r)
		}
	case tmForget:
		if a := c.adms[AdmissionID(t.id)]; a != nil && a.state == admEnded {
			delete(c.adms, a.id)
		}
	case tmDrain:
		c.fireDrain(NodeID(t.id))
	case tmDeadline:
		jb := c.jobs[JobID(t.id)]
		if jb == nil || jb.deadlineSeq != t.seq {
			return
		}
		jb.deadlineSeq = 0
		if jb.state != jobQueued {
			return
		}
		msg := MsgNoCapacity
		switch {
		case jb.held:
			msg = MsgProjectUnlisted
		case jb.rulesHit:
			msg = MsgPlacementRules
		}
		c.endQueuedJob(jb, "no_capacity", msg)
	}
}
