// Package ledger is the node's admission ledger: the one place that decides
// whether an offered reservation or a job fits the node, and that holds every
// reservation and job entry while it lasts (NODE-01..09, PLACE-04..08).
//
// The ledger is pure and deterministic, like the hub's scheduling core: it
// starts no goroutines, reads no clock, does no I/O and does not log. Time
// comes in as a [time.Duration] "now" measured on the node's monotonic clock
// since the node started (the shell passes clock.Now().Sub(start)); leases are
// deadlines on that clock and never wall-clock times (ARB-30). The same
// sequence of calls always gives the same answers. A Ledger is not safe for
// concurrent use: the node session owns it on one goroutine, or guards it with
// a mutex.
//
// A reservation's lifecycle:
//
//	Offer ──accepted──▶ held ──Renew──▶ held
//	                     │
//	                     ├── Expire (lease ran out) ───▶ gone expired
//	                     ├── Release / Quarantine ─────▶ gone released
//	                     └── Start naming it ──────────▶ gone started (job entry)
//
// A job's lifecycle in the ledger:
//
//	Start ──accepted──▶ granted ──Resize (needs more)──▶ waiting ──room──▶ granted
//	                       │  ▲──────Resize (fits)────────────┘               │
//	                       └──────────────── Finish ◀──────────────────────────┘
//
// Choices where the spec is silent (documented here, cited by tests):
//   - Order of refusal reasons: invalid, runner, not_ready, ceiling or
//     concurrency, then memory, disk, cpus — the first resource that is short.
//     When both the ceiling and max_concurrency are reached, the smaller limit
//     names the reason (the cap is their minimum, PLACE-04); ceiling on a tie.
//   - Jobs waiting for the rest of their size (NODE-09) come before new
//     reservations and unreserved starts: an offer fits only in what is free
//     after the waiting jobs' outstanding needs, so a waiting job is never
//     starved by a stream of small offers. The waiting queue is strict FIFO.
//   - A renew in any state but ready (and not quarantined) reports the lease
//     without extending it: a drain lets held reservations lapse (NODE-05). A
//     start naming a held reservation is still converted while draining: the
//     job has already been taken from GitLab.
//   - A renew extends the lease to now + lease_secs (at most 600 s), as the
//     spec's "extend the lease from now" reads; remaining seconds are rounded
//     down, so the hub never believes a lease longer than the node's.
//   - Reservations do not survive a node restart (their clock is gone); jobs
//     do, through the journal, and are put back with [Ledger.Adopt].
package ledger

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"
)

// MaxLeaseSecs is the longest lease the ledger grants, in seconds (NODE-04).
// A longer request is clamped to it.
const MaxLeaseSecs = 600

// goneMemory is how many ended reservations the ledger remembers, so that a
// renew or release redelivered after the end is answered with the real why
// rather than unknown.
const goneMemory = 4096

// Errors returned by job operations.
var (
	// ErrUnknownJob is returned for a job the ledger holds no entry for.
	ErrUnknownJob = errors.New("ledger: unknown job")
	// ErrInvalid is returned for a malformed size.
	ErrInvalid = errors.New("ledger: invalid envelope")
)

// Capacity is what the node offers to placed work.
type Capacity struct {
	// Total is the memory, disk and vCPUs set aside for jobs.
	Total Envelope
	// MaxConcurrency is the node's own [executor.schedule] max_concurrency:
	// the most reservations plus unfinished jobs it holds. 0 means no limit
	// of its own.
	MaxConcurrency int
}

// OfferReply is the ledger's answer to an offer (NSESS-12).
type OfferReply struct {
	// Accepted is true when the envelope is set aside.
	Accepted bool
	// LeaseSecs is the lease granted, in seconds (≤ MaxLeaseSecs), when
	// Accepted.
	LeaseSecs int
	// Reason is why the offer was refused; empty when Accepted.
	Reason Reason
	// Message explains a refusal for operators; may be empty.
	Message string
}

// LeaseState is the state of a reservation after a renew or release
// (NSESS-13): held with the seconds left, or gone with why.
type LeaseState struct {
	// Held is true while the ledger holds the reservation.
	Held bool
	// RemainingSecs is the lease left, rounded down, when Held.
	RemainingSecs int
	// Why is why the reservation is gone, when not Held.
	Why GoneWhy
}

// StartReply is the ledger's answer to a start.
type StartReply struct {
	// Accepted is true when the job has an entry in the ledger.
	Accepted bool
	// Converted is true when a held reservation became the job's entry
	// (NODE-07); the reservation is then gone started.
	Converted bool
	// Granted is what the job's entry holds: the reservation's envelope
	// when Converted, otherwise the start's envelope.
	Granted Envelope
	// Reason is why the start was refused; empty when Accepted.
	Reason Reason
	// Message explains a refusal; may be empty.
	Message string
}

type reservation struct {
	env     Envelope
	expires time.Duration // on the node's monotonic clock
}

type jobEntry struct {
	granted     Envelope // counted in used
	want        Envelope // the size it needs; == granted unless waiting
	waiting     bool     // in Ledger.queue
	reservation string   // the reservation it was converted from, or ""
}

// Ledger is the admission ledger. Create it with [New].
type Ledger struct {
	capa       Capacity
	ceiling    int  // hub ceiling, valid when hasCeiling
	hasCeiling bool // false until the hub applies one
	state      State
	runner     bool // a local gitlab-runner with the vk executor is present

	res   map[string]*reservation
	jobs  map[string]*jobEntry
	queue []string // waiting jobs, FIFO
	used  Envelope // reservations + jobs' granted

	gone      map[string]GoneWhy // ended reservations, bounded by goneMemory
	goneOrder []string           // eviction order of gone
	woken     []string           // jobs granted their rest since the last Granted call
}

// New returns an empty ledger for capacity c, in state ready, with no hub
// ceiling and no local runner.
func New(c Capacity) *Ledger {
	return &Ledger{
		capa:  c,
		state: StateReady,
		res:   map[string]*reservation{},
		jobs:  map[string]*jobEntry{},
		gone:  map[string]GoneWhy{},
	}
}

// count is the number of entries the cap counts: held reservations plus
// unfinished jobs (PLACE-05).
func (l *Ledger) count() int { return len(l.res) + len(l.jobs) }

// Cap is the smaller of the hub's ceiling and max_concurrency (PLACE-04);
// -1 when neither limits the node.
func (l *Ledger) Cap() int {
	c := -1
	if l.hasCeiling {
		c = l.ceiling
	}
	if m := l.capa.MaxConcurrency; m > 0 && (c < 0 || m < c) {
		c = m
	}
	return c
}

// capReason names the limit that one more entry would exceed, or "".
func (l *Ledger) capReason() (Reason, string) {
	n := l.count()
	ceil := l.hasCeiling && n >= l.ceiling
	conc := l.capa.MaxConcurrency > 0 && n >= l.capa.MaxConcurrency
	switch {
	case ceil && (!conc || l.ceiling <= l.capa.MaxConcurrency):
		return ReasonCeiling, fmt.Sprintf("ceiling: %d reservations and jobs held, hub ceiling %d", n, l.ceiling)
	case conc:
		return ReasonConcurrency, fmt.Sprintf("concurrency: %d reservations and jobs held, max_concurrency %d", n, l.capa.MaxConcurrency)
	}
	return "", ""
}

// pending is what waiting jobs still need beyond what they hold.
func (l *Ledger) pending() Envelope {
	var p Envelope
	for _, id := range l.queue {
		j := l.jobs[id]
		p = p.add(j.want.sub(j.granted.minEach(j.want)))
	}
	return p
}

// freeForNew is what an offer or an unreserved start may take: what is not
// used, less what waiting jobs are owed.
func (l *Ledger) freeForNew() Envelope {
	return l.capa.Total.sub(l.used).sub(l.pending())
}

// admitNew checks everything but the resources' fit, for an offer or an
// unreserved start.
func (l *Ledger) admitNew() (Reason, string) {
	if l.runner {
		return ReasonRunner, "a local gitlab-runner with the vk executor runs on this host"
	}
	if l.state != StateReady {
		return ReasonNotReady, "node is " + string(l.state)
	}
	return l.capReason()
}

func leaseDur(secs int) time.Duration {
	return time.Duration(min(secs, MaxLeaseSecs)) * time.Second
}

func remaining(expires, now time.Duration) int {
	if expires <= now {
		return 0
	}
	return int((expires - now) / time.Second)
}

// Offer answers an offer at once (NODE-01): it sets env aside as reservation
// id for leaseSecs (clamped to [MaxLeaseSecs], NODE-04) from now, or refuses
// with the reason that is short. A reservation never waits. An offer
// redelivered with the same id and envelope is answered accepted with the
// lease that remains; the same id with another envelope, or an id that
// already ended, is invalid.
func (l *Ledger) Offer(now time.Duration, id string, env Envelope, leaseSecs int) OfferReply {
	refuse := func(r Reason, msg string) OfferReply { return OfferReply{Reason: r, Message: msg} }
	if id == "" || !env.valid() || env == (Envelope{}) || leaseSecs <= 0 {
		return refuse(ReasonInvalid, "offer needs a reservation, a non-empty envelope and a positive lease")
	}
	if r, ok := l.res[id]; ok {
		if r.expires <= now {
			return refuse(ReasonInvalid, "reservation "+id+" lease ran out")
		}
		if r.env != env {
			return refuse(ReasonInvalid, "reservation "+id+" is held with another envelope")
		}
		return OfferReply{Accepted: true, LeaseSecs: remaining(r.expires, now)}
	}
	if why, ok := l.gone[id]; ok {
		return refuse(ReasonInvalid, "reservation "+id+" already ended: "+string(why))
	}
	if r, msg := l.admitNew(); r != "" {
		return refuse(r, msg)
	}
	if r, msg := env.short(l.freeForNew()); r != "" {
		return refuse(r, msg)
	}
	l.res[id] = &reservation{env: env, expires: now + leaseDur(leaseSecs)}
	l.used = l.used.add(env)
	return OfferReply{Accepted: true, LeaseSecs: min(leaseSecs, MaxLeaseSecs)}
}

// Renew extends reservation id's lease to now + leaseSecs (clamped to
// [MaxLeaseSecs]) and reports it held with the seconds remaining. While the
// node is not ready the lease is reported but not extended, so it lapses
// (NODE-05); leaseSecs ≤ 0 also only reports it. A reservation whose lease
// ran out at or before now is dropped as
// expired. A reservation not held is reported gone with the remembered why,
// or unknown.
func (l *Ledger) Renew(now time.Duration, id string, leaseSecs int) LeaseState {
	r, ok := l.res[id]
	if !ok {
		return LeaseState{Why: l.goneWhy(id)}
	}
	if r.expires <= now {
		l.drop(id, GoneExpired)
		l.pump()
		return LeaseState{Why: GoneExpired}
	}
	if l.state == StateReady && leaseSecs > 0 {
		r.expires = now + leaseDur(leaseSecs)
	}
	return LeaseState{Held: true, RemainingSecs: remaining(r.expires, now)}
}

// Release gives reservation id back (NSESS-06) and reports it gone released;
// one not held is reported gone with the remembered why, or unknown.
func (l *Ledger) Release(id string) LeaseState {
	if _, ok := l.res[id]; !ok {
		return LeaseState{Why: l.goneWhy(id)}
	}
	l.drop(id, GoneReleased)
	l.pump()
	return LeaseState{Why: GoneReleased}
}

// Expire drops every reservation whose lease has run out at now and returns
// their IDs, earliest deadline first (ties by ID); each is gone expired
// (NODE-03).
func (l *Ledger) Expire(now time.Duration) []string {
	type exp struct {
		id string
		at time.Duration
	}
	var out []exp
	for id, r := range l.res {
		if r.expires <= now {
			out = append(out, exp{id, r.expires})
		}
	}
	slices.SortFunc(out, func(a, b exp) int {
		return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.id, b.id))
	})
	ids := make([]string, len(out))
	for i, e := range out {
		ids[i] = e.id
		l.drop(e.id, GoneExpired)
	}
	if len(ids) > 0 {
		l.pump()
	}
	return ids
}

// NextExpiry returns the earliest lease deadline held, on the monotonic clock,
// so the shell can arm one timer for [Ledger.Expire]; ok is false when no
// reservation is held.
func (l *Ledger) NextExpiry() (at time.Duration, ok bool) {
	for _, r := range l.res {
		if !ok || r.expires < at {
			at, ok = r.expires, true
		}
	}
	return at, ok
}

// SetState moves the node to state s. Quarantine releases every held
// reservation (NODE-05) and returns their IDs, sorted; each is gone released.
// Draining, drained and maintenance refuse new work and let leases lapse.
// An unknown state is ignored.
func (l *Ledger) SetState(s State) []string {
	if !s.Valid() {
		return nil
	}
	l.state = s
	if s != StateQuarantined {
		return nil
	}
	ids := make([]string, 0, len(l.res))
	for id := range l.res {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		l.drop(id, GoneReleased)
	}
	l.pump()
	return ids
}

// SetCeiling applies the hub's concurrency ceiling n (n ≥ 0). Lowering it
// never stops entries already held (PLACE-07); it only refuses new ones.
func (l *Ledger) SetCeiling(n int) { l.ceiling, l.hasCeiling = max(n, 0), true }

// ClearCeiling removes the hub's ceiling.
func (l *Ledger) ClearCeiling() { l.ceiling, l.hasCeiling = 0, false }

// SetMaxConcurrency sets the node's own max_concurrency; 0 means no limit.
func (l *Ledger) SetMaxConcurrency(n int) { l.capa.MaxConcurrency = max(n, 0) }

// SetRunner records whether a local gitlab-runner with the vk executor is
// present (PLACE-08).
func (l *Ledger) SetRunner(present bool) { l.runner = present }

// drop removes reservation id, frees its envelope and remembers why.
func (l *Ledger) drop(id string, why GoneWhy) {
	r := l.res[id]
	delete(l.res, id)
	l.used = l.used.sub(r.env)
	if _, ok := l.gone[id]; !ok {
		if len(l.goneOrder) >= goneMemory {
			delete(l.gone, l.goneOrder[0])
			l.goneOrder = l.goneOrder[1:]
		}
		l.goneOrder = append(l.goneOrder, id)
	}
	l.gone[id] = why
}

func (l *Ledger) goneWhy(id string) GoneWhy {
	if why, ok := l.gone[id]; ok {
		return why
	}
	return GoneUnknown
}
