package ledger

import (
	"cmp"
	"slices"
	"time"
)

// HeldReservation is one reservation in a [Snapshot].
type HeldReservation struct {
	ID            string
	Envelope      Envelope
	RemainingSecs int // rounded down
}

// HeldJob is one job in a [Snapshot].
type HeldJob struct {
	ID          string
	Reservation string   // converted from; "" if admitted without one
	Granted     Envelope // what it holds
	Want        Envelope // what it needs; differs from Granted while Waiting
	Waiting     bool
}

// Snapshot is the ledger's state for the session's held message
// (NSESS-11) and for metrics.
type Snapshot struct {
	State          State
	Runner         bool
	Ceiling        int // valid when HasCeiling
	HasCeiling     bool
	MaxConcurrency int // 0: no limit
	Cap            int // -1: no limit
	Total          Envelope
	Used           Envelope // reservations + jobs' granted
	Reservations   []HeldReservation
	Jobs           []HeldJob
}

// Snapshot returns a copy of the ledger's state at now, entries sorted by
// ID. Reservations whose lease ran out are left out; call [Ledger.Expire]
// first so Used agrees.
func (l *Ledger) Snapshot(now time.Duration) Snapshot {
	s := Snapshot{
		State: l.state, Runner: l.runner, Ceiling: l.ceiling, HasCeiling: l.hasCeiling,
		MaxConcurrency: l.capa.MaxConcurrency, Cap: l.Cap(), Total: l.capa.Total, Used: l.used,
	}
	for id, r := range l.res {
		if r.expires > now {
			s.Reservations = append(s.Reservations, HeldReservation{id, r.env, remaining(r.expires, now)})
		}
	}
	for id, j := range l.jobs {
		s.Jobs = append(s.Jobs, HeldJob{id, j.reservation, j.granted, j.want, j.waiting})
	}
	slices.SortFunc(s.Reservations, func(a, b HeldReservation) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(s.Jobs, func(a, b HeldJob) int { return cmp.Compare(a.ID, b.ID) })
	return s
}
