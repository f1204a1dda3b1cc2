package sched

import (
	"cmp"
	"slices"
	"time"
)

func secs(n int) time.Duration { return time.Duration(n) * time.Second }

func (c *Core) onRelayUp(e RelayUp) {
	rl := c.relay(e.Relay)
	if rl.up && rl.session == e.Session {
		return // a repeat
	}
	if rl.up {
		// a new session replaces one the driver did not report ended
		c.onRelayDown(rl.id)
	}
	rl.up, rl.session, rl.synced = true, e.Session, false
	c.refreshRelay(rl)
}

func (c *Core) onRelayDown(id RelayID) {
	rl := c.relays[id]
	if rl == nil {
		return
	}
	rl.up, rl.synced = false, false
	for _, r := range rl.runners {
		ids := make([]TicketID, 0, len(r.tickets))
		for id := range r.tickets {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for _, id := range ids {
			if tk := r.tickets[id]; tk != nil && tk.state != tkClaimed {
				c.cancelTicket(tk, "relay session ended") // ARB-03
			}
		}
	}
	c.refreshRelay(rl)
}

// runner returns (creating) a runner record.
func (c *Core) runner(id RunnerID) *runner {
	r := c.runners[id]
	if r == nil {
		r = &runner{id: id, tickets: map[TicketID]*ticket{}}
		c.runners[id] = r
	}
	return r
}

func (c *Core) onRelayInventory(e RelayInventory) {
	rl := c.relay(e.Relay)
	rl.concurrent = max(e.Concurrent, 0)
	for _, ri := range e.Runners {
		r := c.runner(ri.Runner)
		// take its tickets out while its identity changes
		for _, tk := range r.waiting {
			c.unindexWaiter(&tk.waiter)
		}
		r.indexed = false
		if r.relay != rl {
			if old := r.relay; old != nil {
				old.runners = slices.DeleteFunc(old.runners, func(x *runner) bool { return x == r })
				old.held -= r.held
				old.open -= r.open
				c.refreshRelay(old)
			}
			r.relay = rl
			rl.held += r.held
			rl.open += r.open
			i, _ := slices.BinarySearchFunc(rl.runners, r.id, func(x *runner, id RunnerID) int { return cmp.Compare(x.id, id) })
			rl.runners = slices.Insert(rl.runners, i, r)
		}
		t := c.tenant(ri.Tenant)
		if r.tenant != t {
			moveHolds(r, r.tenant, t)
			if old := r.tenant; old != nil {
				old.held -= r.held
				c.tenantChanged(old)
			}
			r.tenant = t
			t.held += r.held
			c.tenantChanged(t)
		}
		r.p = c.queueFor(ri.Placement)
		r.limit = max(ri.Limit, 0)
		r.reqConc = max(ri.RequestConcurrency, 0)
		r.production = c.pol.ProductionRunners[r.id]
	}
	c.refreshRelay(rl)
}

func (c *Core) onRelayHeartbeat(e RelayHeartbeat) {
	rl := c.relays[e.Relay]
	if rl == nil || !rl.up {
		return
	}
	first := !rl.synced
	req, jobs := map[AdmissionID]bool{}, map[AdmissionID]bool{}
	for _, b := range e.Runners {
		for _, a := range b.RequestAdmissions {
			req[a] = true
		}
		for _, a := range b.JobAdmissions {
			jobs[a] = true
		}
		if r := c.runners[b.Runner]; r != nil && r.relay == rl {
			n := max(b.UnadmittedJobs, 0)
			if d := n - r.unadmitted; d != 0 || n > 0 && r.unadmittedQ != r.p {
				// held under the runner's placement (its envelope)
				c.hold(r, r.unadmittedQ, -int64(r.unadmitted))
				r.unadmittedQ = r.p
				c.hold(r, r.unadmittedQ, int64(n))
				r.unadmitted = n
				c.charge(r, d)
			}
		}
	}
	ids := make([]AdmissionID, 0, len(rl.adms))
	for id := range rl.adms {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		a := rl.adms[id]
		listed := req[id] || jobs[id]
		switch {
		case a.state == admClaimed && a.outcome == OutcomeNone && (first || a.restored):
			// ARB-40: the first heartbeat of a session decides.
			switch {
			case jobs[id]:
				a.outcome, a.state = OutcomeJob, admJob
				if a.ticket != nil {
					c.probeDone(a.ticket)
				}
			case req[id]:
				a.session, a.claimedAt, a.restored = rl.session, c.now, false
			default:
				c.endAdmission(a, "reclaimed: not listed by the relay")
			}
		case a.state == admClaimed && a.outcome == OutcomeNone:
			// ARB-39: the 10 s rule within the claiming session.
			if !listed && a.session == rl.session && !c.now.Before(a.claimedAt.Add(c.pol.ClaimGrace)) {
				c.endAdmission(a, "reclaimed: not listed by the relay")
			}
		case a.state == admJob && a.job == nil && first && !listed:
			c.endAdmission(a, "reclaimed: not listed by the relay")
		}
	}
	rl.synced = true
	c.refreshRelay(rl)
}

// setPolicy installs a policy and refreshes everything derived from it.
func (c *Core) setPolicy(p Policy) {
	c.pol = p.withDefaults()
	// headroom: identical placements count once, at their largest slots
	// (ARB-16); kept in key order.
	bykey := map[string]int{}
	var hs []hentry
	for _, h := range c.pol.Headroom {
		if len(hs) >= MaxHeadroom {
			break
		}
		pl := h.Placement
		pl.Labels = sortedSet(pl.Labels)
		k := pl.Key()
		if i, ok := bykey[k]; ok {
			hs[i].slots = max(hs[i].slots, h.Slots)
			continue
		}
		bykey[k] = len(hs)
		hs = append(hs, hentry{pl: pl, slots: h.Slots})
	}
	slices.SortFunc(hs, func(a, b hentry) int { return cmp.Compare(a.pl.Key(), b.pl.Key()) })
	for _, n := range c.nodes {
		c.nodeChanging(n)
		n.headroomEntries, n.headroomRoom = n.headroomEntries[:0], n.headroomRoom[:0]
	}
	c.headroom = hs
	c.liftAllDrains()
	for _, id := range sortedKeys(c.nodes) {
		c.attachNode(c.nodes[id])
	}
	for _, id := range sortedKeys(c.tenants) {
		c.tenantChanged(c.tenants[id])
	}
	for _, id := range sortedKeys(c.runners) {
		r := c.runners[id]
		if r.production != c.pol.ProductionRunners[id] {
			for _, tk := range r.waiting {
				c.unindexWaiter(&tk.waiter)
			}
			r.indexed = false
			r.production = c.pol.ProductionRunners[id]
		}
		c.refreshRunner(r)
	}
	held := c.heldJobs
	c.heldJobs = nil
	for _, jb := range held {
		jb.held = false
		c.placeJob(jb)
	}
	c.markAllDirty()
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

type restoredRes struct {
	adm  *admission
	node NodeID
	env  Resources
}

func (c *Core) onRestore(e Restore) {
	c.nextID = max(c.nextID, e.NextID)
	for _, ra := range e.Admissions {
		r := c.runner(ra.Runner)
		if r.tenant == nil {
			r.tenant = c.tenant(ra.Tenant)
		}
		if r.relay == nil {
			rl := c.relay(ra.Relay)
			r.relay = rl
			i, _ := slices.BinarySearchFunc(rl.runners, r.id, func(x *runner, id RunnerID) int { return cmp.Compare(x.id, id) })
			rl.runners = slices.Insert(rl.runners, i, r)
		}
		a := &admission{id: ra.Admission, runner: r, state: admClaimed, claimedAt: c.now, restored: true, charged: true,
			chargedTo: c.queueFor(ra.Placement)}
		c.adms[a.id] = a
		c.liveAdms[a.id] = a
		r.relay.adms[a.id] = a
		c.bare++
		r.relay.bare++
		c.hold(r, a.chargedTo, +1)
		c.charge(r, +1)
		c.nextID = max(c.nextID, uint64(ra.Admission), uint64(ra.Reservation))
		if ra.Reservation != 0 {
			if c.restored == nil {
				c.restored = map[ReservationID]restoredRes{}
			}
			c.restored[ra.Reservation] = restoredRes{adm: a, node: ra.Node, env: ra.Placement.Envelope}
		}
	}
	for _, rj := range e.Jobs {
		r := c.runner(rj.Runner)
		if r.tenant == nil {
			r.tenant = c.tenant(rj.Tenant)
		}
		if r.relay == nil {
			rl := c.relay(rj.Relay)
			r.relay = rl
			i, _ := slices.BinarySearchFunc(rl.runners, r.id, func(x *runner, id RunnerID) int { return cmp.Compare(x.id, id) })
			rl.runners = slices.Insert(rl.runners, i, r)
		}
		n := c.nodes[rj.Node]
		if n == nil {
			n = &node{id: rj.Node}
			c.nodes[n.id] = n
		}
		p := r.p
		if p == nil || p.pl.Envelope != rj.Envelope {
			p = c.queueFor(Placement{Envelope: rj.Envelope})
		}
		jb := &job{id: rj.Job, runner: r, p: p, admID: rj.Admission, state: jobRunning, started: true, node: n, charged: true, nodeIdx: -1}
		jb.waiter.jb = jb
		c.jobs[jb.id] = jb
		if rj.Admission != 0 {
			c.admJobs[rj.Admission] = jb.id
		}
		c.nodeAddJob(n, jb)
		c.alloc(n, jb.env(), +1)
		c.hold(r, jb.p, +1)
		c.charge(r, +1)
	}
}
