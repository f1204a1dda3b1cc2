package replay

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/hub/wtrace"
)

// Candidate turns a capacity policy file's policy (`vk-hub capacity-policy
// set`'s) into a candidate for a trace whose policy in force is cur: its
// tenants by name onto the trace's tenant IDs, its weights, caps,
// headroom and knobs as the hub converts them. What a trace cannot follow
// comes back as warnings: tenants the trace does not know (no runner of
// theirs was recorded), tenants the candidate drops (their runners keep
// their tenant, at weight 1 and no cap), and runner ownership (relays,
// runners, production_runners), which stays as recorded.
func Candidate(cur *wtrace.Policy, p admin.Policy) (*wtrace.Policy, []string) {
	out := &wtrace.Policy{Production: slices.Clone(cur.Production), BusySecs: p.BusySecs, ProbeLimit: p.ProbeLimit,
		BackoffInitialSecs: p.BackoffInitialSecs, BackoffMaxSecs: p.BackoffMaxSecs, ProductionProbeBurst: p.ProductionProbeBurst,
		LeaseSecs: p.LeaseSecs, PackAboveUtilization: p.PackAboveUtilization, DrainsPerPool: p.DrainsPerPool,
		WideFraction: p.WideFraction, DrainMaxHoldSecs: p.DrainMaxHoldSecs, FairDrainMaxWaitSecs: p.FairDrainMaxWaitSecs}
	switch { // as the hub's policyToSched: 0 is the spec's 1, negative no bound
	case p.ClaimRenewals > 0:
		out.ClaimRenewals = p.ClaimRenewals
	case p.ClaimRenewals == 0:
		out.ClaimRenewals = 1
	}
	var warn []string
	names := make([]string, 0, len(p.Tenants))
	for n := range p.Tenants {
		names = append(names, n)
	}
	slices.Sort(names)
	listed := map[uint64]bool{}
	for _, n := range names {
		t := p.Tenants[n]
		ct, ok := cur.TenantByName(n)
		if !ok {
			warn = append(warn, fmt.Sprintf("tenant %q is not in the trace's policy: no recorded runner is its, the replay ignores it", n))
			continue
		}
		listed[ct.ID] = true
		out.Tenants = append(out.Tenants, wtrace.Tenant{ID: ct.ID, Name: n, Weight: t.Weight, Cap: t.Cap})
		if len(t.Relays) > 0 || len(t.Runners) > 0 || len(t.ProductionRunners) > 0 {
			warn = append(warn, fmt.Sprintf("tenant %q: relays, runners and production_runners are taken as recorded, not from the file", n))
		}
	}
	for _, t := range cur.Tenants {
		if !listed[t.ID] && t.Name != "" {
			warn = append(warn, fmt.Sprintf("tenant %q is not in the candidate: its runners keep it, at weight 1 and no cap", t.Name))
			out.Tenants = append(out.Tenants, wtrace.Tenant{ID: t.ID, Name: t.Name})
		}
	}
	slices.SortFunc(out.Tenants, func(a, b wtrace.Tenant) int { return cmp.Compare(a.ID, b.ID) })
	for _, h := range p.Headroom {
		out.Headroom = append(out.Headroom, wtrace.Headroom{Slots: h.Slots, Pool: h.Pool, Labels: h.Labels,
			CPUs: int64(h.CPUs), Mem: h.Mem.Bytes(), Disk: h.Disk.Bytes()})
	}
	return out, warn
}
