package sched

import "math"

// Fair share by resources (DECISIONS 13, ARB-09, BS-28).
//
// What a tenant holds is counted in resources, per pool: the vCPUs and
// memory of the envelopes of its tickets offered, granted or claimed, of
// its admissions waiting for their job and of its jobs until they finish
// (unadmitted jobs a relay reports count with their runner's envelope).
// A tenant's weighted dominant share in a pool is the larger of its held
// vCPUs and memory as fractions of the pool's capacity, divided by its
// weight (dominant resource fairness). Every waiting request's place in
// line is keyed by that number, and room that frees on a node goes to the
// request first in (class, share, age) across every placement that has
// room on it (see Core.schedule), not queue by queue.
//
// Shares are fractions of a pool reference capacity, not of its live
// capacity: ordering only depends on the ratio of vCPUs to memory, so the
// reference changes (and every waiting queue of the pool is re-keyed) only
// when the pool's vCPU-to-memory ratio drifts by more than 1 %, never on
// an ordinary node report.

// poolHold is what a tenant or a runner holds in one pool.
type poolHold struct {
	ps       *poolStat
	cpu, mem int64
	n        int // charged requests counted, so an empty entry can go
}

// holdsAdd adds k envelopes env (k < 0 removes) to the entry of ps in hs.
func holdsAdd(hs []poolHold, ps *poolStat, env Resources, k int64) []poolHold {
	return holdsAddRaw(hs, poolHold{ps: ps, cpu: env.CPUs, mem: env.MemBytes, n: 1}, k)
}

// holdIn returns what hs holds in ps.
func holdIn(hs []poolHold, ps *poolStat) (cpu, mem int64) {
	for _, h := range hs {
		if h.ps == ps {
			return h.cpu, h.mem
		}
	}
	return 0, 0
}

// hold adds sign envelopes of placement p (negative: removes) to what
// runner r and its tenant hold for fair share. The caller re-keys the
// tenant's queues (charge or tenantChanged).
func (c *Core) hold(r *runner, p *placementQueue, sign int64) {
	if p == nil || sign == 0 {
		return
	}
	env := p.pl.Envelope
	r.holds = holdsAdd(r.holds, p.ps, env, sign)
	r.tenant.holds = holdsAdd(r.tenant.holds, p.ps, env, sign)
}

// moveHolds moves what runner r holds from tenant from to tenant to.
func moveHolds(r *runner, from, to *tenant) {
	for _, h := range r.holds {
		if from != nil {
			from.holds = holdsAddRaw(from.holds, h, -1)
		}
		if to != nil {
			to.holds = holdsAddRaw(to.holds, h, +1)
		}
	}
}

// holdsAddRaw adds sign × h to the entry of h's pool in hs, dropping an
// entry that holds nothing.
func holdsAddRaw(hs []poolHold, h poolHold, sign int64) []poolHold {
	for i := range hs {
		if x := &hs[i]; x.ps == h.ps {
			x.cpu += sign * h.cpu
			x.mem += sign * h.mem
			x.n += int(sign) * h.n
			if x.n == 0 && x.cpu == 0 && x.mem == 0 {
				hs[i] = hs[len(hs)-1]
				hs = hs[:len(hs)-1]
			}
			return hs
		}
	}
	return append(hs, poolHold{ps: h.ps, cpu: sign * h.cpu, mem: sign * h.mem, n: int(sign) * h.n})
}

// Default reference capacity of a pool without serving nodes: the ratio
// of a common CI node, 4 GiB per vCPU.
const (
	defRefCPU = 1
	defRefMem = 4 << 30
)

// share returns tenant t's weighted dominant share in pool ps.
func (c *Core) share(t *tenant, ps *poolStat) float64 {
	cpu, mem := holdIn(t.holds, ps)
	return c.shareOf(t, ps, cpu, mem)
}

// shareOf is tenant t's weighted dominant share in pool ps were it to
// hold cpu vCPUs and mem bytes there.
func (c *Core) shareOf(t *tenant, ps *poolStat, cpu, mem int64) float64 {
	rc, rm := ps.refCPU, ps.refMem
	if rc <= 0 || rm <= 0 {
		rc, rm = defRefCPU, defRefMem
	}
	s := max(float64(cpu)/rc, float64(mem)/rm)
	return s / float64(c.pol.tenantWeight(t.id))
}

// poolCapChanged notes a change of a pool's capacity: when its ratio of
// memory to vCPUs moved more than 1 % from the reference, the reference
// becomes the live capacity and the pool's queues are re-keyed before the
// next arbitration pass.
func (c *Core) poolCapChanged(ps *poolStat) {
	if ps.capCPUs == ps.seenCPU && ps.capMem == ps.seenMem {
		return
	}
	ps.seenCPU, ps.seenMem = ps.capCPUs, ps.capMem
	if ps.capCPUs <= 0 || ps.capMem <= 0 {
		return // keep the last reference while the pool has no capacity
	}
	ratio := float64(ps.capMem) / float64(ps.capCPUs)
	if ps.refCPU > 0 && math.Abs(ratio/(ps.refMem/ps.refCPU)-1) <= 0.01 {
		return
	}
	ps.refCPU, ps.refMem = float64(ps.capCPUs), float64(ps.capMem)
	if !ps.rekey {
		ps.rekey = true
		c.rekeys = append(c.rekeys, ps)
	}
}

// rekeyPools re-keys the waiting queues of pools whose reference changed.
func (c *Core) rekeyPools() {
	for len(c.rekeys) > 0 {
		ps := c.rekeys[0]
		c.rekeys = c.rekeys[1:]
		ps.rekey = false
		for _, p := range c.poolQueues[ps.name] {
			for _, q := range p.tqList {
				c.tqSync(q)
			}
		}
	}
	c.rekeys = nil
}
