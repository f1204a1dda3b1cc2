package node

import (
	"slices"

	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/node/exec"
	"github.com/vk-ci/vk/node/journal"
	"github.com/vk-ci/vk/node/ledger"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

// handler is the agent's session.Handler: the client calls it from one
// goroutine, one call at a time.
type handler struct{ a *Agent }

// Connected sends report then held on a new session (NSESS-11, NSESS-24)
// and makes every job's sender resend from the acked offset (NODE-11)
// and repeat its result at once (NSESS-16).
func (h handler) Connected(w dispatch.Welcome) {
	a := h.a
	a.mu.Lock()
	defer a.mu.Unlock()
	a.connected = true
	a.sessVersion = w.Version
	a.metrics.connected.Set(1)
	if !w.Resumed {
		a.send(a.reportLocked())
		a.send(a.heldLocked())
		a.resendEgressLocked()
		for _, jr := range a.jobs {
			jr.sendOff = jr.sp.Status().Acked
			jr.gen++
			jr.rewind = true
			jr.resultAt = a.clk.Now()
			jr.resultEvery = 0
		}
	}
	for _, jr := range a.jobs {
		jr.kick()
	}
}

// Disconnected stops the senders until the next welcome.
func (h handler) Disconnected(err error) {
	a := h.a
	a.mu.Lock()
	defer a.mu.Unlock()
	a.connected = false
	a.metrics.connected.Set(0)
}

// Heartbeat returns the node's state and load (PLACE-12).
func (h handler) Heartbeat() dispatch.Heartbeat { return h.a.heartbeat() }

// Message dispatches one hub frame.
func (h handler) Message(m dispatch.Message) {
	a := h.a
	switch m := m.(type) {
	case *dispatch.Offer:
		a.onOffer(m)
	case *dispatch.Renew:
		a.mu.Lock()
		st := a.led.Renew(a.now(), m.Reservation, m.LeaseSecs)
		a.send(leaseFrame(m.Reservation, st))
		a.wakeLocked()
		a.mu.Unlock()
		a.kickLease()
	case *dispatch.Release:
		a.mu.Lock()
		st := a.led.Release(m.Reservation)
		if st.Why == ledger.GoneReleased {
			a.metrics.leaseGone.WithLabelValues(string(dispatch.GoneReleased)).Inc()
		}
		a.send(leaseFrame(m.Reservation, st))
		a.wakeLocked()
		a.checkDrainedLocked()
		a.mu.Unlock()
		a.kickLease()
	case *dispatch.Start:
		a.onStart(m)
	case *dispatch.OutputAck:
		a.onAck(m)
	case *dispatch.Cancel:
		a.onCancel(m)
	case *dispatch.Recorded:
		a.onRecorded(m.Job)
	case *dispatch.Settings:
		a.mu.Lock()
		// OPS-02: a ceiling of 0, and the hub's drain (NODE-05 as the hub
		// sees it), hold the node at no new placed work: new offers are
		// refused (reason ceiling), held reservations lapse, running jobs
		// finish. Each frame carries the whole setting, so a later frame
		// without them lifts it; the node's own state (a local drain or
		// quarantine) is left alone.
		switch {
		case m.CeilingZero || m.Drain:
			a.led.SetCeiling(0)
		case m.Ceiling > 0:
			a.led.SetCeiling(m.Ceiling)
		default:
			a.led.ClearCeiling()
		}
		a.wakeLocked()
		// Only a frame naming pools replaces the config's: one that
		// changes the ceiling or the drain alone leaves them, so a drain
		// or a ceiling never takes the node out of its pools (OPS-01).
		if m.PoolsSet || len(m.Pools) > 0 {
			if changed := !a.hasPools || !slices.Equal(a.pools, m.Pools); changed {
				a.pools, a.hasPools = m.Pools, true
				a.send(a.reportLocked())
			}
		} else if a.hasPools {
			// The operator's pools were withdrawn: back to the config's.
			a.pools, a.hasPools = nil, false
			a.send(a.reportLocked())
		}
		a.mu.Unlock()
		a.log.Info("hub settings applied", "ceiling", m.Ceiling, "ceiling_zero", m.CeilingZero, "drain", m.Drain, "pools", m.Pools)
	default:
		a.log.Warn("unexpected frame from hub ignored", "type", m.FrameType(), "kind", m.FrameKind())
	}
}

func leaseFrame(id string, st ledger.LeaseState) *dispatch.Lease {
	if st.Held {
		return &dispatch.Lease{Reservation: id, State: dispatch.LeaseHeld, RemainingSecs: st.RemainingSecs}
	}
	return &dispatch.Lease{Reservation: id, State: dispatch.LeaseGone, Why: dispatch.GoneWhy(st.Why)}
}

// onOffer answers at once from the ledger (NODE-01).
func (a *Agent) onOffer(m *dispatch.Offer) {
	a.mu.Lock()
	rep := a.led.Offer(a.now(), m.Reservation, toLedger(m.Envelope), m.LeaseSecs)
	if rep.Accepted {
		a.send(&dispatch.OfferReply{Reservation: m.Reservation, Reply: dispatch.ReplyAccepted, LeaseSecs: rep.LeaseSecs})
		a.metrics.offers.WithLabelValues("accepted", "").Inc()
	} else {
		a.send(&dispatch.OfferReply{Reservation: m.Reservation, Reply: dispatch.ReplyRefused,
			Reason: dispatch.RefusalReason(rep.Reason), Message: rep.Message})
		a.metrics.offers.WithLabelValues("refused", string(rep.Reason)).Inc()
	}
	a.mu.Unlock()
	a.log.Debug("offer answered", logkey.Reservation, m.Reservation, "accepted", rep.Accepted, "reason", rep.Reason)
	a.kickLease()
}

// onAck records the hub's durable offset (NSESS-08) and moves the sender
// forward when the hub holds more than it sent in this session (after a
// reconnect, NSESS-24).
func (a *Agent) onAck(m *dispatch.OutputAck) {
	a.mu.Lock()
	defer a.mu.Unlock()
	jr := a.jobs[m.Job]
	if jr == nil {
		return
	}
	if err := jr.sp.Ack(m.Offset); err != nil {
		a.log.Warn("output ack refused", logkey.JobID, m.Job, "offset", m.Offset, logkey.Err, err)
		return
	}

	switch st := jr.sp.Status(); {
	case m.Offset > st.Synced:
	case jr.rewind:
		// The hub's answer to held (NSESS-24): resend from what it holds,
		// even below our last ack (the spool keeps every byte).
		if m.Offset < st.Acked {
			a.log.Warn("hub holds less output than it acked before; resending", logkey.JobID, m.Job, "hub", m.Offset, "acked", st.Acked)
		}
		jr.sendOff, jr.rewind = m.Offset, false
		jr.gen++
	case m.Offset > jr.sendOff:
		jr.sendOff = m.Offset
		jr.gen++
	}
	jr.kick()
	a.broadcastLocked()
}

// onCancel stops a job (NSESS-09): the node answers job now, then finished
// and the result once the job has ended.
func (a *Agent) onCancel(m *dispatch.Cancel) {
	mode := exec.Graceful
	if m.Mode != client.CancelGraceful {
		mode = exec.Immediate // immediate, and any mode this build does not know
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	jr := a.jobs[m.Job]
	if jr != nil && jr.recorded {
		jr = nil
	}
	if jr == nil {
		if e, ok := a.journal.Get(m.Job); ok && (e.Phase == journal.PhaseFinished || e.Phase == journal.PhaseRecorded) {
			a.send(&dispatch.JobUpdate{Job: m.Job, State: dispatch.JobFinished})
			return
		}
		a.send(&dispatch.JobUpdate{Job: m.Job, State: dispatch.JobRefused, Reason: dispatch.RefusalInvalid, Message: "unknown job"})
		return
	}
	if jr.result != nil {
		a.send(&dispatch.JobUpdate{Job: m.Job, State: dispatch.JobFinished})
		jr.resultAt, jr.resultEvery = a.clk.Now(), 0
		jr.kick()
		return
	}
	a.log.Info("job cancel", logkey.JobID, m.Job, "mode", m.Mode)
	if jr.cancel == 0 || mode == exec.Immediate {
		jr.cancel = mode
	}
	if jr.h != nil {
		jr.h.Cancel(mode)
	} else {
		jr.signalCancel()
	}
	a.send(&dispatch.JobUpdate{Job: m.Job, State: dispatch.JobRunning, Stage: jr.stage, Activity: "canceling", Guest: jr.guest})
}

// onRecorded ends a job for good (NSESS-10): journal, spool removal.
func (a *Agent) onRecorded(job string) {
	a.mu.Lock()
	jr := a.jobs[job]
	if jr != nil && jr.result == nil {
		a.mu.Unlock()
		a.log.Warn("recorded for a job still running ignored", logkey.JobID, job)
		return
	}
	if jr != nil {
		// The sender removes the spool and forgets the job.
		jr.recorded = true
		jr.kick()
	}
	a.mu.Unlock()
	if err := a.journal.Recorded(job); err != nil && jr != nil {
		a.log.Error("journal recorded failed", logkey.JobID, job, logkey.Err, err)
	}
	if jr != nil {
		a.log.Info("job result recorded", logkey.JobID, job)
	}
}

// broadcastLocked wakes waiters of job changes.
func (a *Agent) broadcastLocked() {
	close(a.changed)
	a.changed = make(chan struct{})
}
