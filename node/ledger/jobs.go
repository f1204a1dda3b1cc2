package ledger

import (
	"fmt"
	"slices"
	"time"
)

// Start admits job with envelope env (NSESS-07). When reservation names a
// reservation held at now, it becomes the job's entry with the reservation's
// envelope, whatever the node's state, cap or local runner (NODE-07,
// PLACE-08); the caller then sizes the job with [Ledger.Resize]. Otherwise the
// job is admitted like an offer, without waiting: refused runner, not_ready,
// ceiling or concurrency, and, when env does not fit, no_reservation if a
// reservation was named (NODE-08) or the short resource if none was. A job
// the ledger already holds is answered accepted again.
func (l *Ledger) Start(now time.Duration, job, reservation string, env Envelope) StartReply {
	refuse := func(r Reason, msg string) StartReply { return StartReply{Reason: r, Message: msg} }
	if j, ok := l.jobs[job]; ok {
		return StartReply{Accepted: true, Granted: j.granted}
	}
	if job == "" || !env.valid() {
		return refuse(ReasonInvalid, "start needs a job and a non-negative envelope")
	}
	// A reservation whose lease ran out is not held; it stays counted until
	// Expire reports it gone expired.
	if r, ok := l.res[reservation]; ok && r.expires > now {
		l.drop(reservation, GoneStarted)
		l.used = l.used.add(r.env) // drop freed it; the job holds it now
		l.jobs[job] = &jobEntry{granted: r.env, want: r.env, reservation: reservation}
		return StartReply{Accepted: true, Converted: true, Granted: r.env}
	}
	if r, msg := l.admitNew(); r != "" {
		return refuse(r, msg)
	}
	if r, msg := env.short(l.freeForNew()); r != "" {
		if reservation != "" {
			return refuse(ReasonNoReservation, "reservation "+reservation+" not held and job does not fit: "+msg)
		}
		return refuse(r, msg)
	}
	l.jobs[job] = &jobEntry{granted: env, want: env}
	l.used = l.used.add(env)
	return StartReply{Accepted: true, Granted: env}
}

// Adopt puts back a job the journal says was accepted before a node restart,
// with the size it held. It always succeeds, even over capacity or cap: the
// job was admitted already; new work is refused until there is room. A job
// already held is resized to size.
func (l *Ledger) Adopt(job string, size Envelope) {
	if j, ok := l.jobs[job]; ok {
		l.used = l.used.sub(j.granted).add(size)
		j.granted, j.want = size, size
		if j.waiting {
			l.unqueue(job)
		}
		return
	}
	l.jobs[job] = &jobEntry{granted: size, want: size}
	l.used = l.used.add(size)
}

// Resize sets the size job needs (NODE-09). Every resource it holds beyond
// size goes back to the ledger at once, returned as freed; for every resource
// it needs more of, the job waits in the ledger's FIFO queue until the rest is
// free, and waiting is true. A job granted its rest later is reported by
// [Ledger.Granted]. Resizing a waiting job replaces what it waits for.
func (l *Ledger) Resize(job string, size Envelope) (freed Envelope, waiting bool, err error) {
	j, ok := l.jobs[job]
	if !ok {
		return Envelope{}, false, fmt.Errorf("%w: %s", ErrUnknownJob, job)
	}
	if !size.valid() {
		return Envelope{}, false, fmt.Errorf("%w: %+v", ErrInvalid, size)
	}
	keep := j.granted.minEach(size)
	freed = j.granted.sub(keep)
	j.granted, j.want = keep, size
	l.used = l.used.sub(freed)
	switch {
	case j.granted == j.want && j.waiting:
		l.unqueue(job)
	case j.granted != j.want && !j.waiting:
		j.waiting = true
		l.queue = append(l.queue, job)
	}
	l.pump()
	if !j.waiting {
		l.woken = slices.DeleteFunc(l.woken, func(s string) bool { return s == job })
	}
	return freed, j.waiting, nil
}

// Granted returns the jobs that were waiting and have been granted the rest
// of their size since the last call, in the order they were granted, and
// forgets them. Call it after any operation that frees room.
func (l *Ledger) Granted() []string {
	w := l.woken
	l.woken = nil
	return w
}

// Finish removes job's entry, returning what it held to the ledger.
func (l *Ledger) Finish(job string) error {
	j, ok := l.jobs[job]
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownJob, job)
	}
	if j.waiting {
		l.unqueue(job)
	}
	l.used = l.used.sub(j.granted)
	delete(l.jobs, job)
	l.woken = slices.DeleteFunc(l.woken, func(s string) bool { return s == job })
	l.pump()
	return nil
}

func (l *Ledger) unqueue(job string) {
	l.queue = slices.DeleteFunc(l.queue, func(s string) bool { return s == job })
	l.jobs[job].waiting = false
}

// pump grants waiting jobs their rest in FIFO order while it fits.
func (l *Ledger) pump() {
	for len(l.queue) > 0 {
		id := l.queue[0]
		j := l.jobs[id]
		need := j.want.sub(j.granted.minEach(j.want))
		if !need.LessEq(l.capa.Total.sub(l.used)) {
			return
		}
		l.used = l.used.add(need)
		j.granted = j.want
		j.waiting = false
		l.queue = l.queue[1:]
		l.woken = append(l.woken, id)
	}
}
