package sched

import (
	"math/rand/v2"
	"slices"
	"time"

	"github.com/tidwall/btree"
)

// Core is the scheduling core: the arbiter and placement of the hub, as a
// deterministic state machine. It is not safe for concurrent use; its only
// mutator is [Core.Step]. Query methods (TicketState, WaitReason, Fits, …)
// are read-only. The same policy, seed and sequence of (now, event) pairs
// always yield the same actions.
type Core struct {
	pol Policy
	rng *rand.Rand
	now time.Time

	nodes   map[NodeID]*node
	relays  map[RelayID]*relay
	runners map[RunnerID]*runner
	tenants map[TenantID]*tenant
	tickets map[TicketID]*ticket
	res     map[ReservationID]*reservation
	adms    map[AdmissionID]*admission
	// liveAdms is adms without the ended ones remembered for
	// AdmissionMemory, so invariant checks need not walk them
	liveAdms map[AdmissionID]*admission
	jobs     map[JobID]*job
	// admJobs maps admissions that became jobs to them; the admission
	// record itself is dropped then (memory: one per running job).
	admJobs map[AdmissionID]JobID

	queues     map[string]*placementQueue
	poolQueues map[string][]*placementQueue // sorted by key
	poolNodes  map[string][]*node           // nodes of each pool, in report order
	headroom   []hentry
	heldJobs   []*job // jobs held unindexed (ARB-41), by seq

	timers   *btree.BTreeG[timer]
	timerSeq uint64
	seq      uint64
	nextID   uint64

	open              int // unclaimed tickets fleet-wide (API-20)
	bare              int // live admissions without a ticket (restored claimed ones)
	probesOut         int
	probesSinceNormal int
	normalOwed        bool

	dirty *btree.BTreeG[*placementQueue]
	pass  []*placementQueue // placements in the current arbitration pass
	// rekeys lists pools whose fair-share reference changed (share.go)
	rekeys []*poolStat
	out    []Action

	violations []string
	// violationsDropped counts violations past maxViolations.
	violationsDropped int

	// restored maps reservations of persisted claimed admissions, until
	// their node's held adopts or denies them (DECISIONS 6).
	restored map[ReservationID]restoredRes

	// image affinity (PLACE-14..18): jobs' affinity keys, and the nodes
	// warm for each key
	jobAff map[JobID]string
	warm   map[string][]warmEntry

	drains map[JobID]*node         // drain reservations (BS-22)
	stats  map[string]*RuntimeStat // per job name (BS-23)
	// allStats aggregates every name's runs: the prior of a job whose
	// name has none yet (BS-23)
	allStats RuntimeStat
	// names interns job names (index 0 is ""): a job keeps 4 bytes
	names   []string
	nameIdx map[string]uint32

	pstat map[string]*poolStat // per pool: utilization sums, drains held
	// fitScratch and remScratch are timeToFit's and expectedEmpty's
	// buffers; backfilling: place is backfilling a drained node
	fitScratch  []allocLeft
	remScratch  []remaining
	backfilling bool

	// justQueued is the ticket the current Step queued (API-17)
	justQueued *ticket

	// snapNodes is the copy-on-write node table snapshots copy (BS-05);
	// nil until the first Snapshot
	snapNodes *btree.BTreeG[NodeView]
}

type hentry struct {
	pl        Placement
	slots     int
	fleetRoom int
}

// New returns a Core with policy (defaults filled in, see [Policy]) and a
// PRNG seeded with seed (used only for backoff jitter). Normal work is owed
// the first turn (ARB-08).
func New(policy Policy, seed uint64) *Core {
	c := &Core{
		rng:        rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		nodes:      map[NodeID]*node{},
		relays:     map[RelayID]*relay{},
		runners:    map[RunnerID]*runner{},
		tenants:    map[TenantID]*tenant{},
		tickets:    map[TicketID]*ticket{},
		res:        map[ReservationID]*reservation{},
		adms:       map[AdmissionID]*admission{},
		liveAdms:   map[AdmissionID]*admission{},
		jobs:       map[JobID]*job{},
		admJobs:    map[AdmissionID]JobID{},
		jobAff:     map[JobID]string{},
		warm:       map[string][]warmEntry{},
		drains:     map[JobID]*node{},
		stats:      map[string]*RuntimeStat{},
		names:      []string{""},
		nameIdx:    map[string]uint32{},
		pstat:      map[string]*poolStat{},
		queues:     map[string]*placementQueue{},
		poolQueues: map[string][]*placementQueue{},
		poolNodes:  map[string][]*node{},
		timers:     btree.NewBTreeGOptions(timerLess, btOpts),
		dirty:      btree.NewBTreeGOptions(queueLess, btOpts),
		normalOwed: true,
	}
	c.setPolicy(policy)
	return c
}

// Policy returns the policy in force, defaults filled in.
func (c *Core) Policy() Policy { return c.pol }

// Step feeds one event at time now and returns the actions to carry out, in
// order. now must not go backwards (an earlier now is treated as the latest
// seen). Deadlines due at now fire first, then the event is applied, then
// arbitration runs for every placement whose picture changed. The returned
// slice is valid until the next Step.
func (c *Core) Step(now time.Time, ev Event) []Action {
	if now.After(c.now) {
		c.now = now
	}
	c.out = c.out[:0]
	c.fireTimers()
	c.apply(ev)
	c.schedule()
	if tk := c.justQueued; tk != nil {
		c.justQueued = nil
		if tk.state != tkOffered {
			tk.immediate = false
		}
	}
	return c.out
}

func (c *Core) emit(a Action) { c.out = append(c.out, a) }

func (c *Core) verdict(code VerdictCode, msg string) { c.emit(Verdict{Code: code, Message: msg}) }

func (c *Core) mintID() uint64 {
	c.nextID++
	return c.nextID
}

func (c *Core) tenant(id TenantID) *tenant {
	t := c.tenants[id]
	if t == nil {
		t = &tenant{id: id}
		c.tenants[id] = t
	}
	return t
}

func (c *Core) relay(id RelayID) *relay {
	r := c.relays[id]
	if r == nil {
		r = &relay{id: id, adms: map[AdmissionID]*admission{}}
		c.relays[id] = r
	}
	return r
}

func (c *Core) apply(ev Event) {
	switch e := ev.(type) {
	case NodeReport:
		c.onNodeReport(e)
	case NodeHeartbeat:
		if n := c.nodes[e.Node]; n != nil {
			c.nodeChanging(n)
			n.load1, n.hasLoad = e.Load1, e.HasLoad
			c.nodeChanged(n)
		}
	case NodeUnreachable:
		c.onNodeUnreachable(e.Node)
	case NodeLost:
		c.onNodeLost(e.Node)
	case CeilingSet:
		n := c.nodes[e.Node]
		if n == nil {
			// the hub's ceiling may precede the node's first report
			n = &node{id: e.Node}
			c.nodes[n.id] = n
		}
		c.nodeChanging(n)
		n.ceiling = max(e.Ceiling, 0)
		n.closed = e.Zero
		if e.Zero {
			n.ceiling = 0
		}
		c.nodeChanged(n)
	case RelayUp:
		c.onRelayUp(e)
	case RelayDown:
		c.onRelayDown(e.Relay)
	case RelayInventory:
		c.onRelayInventory(e)
	case RelayHeartbeat:
		c.onRelayHeartbeat(e)
	case TicketQueued:
		c.onTicketQueued(e)
	case TicketPolled:
		c.onTicketPolled(e.Ticket)
	case TicketCancelled:
		c.onTicketCancelled(e.Ticket)
	case OfferReplied:
		c.onOfferReplied(e)
	case Claimed:
		c.onClaimed(e.Admission)
	case Outcome:
		c.onOutcome(e)
	case RenewRequested:
		c.onRenewRequested(e.Admission)
	case Renewed:
		if r := c.res[e.Reservation]; r != nil && r.state == resHeld {
			r.leaseEnd = c.now.Add(time.Duration(e.RemainingSecs) * time.Second)
			r.leaseSecs = e.RemainingSecs
			if tk := r.ticket; tk != nil && tk.state == tkGranted {
				c.dropTimer(&r.tm)
				r.tm = c.addTimer(r.leaseEnd, tmLease, uint64(r.id))
			}
		}
	case Released:
		c.onReleased(e.Admission)
	case LeaseGone:
		c.onLeaseGone(e.Reservation, e.Why)
	case JobSubmitted:
		c.onJobSubmitted(e)
	case JobStartReplied:
		c.onJobStartReplied(e)
	case JobFinished:
		c.onJobFinished(e)
	case JobSettled:
		c.onJobSettled(e.Job)
	case SubmissionRefused:
		c.onSubmissionRefused(e.Admission)
	case JobCancelled:
		if jb := c.jobs[e.Job]; jb != nil && jb.state == jobQueued {
			c.endQueuedJob(jb, "canceled", MsgCanceled)
		}
	case PolicyChanged:
		c.setPolicy(e.Policy)
	case Tick:
	case Restore:
		c.onRestore(e)
	case DrainReserve:
		c.onDrainReserve(e)
	}
	c.checkDrains(ev)
}

// schedule runs one arbitration pass over every dirty placement until none
// has anything placeable left. The placements in the pass compete: each
// decision goes to the waiter first in (class, weighted dominant share,
// age) among all of them, so room that frees on a node is arbitrated
// across every placement with room there, not queue by queue in a fixed
// order (ARB-05..09, DECISIONS 13). A placement leaves the pass when its
// next waiter cannot go; a placement made dirty again later in the pass
// (room freed by a lifted drain, say) joins it again.
func (c *Core) schedule() {
	for {
		if len(c.rekeys) > 0 {
			c.rekeyPools()
		}
		for {
			p, ok := c.dirty.PopMin()
			if !ok {
				break
			}
			p.dirty = false
			if !p.inPass {
				p.inPass, p.skipNormal = true, false
				p.starved, p.headroomBlocked, p.rulesRefused = false, false, false
				c.pass = append(c.pass, p)
			}
		}
		if len(c.pass) == 0 {
			return
		}
		var bestQ *placementQueue
		var bestW *waiter
		var best turn
		bestCls := 0
		for i := 0; i < len(c.pass); {
			p := c.pass[i]
			w, cls := c.pick(p, p.skipNormal)
			if w == nil {
				c.leavePass(i)
				continue
			}
			if t := turnOf(w, c.rank(cls)); bestW == nil || t.first(best) {
				bestQ, bestW, bestCls, best = p, w, cls, t
			}
			i++
		}
		if bestW != nil && c.serveOne(bestQ, bestW, bestCls) {
			c.leavePass(slices.Index(c.pass, bestQ))
		}
	}
}

// leavePass ends the pass of c.pass[i] (ARB-05..24): drains nobody waits
// for are lifted, waiters set aside go back into their queues.
func (c *Core) leavePass(i int) {
	p := c.pass[i]
	last := len(c.pass) - 1
	c.pass[i], c.pass[last] = c.pass[last], nil
	c.pass = c.pass[:last]
	p.inPass = false
	// (fairness drains stay: they end when taken, after their time, or
	// when another starved placement needs the room (freeFairDrain))
	// nobody of the placement may go and waits for room any more
	unwantAll := p.fairHeld == 0 && !p.starved && !p.headroomBlocked && len(p.drains) > 0
	aside := p.aside
	p.aside = nil
	for _, w := range aside {
		c.reindex(w)
	}
	clear(aside)
	p.aside = aside[:0]
	if unwantAll {
		c.keepDrains(p, 0)
	} else {
		c.trimDrains(p)
	}
	c.noteWideWait(p)
	// The aside waiters made p dirty again; nothing changed for them.
	if p.dirty {
		c.dirty.Delete(p)
		p.dirty = false
	}
}

// serveOne tries to place waiter w of internal class cls of p, first in
// line across the pass. It returns true when p is stuck: w found no node
// with room, so nothing more of p goes this pass.
func (c *Core) serveOne(p *placementQueue, w *waiter, cls int) (stuck bool) {
	if jb := w.jb; jb != nil && jb.admID == 0 && !jb.legacy {
		// ARB-13: a job without an admission waits on its tenant's cap.
		if cp := c.pol.tenantCap(jb.runnerTenant()); cp > 0 && jb.runner.tenant.held >= cp {
			c.unindexWaiter(w)
			p.aside = append(p.aside, w)
			return false
		}
	}
	if jb := w.jb; jb != nil {
		if n := c.drainNode(jb); n != nil {
			c.clearDrain(n)
			if !(isNormalClass(cls) && c.headroomBlocks(n, p.pl.Envelope)) {
				c.place(p, w, cls, n)
				return false
			}
			// headroom forbids it for now: the node stays reserved
			c.nodeChanging(n)
			n.drainFor = jb.id
			c.drains[jb.id] = n
			c.nodeChanged(n)
		}
		pp, _ := c.pol.project(jb.runnerTenant(), jb.project)
		if n := c.affinityNode(jb, pp.Rules); n != nil && !(isNormalClass(cls) && c.headroomBlocks(n, p.pl.Envelope)) {
			c.place(p, w, cls, n)
			return false
		}
	}
	if n := c.autoDrainFits(p, w); n != nil && !(isNormalClass(cls) && c.headroomBlocksUndrained(n, p)) {
		// BS-22: the node emptied enough; the first waiter claims it
		c.liftDrain(n)
		c.place(p, w, cls, n)
		// The drain is spent, not the wide demand: while more of p waits
		// than it holds drains, the next waiter's drain is chosen now (one
		// drain choice per drain spent), before room left on n or freed
		// by the lift goes to other placements of the pass.
		if nw, _ := c.pick(p, p.skipNormal); nw != nil {
			c.maybeDrain(p, nw)
		}
		return false
	}
	if c.maybeFairDrain(p, w, cls) {
		return false // a node was held for a starved placement: decide again
	}
	n, why := c.pickNode(p, w, cls)
	if n == nil && why == noRoom {
		if bn := c.backfillNode(p, w, cls); bn != nil {
			// no node has room: a drained node's idle room, for work
			// predicted to end before the drain completes (backfill.go)
			c.backfilling = true
			c.place(p, w, cls, bn)
			c.backfilling = false
			return false
		}
	}
	if n == nil {
		switch why {
		case allTried:
			c.unindexWaiter(w)
			clear(w.skip)
			at := c.now.Add(c.pol.RetryAfterAllTried)
			w.retryAt = at.UnixNano()
			c.addTimer(at, tmRetry, c.waiterTimerID(w))
			return false
		case rulesForbid:
			w.jb.rulesHit = true
			p.rulesRefused = true
			c.unindexWaiter(w)
			p.aside = append(p.aside, w)
			return false
		case onlyHeadroom:
			p.headroomBlocked = true
			p.skipNormal = true
			return false
		case keptForWide:
			return true // room frees elsewhere soon; not starved, so no drain
		}
		p.starved = true
		c.maybeDrain(p, w)
		c.noteStarved(p, w)
		return true
	}
	c.place(p, w, cls, n)
	return false
}

// waiterTimerID encodes a waiter for a timer: tickets even, jobs odd.
func (c *Core) waiterTimerID(w *waiter) uint64 {
	if w.tk != nil {
		return uint64(w.tk.id) << 1
	}
	return uint64(w.jb.id)<<1 | 1
}

// reindex puts a waiter back into its queue if nothing parks it.
func (c *Core) reindex(w *waiter) {
	if w.tq != nil || w.retryAt > c.now.UnixNano() {
		return
	}
	w.retryAt = 0
	if tk := w.tk; tk != nil {
		if tk.state != tkQueued {
			return
		}
		r := tk.runner
		if r.indexed && (!r.indexedLead || len(r.waiting) > 0 && r.waiting[0] == tk) {
			c.indexWaiter(w, r.p, r.tenant, r.indexedCls)
		}
		return
	}
	jb := w.jb
	if jb.state != jobQueued || jb.held {
		return
	}
	c.indexWaiter(w, jb.p, jb.runner.tenant, int(jb.cls))
}

// place sends the offer or start for w on n.
func (c *Core) place(p *placementQueue, w *waiter, cls int, n *node) {
	c.unindexWaiter(w)
	env := p.pl.Envelope
	if isNormalClass(cls) {
		c.normalOwed, c.probesSinceNormal = false, 0
	}
	if isNormalClass(cls) && c.headroomBlocks(n, env) {
		c.violate("normal work placed into headroom")
	}
	if room := roomUndrained(n, env); room < 1 || !c.backfilling && !n.placeable() {
		c.violate("placed on a node without room")
	}
	if n.drainFor != 0 || n.autoDrain != nil && (!c.backfilling || c.now.UnixNano() > n.drainReady) {
		c.violate("placed on a drained node")
	}
	if tk := w.tk; tk != nil {
		r := tk.runner
		if cp := c.pol.tenantCap(r.tenant.id); cp > 0 && r.tenant.held >= cp {
			c.violate("tenant over cap")
		}
		if cls == clsProdProbe {
			c.probesSinceNormal++
			if c.probesSinceNormal >= c.pol.ProductionProbeBurst {
				c.normalOwed = true
			}
		}
		rs := &reservation{id: ReservationID(c.mintID()), node: n, env: env, state: resOffered,
			ticket: tk, offeredAt: c.now, leaseSecs: c.pol.LeaseSecs}
		c.res[rs.id] = rs
		c.nodeAddRes(n, rs)
		c.alloc(n, env, +1)
		tk.state, tk.res = tkOffered, rs
		c.runnerDropWaiting(r, tk)
		if c.backedOff(r) {
			tk.lead = true
			r.leadOut++
			if r.leadOut > r.leadAllow() {
				c.violate("a backed-off runner has more lead requests out than its jobs in a row allow")
			}
		}
		if isProbeClass(cls) {
			tk.probe = true
			c.probesOut++
			r.probesOut++
			if c.probesOut > c.pol.ProbeLimit || r.probesOut > 1 {
				c.violate("probe placed over the probe limit")
			}
		}
		tk.charged, tk.chargedTo = true, p
		c.hold(r, p, +1)
		c.charge(r, +1)
		rs.tm = c.addTimer(c.now.Add(c.pol.OfferTimeout), tmOffer, uint64(rs.id))
		c.emit(Offer{Node: n.id, Reservation: rs.id, Ticket: tk.id, Envelope: env, LeaseSecs: rs.leaseSecs})
		return
	}
	jb := w.jb
	c.startJob(jb, n, nil)
}

// startJob sends a start for jb on n, on rs when non-nil.
func (c *Core) startJob(jb *job, n *node, rs *reservation) {
	jb.state, jb.node = jobStarting, n
	c.dropDeadline(jb)
	c.jobDrainDone(jb)
	var rid ReservationID
	if rs != nil {
		rid = rs.id
		rs.state, rs.job = resStarted, nil
		c.dropTimer(&rs.tm)
		c.nodeDropRes(n, rs)
		delete(c.res, rs.id)
		if rs.adm != nil {
			rs.adm.res = nil
		}
		rs.adm, rs.ticket = nil, nil
		jb.res = nil
		// the reservation's allocation becomes the job's: no change in room
	} else {
		c.alloc(n, jb.env(), +1)
	}
	c.nodeAddJob(n, jb)
	c.noteSent(n, jb)
	if !jb.charged && !jb.legacy {
		jb.charged = true
		c.hold(jb.runner, jb.p, +1)
		c.charge(jb.runner, +1)
	}
	c.emit(Start{Job: jb.id, Node: n.id, Reservation: rid, Envelope: jb.env()})
}

// charge adds d to what the runner, its relay and its tenant hold (ARB-11)
// and refreshes everything that depends on it.
func (c *Core) charge(r *runner, d int) {
	r.held += d
	r.tenant.held += d
	c.tenantChanged(r.tenant)
	if rl := r.relay; rl != nil {
		old := rl.held
		rl.held += d
		if rl.concurrent > 0 && (old < rl.concurrent) != (rl.held < rl.concurrent) {
			c.refreshRelay(rl) // crossed the relay's concurrent: all its runners
			return
		}
	}
	c.refreshRunner(r)
}

func (j *job) runnerTenant() TenantID {
	if j.runner == nil || j.runner.tenant == nil {
		return 0
	}
	return j.runner.tenant.id
}
