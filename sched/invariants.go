package sched

import (
	"maps"
	"slices"
	"strconv"
	"strings"
)

// CheckInvariants recomputes the Core's bookkeeping from scratch and
// returns every inconsistency, sorted, nil when sound. It is O(state) and meant for
// tests and the simulator, never for the hub's hot path. It also returns
// violations the Core noticed while deciding (a placement without room,
// normal work into headroom, a tenant over its cap).
func (c *Core) CheckInvariants() []string {
	errs := slices.Clone(c.violations)
	if c.violationsDropped > 0 {
		errs = append(errs, strconv.Itoa(c.violationsDropped)+" more violations not kept")
	}
	noticed := len(errs)
	errs = append(errs, c.checkNodes()...)
	errs = append(errs, c.checkHoldings()...)
	errs = append(errs, c.checkWide()...)
	// maps were walked in no order: sort what was found, after the
	// violations noticed while deciding (in their order)
	slices.Sort(errs[noticed:])
	return errs
}

// problems collects invariant violations, each written from its parts.
type problems []string

func (p *problems) add(parts ...string) { *p = append(*p, strings.Join(parts, "")) }

// checkNodes recounts what each node holds: its reservations and jobs,
// in resources and in placements.
func (c *Core) checkNodes() []string {
	var errs problems
	bad, itoa := errs.add, strconv.Itoa
	for id, n := range c.nodes {
		var used Resources
		placed := 0
		for _, rs := range n.res {
			if rs.state != resOffered && rs.state != resHeld {
				bad("node ", u(id), " lists reservation ", u(rs.id), " in state ", itoa(int(rs.state)))
			}
			used, placed = used.add(rs.env), placed+1
		}
		for _, jb := range n.jobs {
			if jb.state != jobStarting && jb.state != jobRunning {
				bad("node ", u(id), " lists job ", u(jb.id), " in state ", jb.state.String())
			}
			used, placed = used.add(jb.env()), placed+1
		}
		if used != n.used || placed != n.placed {
			bad("node ", u(id), " accounting: used ", n.used.String(), " placed ", itoa(n.placed),
				", recomputed ", used.String(), " ", itoa(placed))
		}
	}
	return errs
}

// recountHeld recounts, in every runner's and tenant's check fields,
// what they hold (ARB-11) and in which resources (DECISIONS 13), and
// returns the open tickets, the probes out and the admissions without a
// ticket per relay.
func (c *Core) recountHeld() (open, probes int, bare map[*relay]int) {
	// one walk over the charged requests recounts what every runner and
	// tenant holds, in requests (ARB-11) and in resources (DECISIONS 13)
	for _, r := range c.runners {
		r.chk.held, r.chk.open, r.chk.holds = 0, 0, r.chk.holds[:0]
	}
	for _, t := range c.tenants {
		t.chk.held, t.chk.holds = 0, t.chk.holds[:0]
	}
	addHold := func(r *runner, p *placementQueue, k int64) {
		if p != nil && k != 0 {
			r.chk.holds = holdsAdd(r.chk.holds, p.ps, p.pl.Envelope, k)
		}
	}
	for _, tk := range c.tickets {
		if tk.charged {
			tk.runner.chk.held++
			addHold(tk.runner, tk.chargedTo, 1)
		}
		if tk.state != tkClaimed && tk.state != tkEnded {
			open++
			tk.runner.chk.open++
		}
		if tk.probe {
			probes++
		}
	}
	bare = map[*relay]int{}
	for _, a := range c.liveAdms {
		if a.ticket == nil {
			bare[a.runner.relay]++
		}
		if a.charged {
			a.runner.chk.held++
			addHold(a.runner, a.chargedTo, 1)
		}
		if a.ticket != nil && a.ticket.probe && c.tickets[a.ticket.id] != a.ticket {
			probes++
		}
	}
	for _, jb := range c.jobs {
		if jb.charged {
			jb.runner.chk.held++
			if !jb.idle {
				addHold(jb.runner, jb.p, 1)
			}
		}
	}
	for _, r := range c.runners {
		addHold(r, r.unadmittedQ, int64(r.unadmitted))
	}
	return open, probes, bare
}

// checkHoldings compares what runners, tenants and relays are said to
// hold with the recount, and the open tickets and probes out.
func (c *Core) checkHoldings() []string {
	var errs problems
	bad, itoa := errs.add, strconv.Itoa
	open, probes, bare := c.recountHeld()
	errs = append(errs, c.checkAdms()...)
	all := 0
	for _, rl := range c.relays {
		all += bare[rl]
		if rl.bare != bare[rl] {
			bad("relay ", u(rl.id), " admissions without a ticket ", itoa(rl.bare), ", recomputed ", itoa(bare[rl]))
		}
	}
	if all+bare[nil] != c.bare {
		bad("admissions without a ticket ", itoa(c.bare), ", recomputed ", itoa(all+bare[nil]))
	}
	for id, r := range c.runners {
		if want := r.chk.held + r.unadmitted; r.held != want {
			bad("runner ", u(id), " holds ", itoa(r.held), ", recomputed ", itoa(want))
		}
		if r.open != r.chk.open {
			bad("runner ", u(id), " open tickets ", itoa(r.open), ", recomputed ", itoa(r.chk.open))
		}
		if !sameHolds(r.holds, r.chk.holds) {
			bad("runner ", u(id), " fair-share holdings stale")
		}
		if t := r.tenant; t != nil {
			t.chk.held += r.held
			for _, h := range r.holds {
				t.chk.holds = holdsAddRaw(t.chk.holds, h, 1)
			}
		}
	}
	for id, t := range c.tenants {
		if t.held != t.chk.held {
			bad("tenant ", u(id), " holds ", itoa(t.held), ", recomputed ", itoa(t.chk.held))
		}
		if !sameHolds(t.holds, t.chk.holds) {
			bad("tenant ", u(id), " fair-share holdings stale")
		}
	}
	errs = append(errs, c.checkShareKeys()...)
	if open != c.open {
		bad("open tickets ", itoa(c.open), ", recomputed ", itoa(open))
	}
	if probes != c.probesOut {
		bad("probes out ", itoa(c.probesOut), ", recomputed ", itoa(probes))
	}
	return errs
}

// checkWide recounts pool utilization sums and automatic drains (BS-21,
// BS-22).
func (c *Core) checkWide() []string {
	var errs []string
	want := map[string]*poolStat{}
	for id, n := range c.nodes {
		if n.inUtilization != n.serving() {
			errs = append(errs, "node "+u(id)+" utilization membership stale")
		}
		if n.inShapes != n.serving() {
			errs = append(errs, "node "+u(id)+" shape membership stale")
		}
		if n.serving() {
			for _, pool := range n.pools {
				ps := want[pool]
				if ps == nil {
					ps = &poolStat{}
					want[pool] = ps
				}
				ps.add(n, +1)
				if ps.shapes == nil {
					ps.shapes = map[Resources]int{}
				}
				ps.shapes[n.capacity]++
			}
		}
		if p := n.autoDrain; p != nil {
			if !slices.Contains(p.drains, n) {
				errs = append(errs, "node "+u(id)+" drained for "+p.key+", which holds another drain")
			}
			ps := want[p.pl.Pool]
			if ps == nil {
				ps = &poolStat{}
				want[p.pl.Pool] = ps
			}
			if n.fairDrain {
				ps.fairDrains++
			} else {
				ps.drains++
			}
		}
	}
	for pool, ps := range c.pstat {
		got, w := *ps, poolStat{}
		if want[pool] != nil {
			w = *want[pool]
		}
		if !maps.Equal(got.shapes, w.shapes) {
			errs = append(errs, "pool "+pool+" node shapes stale")
		}
		if got.capCPUs != w.capCPUs || got.usedCPUs != w.usedCPUs || got.capMem != w.capMem ||
			got.usedMem != w.usedMem || got.drains != w.drains || got.fairDrains != w.fairDrains {
			errs = append(errs, "pool "+pool+" utilization or drain count stale")
		}
		if c.pol.DrainsPerPool > 0 && got.drains > c.pol.DrainsPerPool {
			errs = append(errs, "pool "+pool+" holds more drains than drains_per_pool")
		}
		if got.fairDrains > fairDrainCap(&got) {
			errs = append(errs, "pool "+pool+" holds more fairness drains than its cap")
		}
	}
	for k, p := range c.queues {
		for _, n := range p.drains {
			if n.autoDrain != p {
				errs = append(errs, "placement "+k+" names a drain its node does not hold")
			}
		}
		fair := 0
		for _, n := range p.drains {
			if n.fairDrain {
				fair++
			}
		}
		if fair != p.fairHeld {
			errs = append(errs, "placement "+k+" counts "+strconv.Itoa(p.fairHeld)+" fairness drains, recomputed "+strconv.Itoa(fair))
		}
		wanted := 0
		for _, n := range p.drains {
			if !n.drainUnwanted {
				wanted++
			}
		}
		if fair == 0 && wanted > p.nwait {
			errs = append(errs, "placement "+k+" holds more drains than waiters")
		}
		n := 0
		for _, q := range p.tqList {
			n += q.waiters.Len()
		}
		if n != p.nwait {
			errs = append(errs, "placement "+k+" counts "+strconv.Itoa(p.nwait)+" waiters, recomputed "+strconv.Itoa(n))
		}
	}
	return errs
}

// sameHolds reports whether a and b hold the same per pool.
func sameHolds(a, b []poolHold) bool {
	if len(a) != len(b) {
		return false
	}
	for _, h := range a {
		if cpu, mem := holdIn(b, h.ps); cpu != h.cpu || mem != h.mem {
			return false
		}
	}
	return true
}

// checkShareKeys checks every waiting queue is keyed by its tenant's
// current share (DECISIONS 13).
func (c *Core) checkShareKeys() []string {
	var errs []string
	if len(c.rekeys) > 0 {
		return errs // keys are refreshed at the next pass
	}
	for k, p := range c.queues {
		for _, q := range p.tqList {
			if q.inTree && q.kShare != c.share(q.t, p.ps) {
				errs = append(errs, "placement "+k+" keys tenant "+u(q.t.id)+" by a stale share")
			}
		}
	}
	return errs
}

// checkAdms checks the live admissions are the admissions not ended. The
// ended ones remembered for AdmissionMemory can number thousands on a busy
// fleet; they are walked (each must be uncharged and hold no probe) only
// while there are at most 1024, so a check per step stays cheap.
func (c *Core) checkAdms() []string {
	var errs []string
	for id, a := range c.liveAdms {
		if c.adms[id] != a || a.state == admEnded {
			errs = append(errs, "live admission "+u(id)+" ended or unknown")
		}
	}
	if len(c.adms) > 1024 {
		return errs
	}
	live := 0
	for _, a := range c.adms {
		switch {
		case a.state != admEnded:
			live++
		case a.charged || a.ticket != nil && a.ticket.probe:
			errs = append(errs, "ended admission "+u(a.id)+" still charged or probing")
		}
	}
	if live != len(c.liveAdms) {
		errs = append(errs, "live admissions "+strconv.Itoa(len(c.liveAdms))+", recomputed "+strconv.Itoa(live))
	}
	slices.Sort(errs)
	return errs
}

// maxViolations bounds the violations a Core keeps: the first ones say
// what went wrong, and a Core in a long-running hub must not grow without
// bound if a bug makes it violate on every step. The rest are counted.
const maxViolations = 64

// violate records a rule the Core broke while deciding, for
// CheckInvariants to report.
func (c *Core) violate(s string) {
	if len(c.violations) >= maxViolations {
		c.violationsDropped++
		return
	}
	c.violations = append(c.violations, s)
}
