package sched

import (
	"cmp"
	"slices"
	"time"
)

// TicketView is a ticket as the API answers it.
type TicketView struct {
	// State is queued, offered, granted or claimed; "" for an unknown or
	// ended ticket (answer 410, API-23).
	State string
	// Grant is set once granted; its LeaseSecs is what is left of the lease
	// at the time of the last Step (API-22).
	Grant *Grant
	Wait  Reason
	// Immediate is true while the ticket's offers all went out in the Step
	// that queued it and none failed (API-17): its grant only waits for the
	// node's answer, so the driver may hold the queueing POST briefly and
	// answer 201 with the grant instead of 202. It stays true once granted
	// that way.
	Immediate bool
}

// Ticket returns the ticket's view; ok false when unknown or ended.
func (c *Core) Ticket(id TicketID) (v TicketView, ok bool) {
	tk := c.tickets[id]
	if tk == nil || tk.state == tkEnded {
		return TicketView{}, false
	}
	v.State = tk.state.String()
	if (tk.state == tkGranted || tk.state == tkClaimed) && tk.adm != nil && tk.res != nil {
		left := int(tk.res.leaseEnd.Sub(c.now) / time.Second)
		v.Grant = &Grant{Ticket: tk.id, Admission: tk.adm.id, Reservation: tk.res.id, Node: tk.res.node.id,
			Envelope: tk.res.env, LeaseSecs: max(left, 0)}
	}
	v.Wait = c.ticketReason(tk)
	v.Immediate = tk.immediate
	return v, true
}

// AdmissionState returns granted, claimed, job or ended, and whether the
// admission is known; Outcome is the outcome recorded so far.
func (c *Core) AdmissionState(id AdmissionID) (state string, outcome OutcomeKind, ok bool) {
	a := c.adms[id]
	if a == nil {
		if _, ok := c.admJobs[id]; ok {
			return admJob.String(), OutcomeJob, true
		}
		return "", OutcomeNone, false
	}
	return a.state.String(), a.outcome, true
}

// AdmissionView is an admission as the driver answers for it: whose it
// is, what it holds and where, so the driver keeps no copy of its own.
type AdmissionView struct {
	State   string // granted, claimed, job or ended
	Outcome OutcomeKind
	Runner  RunnerID
	// Ticket is the ticket it was granted on; 0 for a restored admission
	// and once it became a job.
	Ticket TicketID
	// Reservation and Node are what it holds; Reservation is 0 once the
	// reservation is gone (a restored one names the persisted
	// reservation until its node's held adopts or denies it).
	Reservation ReservationID
	Node        NodeID
	Envelope    Resources
	Job         JobID // the job submitted on it; 0 before
	// ClaimedAt is when it was claimed (restored: when the core restored
	// it); zero while granted and once it became a job.
	ClaimedAt time.Time
}

// Admission returns the admission's view; ok false when unknown (never
// granted, or forgotten AdmissionMemory after it ended).
func (c *Core) Admission(id AdmissionID) (AdmissionView, bool) {
	a := c.adms[id]
	if a == nil {
		jid, ok := c.admJobs[id]
		jb := c.jobs[jid]
		if !ok || jb == nil {
			return AdmissionView{}, false
		}
		v := AdmissionView{State: admJob.String(), Outcome: OutcomeJob, Runner: jb.runner.id, Job: jid}
		if rs := jb.res; rs != nil {
			v.Reservation, v.Node, v.Envelope = rs.id, rs.node.id, rs.env
		}
		return v, true
	}
	v := AdmissionView{State: a.state.String(), Outcome: a.outcome, Runner: a.runner.id, ClaimedAt: a.claimedAt}
	if a.ticket != nil {
		v.Ticket = a.ticket.id
	}
	if a.job != nil {
		v.Job = a.job.id
	}
	if rs := a.res; rs != nil {
		v.Reservation, v.Node, v.Envelope = rs.id, rs.node.id, rs.env
	} else if a.state != admEnded {
		for _, rid := range sortedKeys(c.restored) {
			if ra := c.restored[rid]; ra.adm == a {
				v.Reservation, v.Node, v.Envelope = rid, ra.node, ra.env
				break
			}
		}
	}
	return v, true
}

// ReservationAdmission returns the admission holding a reservation
// (granted, claimed, restored, or the admission of the job on it); ok
// false when none does.
func (c *Core) ReservationAdmission(id ReservationID) (AdmissionID, bool) {
	if rs := c.res[id]; rs != nil {
		switch {
		case rs.adm != nil:
			return rs.adm.id, true
		case rs.job != nil && rs.job.admID != 0:
			return rs.job.admID, true
		}
		return 0, false
	}
	if ra, ok := c.restored[id]; ok && ra.adm.state != admEnded {
		return ra.adm.id, true
	}
	return 0, false
}

// OpenTickets counts the tickets waiting, offered or granted and not
// claimed, fleet-wide.
func (c *Core) OpenTickets() int { return c.open }

// JobView is a job as the Core sees it.
type JobView struct {
	State string // queued, starting, running, finished, ended
	Node  NodeID // zero unless starting or running
	Wait  Reason
}

// Job returns the job's view; ok false when unknown (or settled).
func (c *Core) Job(id JobID) (JobView, bool) {
	jb := c.jobs[id]
	if jb == nil {
		return JobView{}, false
	}
	v := JobView{State: jb.state.String(), Wait: c.jobReason(jb)}
	if jb.node != nil {
		v.Node = jb.node.id
	}
	return v, true
}

// Fits returns how many envelopes of the placement the ready nodes can take
// now, each capped by what its cap leaves (API-13, API-14, PLACE-13). For a
// placement no runner uses it scans the pool's nodes.
func (c *Core) Fits(pl Placement) int {
	pl.Labels = sortedSet(pl.Labels)
	if p := c.queues[pl.Key()]; p != nil {
		return p.fits
	}
	total := 0
	for _, n := range c.poolNodes[pl.Pool] {
		if matches(n, &pl) {
			total += roomFor(n, pl.Envelope, n.used, n.placed)
		}
	}
	return total
}

// Held returns what a tenant holds (tickets offered/granted/claimed plus
// unsettled jobs and heartbeat-reported jobs without admission, ARB-11).
func (c *Core) Held(t TenantID) int {
	if x := c.tenants[t]; x != nil {
		return x.held
	}
	return 0
}

// Share returns a tenant's weighted dominant share in a pool: the larger
// of the vCPUs and the memory it holds there (envelopes of its tickets
// offered, granted or claimed, and of its unfinished jobs) as fractions of
// the pool's capacity, divided by its weight (DECISIONS 13). It is the key
// the tenant's waiting requests are ordered by within a class. The
// fractions are of the pool's reference capacity, which follows the live
// capacity whenever the pool's ratio of memory to vCPUs moves by more than
// 1 %; 0 for an unknown tenant or pool.
func (c *Core) Share(t TenantID, pool string) float64 {
	x, ps := c.tenants[t], c.pstat[pool]
	if x == nil || ps == nil {
		return 0
	}
	return c.share(x, ps)
}

// NextDeadline returns the earliest pending deadline, so a driver may sleep
// until then instead of ticking; ok false when none.
func (c *Core) NextDeadline() (time.Time, bool) {
	t, ok := c.timers.Min()
	return time.Unix(0, t.at).UTC(), ok
}

func (c *Core) ticketReason(tk *ticket) Reason {
	switch tk.state {
	case tkOffered:
		return Reason{Code: ReasonOffered}
	case tkQueued:
	default:
		return Reason{}
	}
	if tk.retryAt > c.now.UnixNano() {
		return Reason{Code: ReasonRetry}
	}
	r := tk.runner
	if why := c.runnerBlock(r); why.Code != ReasonNone {
		return why
	}
	if c.backedOff(r) && (len(r.waiting) == 0 || r.waiting[0] != tk) {
		return Reason{Code: ReasonBackoff} // only the lead request goes
	}
	if cp := c.pol.tenantCap(r.tenant.id); cp > 0 && r.tenant.held >= cp {
		return Reason{Code: ReasonTenantCap, N: cp}
	}
	cls := c.ticketClass(r)
	if isProbeClass(cls) && c.probesOut >= c.pol.ProbeLimit {
		return Reason{Code: ReasonProbeLimit, N: c.pol.ProbeLimit}
	}
	return c.queueReason(r.p, cls)
}

func (c *Core) queueReason(p *placementQueue, cls int) Reason {
	switch {
	case p.headroomBlocked && isNormalClass(cls):
		return Reason{Code: ReasonHeadroom}
	case len(p.drains) > 0 && (p.starved || p.nodes.Len() == 0):
		return Reason{Code: ReasonDrain, N: int(p.drains[0].id)}
	case p.starved || p.nodes.Len() == 0:
		return Reason{Code: ReasonNoRoom}
	}
	return Reason{Code: ReasonQueued}
}

func (c *Core) jobReason(jb *job) Reason {
	switch jb.state {
	case jobStarting:
		return Reason{Code: ReasonStarting}
	case jobQueued:
	default:
		return Reason{}
	}
	switch {
	case jb.held:
		return Reason{Code: ReasonProjectUnlisted}
	case jb.retryAt > c.now.UnixNano():
		return Reason{Code: ReasonRetry}
	case jb.rulesHit:
		return Reason{Code: ReasonPlacementRules}
	}
	if jb.admID == 0 && !jb.legacy {
		if cp := c.pol.tenantCap(jb.runnerTenant()); cp > 0 && jb.runner.tenant.held >= cp {
			return Reason{Code: ReasonTenantCap, N: cp}
		}
	}
	return c.queueReason(jb.p, int(jb.cls))
}

// WaitingTickets returns the IDs of unended, unclaimed tickets, sorted; for
// operators' queue pages and tests.
func (c *Core) WaitingTickets() []TicketID {
	var out []TicketID
	for id, tk := range c.tickets {
		if tk.state == tkQueued || tk.state == tkOffered || tk.state == tkGranted {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// Jobs returns the IDs of jobs the Core knows (not yet settled), sorted.
func (c *Core) Jobs() []JobID { return sortedKeys(c.jobs) }

// NodeView is a node's accounting, for operators and invariant checks.
type NodeView struct {
	ID        NodeID
	Capacity  Resources
	Used      Resources
	Placed    int // offers + reservations + jobs on it
	Cap       int // min(ceiling, max_concurrency); 0 none
	Placeable bool
	// DrainJob is the job a [DrainReserve] keeps the node for; 0 none.
	DrainJob JobID
	// DrainFor is the key ([Placement.Key]) of the placement an automatic
	// drain reservation keeps the node for (BS-22); "" none.
	DrainFor string
	// DrainFair says the automatic drain is a fairness drain (held for a
	// starved placement of a tenant below another's share), not one for
	// wide work.
	DrainFair bool
	// DrainReady is when the automatic drain is predicted to complete;
	// work predicted to end before it may backfill the node's free room
	// meanwhile. Zero without an automatic drain.
	DrainReady time.Time
}

func (c *Core) nodeView(n *node) NodeView {
	v := NodeView{ID: n.id, Capacity: n.capacity, Used: n.used, Placed: n.placed,
		Cap: n.nodeCap(), Placeable: n.placeable(), DrainJob: n.drainFor}
	if n.autoDrain != nil {
		v.DrainFor, v.DrainFair = n.autoDrain.key, n.fairDrain
		v.DrainReady = time.Unix(0, n.drainReady).UTC()
	}
	return v
}

// Nodes returns every node's accounting, by ID.
func (c *Core) Nodes() []NodeView {
	out := make([]NodeView, 0, len(c.nodes))
	for _, n := range c.nodes {
		out = append(out, c.nodeView(n))
	}
	slices.SortFunc(out, func(a, b NodeView) int { return cmp.Compare(a.ID, b.ID) })
	return out
}
