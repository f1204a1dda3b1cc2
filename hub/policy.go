package hub

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/internal/conffile"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/sched"
)

// PolicyConfig is the hub's capacity policy as an operator writes it
// (DECISIONS 11, OPS-03), inline as [capacity_policy] in hub.toml or in
// its own file (with `version = 1`), and as the admin socket carries it
// (`vk-hub capacity-policy get|set`): one type, [admin.Policy], whose
// fields and defaults are documented there and in docs/capacity-policy.md.
//
// Tenants own runners: a tenant lists relays (every runner of the relay)
// and single runners ("<relay>/<runner>"); a runner no tenant lists
// belongs to DefaultTenant (weight 1, no cap). A runner listed twice
// belongs to the first tenant in name order that lists it by runner, else
// by relay.
type PolicyConfig = admin.Policy

// LoadPolicyFile reads a capacity policy file strictly (`version = 1`).
// An empty projects table of a tenant is an error (see
// [ErrEmptyProjects]).
func LoadPolicyFile(path string) (PolicyConfig, error) {
	var f policyFile
	if err := conffile.Load(path, &f, ConfigVersion); err != nil {
		return PolicyConfig{}, err
	}
	if err := checkEmptyProjects(path, nil); err != nil {
		return PolicyConfig{}, err
	}
	return f.Policy, nil
}

// policyFile is a capacity policy file: the policy at the top level with
// its `version`.
type policyFile struct {
	Version int `toml:"version"`
	admin.Policy
}

// Validate is the hub's check (conffile calls it after decoding), in
// place of the embedded admin.Policy's: its errors also wrap ErrConfig.
func (f *policyFile) Validate() error { return validatePolicy(&f.Policy) }

// ErrEmptyProjects is wrapped (with [ErrConfig]) when a tenant's projects
// table is present but empty ([admin.ErrEmptyProjects]: every reader of
// a policy refuses it).
var ErrEmptyProjects = admin.ErrEmptyProjects

// checkEmptyProjects reads the TOML file at path and reports every tenant
// whose projects table is defined but empty; prefix is the key path of
// the policy table in the file (nil: the top level).
func checkEmptyProjects(path string, prefix []string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := admin.CheckWritten(path, data, prefix); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

// validatePolicy lists every problem, each wrapping [ErrConfig] and
// admin.ErrPolicy: the rules of [admin.Policy.Validate], one set of rules
// for the hub.toml table, the policy file and the admin socket.
func validatePolicy(p *PolicyConfig) error {
	var errs []error
	if err := p.Validate(); err != nil {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				errs = append(errs, fmt.Errorf("%w: capacity_policy: %w", ErrConfig, e))
			}
		} else {
			errs = append(errs, fmt.Errorf("%w: capacity_policy: %w", ErrConfig, err))
		}
	}
	return errors.Join(errs...)
}

// policyDefaultTenant returns the name of the tenant of unlisted runners.
func policyDefaultTenant(p *PolicyConfig) string {
	if p == nil || p.DefaultTenant == "" {
		return DefaultTenant
	}
	return p.DefaultTenant
}

// policyTenantOf returns the tenant name of a relay's runner and whether
// the policy marks it production.
func policyTenantOf(p *PolicyConfig, relay, runner string) (tenant string, production bool) {
	if p == nil {
		return DefaultTenant, false
	}
	key := relay + "/" + runner
	names := sortedKeys(p.Tenants)
	for _, n := range names {
		if t := p.Tenants[n]; slices.Contains(t.ProductionRunners, key) || slices.Contains(t.Runners, key) {
			return n, slices.Contains(t.ProductionRunners, key)
		}
	}
	for _, n := range names {
		if slices.Contains(p.Tenants[n].Relays, relay) {
			return n, false
		}
	}
	return policyDefaultTenant(p), false
}

// policyToSched converts the policy for the core, minting IDs through ids.
// Production runners are those already known to ids (runners are added
// to the policy as their relays report them, see driver.refreshPolicy).
func policyToSched(p *PolicyConfig, ids *idTable) sched.Policy {
	out := sched.Policy{ProductionRunners: map[sched.RunnerID]bool{}, ClaimRenewals: 1}
	if p == nil {
		return out
	}
	switch {
	case p.ClaimRenewals > 0:
		out.ClaimRenewals = p.ClaimRenewals
	case p.ClaimRenewals < 0:
		out.ClaimRenewals = 0 // no bound
	}
	out.PackAboveUtilization, out.DrainsPerPool, out.WideFraction = p.PackAboveUtilization, p.DrainsPerPool, p.WideFraction
	out.DrainMaxHold = time.Duration(p.DrainMaxHoldSecs) * time.Second
	out.FairDrainMaxWait = time.Duration(p.FairDrainMaxWaitSecs) * time.Second // -1 s: off
	out.BusySecs, out.ProbeLimit = p.BusySecs, p.ProbeLimit
	out.BackoffInitialSecs, out.BackoffMaxSecs = p.BackoffInitialSecs, p.BackoffMaxSecs
	out.ProductionProbeBurst, out.LeaseSecs = p.ProductionProbeBurst, p.LeaseSecs
	for _, h := range p.Headroom {
		out.Headroom = append(out.Headroom, sched.HeadroomEntry{Slots: h.Slots, Placement: placementToSched(client.Placement{
			Pool: h.Pool, Labels: h.Labels, Envelope: client.Envelope{Mem: h.Mem, CPUs: h.CPUs, Disk: h.Disk}})})
	}
	out.Tenants = map[sched.TenantID]sched.TenantPolicy{}
	for _, name := range sortedKeys(p.Tenants) {
		t := p.Tenants[name]
		tp := sched.TenantPolicy{Weight: t.Weight, Cap: t.Cap}
		if len(t.Projects) > 0 {
			tp.Projects = map[string]sched.ProjectPolicy{}
			for proj, pc := range t.Projects {
				pp := sched.ProjectPolicy{Production: pc.Production}
				for _, r := range pc.PlacementRules {
					rule := sched.PlacementRule{Pools: r.Pools, Branches: r.Branches}
					for _, n := range r.Nodes {
						rule.Nodes = append(rule.Nodes, ids.node(n))
					}
					pp.Rules = append(pp.Rules, rule)
				}
				tp.Projects[proj] = pp
			}
		}
		out.Tenants[ids.tenant(name)] = tp
	}
	for key, id := range ids.runners.ids {
		if _, prod := policyTenantOf(p, key.relay, key.name); prod {
			out.ProductionRunners[id] = true
		}
	}
	return out
}
