package hub

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"

	"github.com/vk-ci/vk/internal/conffile"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/sched"
)

// PolicyConfig is the hub's capacity policy as an operator writes it
// (DECISIONS 11, OPS-03), inline as [capacity_policy] in hub.toml or in
// its own file (with `version = 1`). docs/hub.md has a worked example.
//
// Tenants own runners: a tenant lists relays (every runner of the relay)
// and single runners ("<relay>/<runner>"); a runner no tenant lists
// belongs to DefaultTenant (weight 1, no cap). A runner listed twice
// belongs to the first tenant in name order that lists it by runner, else
// by relay.
type PolicyConfig struct {
	// BusySecs, ProbeLimit, BackoffInitialSecs, BackoffMaxSecs and
	// ProductionProbeBurst are the ARB-07/18..21 fields; 0 means the
	// spec's default (60, 1, 1, 60, 1).
	BusySecs             int `toml:"busy_secs"`
	ProbeLimit           int `toml:"probe_limit"`
	BackoffInitialSecs   int `toml:"backoff_initial_secs"`
	BackoffMaxSecs       int `toml:"backoff_max_secs"`
	ProductionProbeBurst int `toml:"production_probe_burst"`
	// LeaseSecs is the lease offered to nodes; 0 means 90 (ARB-28).
	LeaseSecs int `toml:"lease_secs"`
	// DefaultTenant names the tenant of runners no tenant lists; empty
	// means "default".
	DefaultTenant string `toml:"default_tenant"`
	// Headroom entries reserve room for production work (ARB-14..17); at
	// most 64.
	Headroom []HeadroomConfig `toml:"headroom"`
	// Tenants by name.
	Tenants map[string]TenantConfig `toml:"tenants"`

	// ClaimRenewals bounds the renewals an admission may ask before its
	// outcome (ARB-32); a renewal past it answers 409 and the reservation
	// lives out its lease. 0 means the spec's 1; -1 means no bound.
	ClaimRenewals int `toml:"claim_renewals"`
	// PackAboveUtilization (BS-21): at or above this utilization of a
	// pool, work goes to the most loaded node with room first. 0 (the
	// default) never packs; 0.7 is recommended for fleets with wide jobs.
	PackAboveUtilization float64 `toml:"pack_above_utilization"`
	// DrainsPerPool bounds the automatic drains (BS-22) a pool holds for
	// wide work that fits nowhere. 0 (the default) places none; 1 is
	// recommended for fleets with wide jobs.
	DrainsPerPool int `toml:"drains_per_pool"`
	// WideFraction: an envelope taking at least this fraction of a node's
	// vCPUs or memory is wide there (BS-20); 0 means 0.5.
	WideFraction float64 `toml:"wide_fraction"`
	// DrainMaxHoldSecs: an automatic drain held this long is chosen
	// again from fresh predictions; 0 means 900 (15 minutes).
	DrainMaxHoldSecs int `toml:"drain_max_hold_secs"`
}

// HeadroomConfig is one headroom entry: Slots envelopes of a placement.
type HeadroomConfig struct {
	Pool   string      `toml:"pool"`
	Labels []string    `toml:"labels"`
	Mem    client.Size `toml:"mem"`
	CPUs   int         `toml:"cpus"`
	Disk   client.Size `toml:"disk"`
	Slots  int         `toml:"slots"`
}

// TenantConfig is one tenant.
type TenantConfig struct {
	// Weight scales its fair share (ARB-09); 0 means 1.
	Weight int `toml:"weight"`
	// Cap bounds what it holds (ARB-11); 0 means no cap.
	Cap int `toml:"cap"`
	// Relays lists relay IDs all of whose runners belong to the tenant.
	Relays []string `toml:"relays"`
	// Runners lists single runners as "<relay>/<runner name>".
	Runners []string `toml:"runners"`
	// ProductionRunners marks runners ("<relay>/<runner>") whose requests
	// are production work; they belong to the tenant too.
	ProductionRunners []string `toml:"production_runners"`
	// Projects lists the tenant's projects by GitLab project ID (decimal
	// string). Absent or empty means every project is allowed (TOML cannot
	// tell an empty table from none); with at least one entry, a job of an
	// unlisted project is held (ARB-41).
	Projects map[string]ProjectConfig `toml:"projects"`
}

// ProjectConfig is one project entry of a tenant.
type ProjectConfig struct {
	// Production marks the project's jobs as production work.
	Production bool `toml:"production"`
	// PlacementRules restrict where its jobs go (PLACE-19..24).
	PlacementRules []RuleConfig `toml:"placement_rules"`
}

// RuleConfig is one placement rule: node IDs, pools, branch globs.
type RuleConfig struct {
	Nodes    []string `toml:"nodes"`
	Pools    []string `toml:"pools"`
	Branches []string `toml:"branches"`
}

// LoadPolicyFile reads a capacity policy file strictly (`version = 1`).
// An empty projects table of a tenant is an error (see
// [ErrEmptyProjects]).
func LoadPolicyFile(path string) (PolicyConfig, error) {
	var f struct {
		Version int `toml:"version"`
		PolicyConfig
	}
	if err := conffile.Load(path, &f, ConfigVersion); err != nil {
		return PolicyConfig{}, err
	}
	p := f.PolicyConfig
	if err := checkEmptyProjects(path, nil); err != nil {
		return PolicyConfig{}, err
	}
	if err := p.Validate(); err != nil {
		return PolicyConfig{}, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// ErrEmptyProjects is wrapped (with [ErrConfig]) when a tenant's projects
// table is present but empty. TOML decoding cannot tell an empty
// `[tenants.X.projects]` from none, and "absent" means every project is
// allowed (ARB-41), so the hub refuses the ambiguous form: remove the
// table to allow every project, or list at least one project.
var ErrEmptyProjects = errors.New("hub: empty projects table")

// checkEmptyProjects reads the TOML file at path generically and reports
// every tenant whose projects table is defined but empty; prefix is the
// key path of the policy table in the file (nil: the top level).
func checkEmptyProjects(path string, prefix []string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return emptyProjects(path, data, prefix)
}

func emptyProjects(name string, data []byte, prefix []string) error {
	var tree map[string]any
	if err := toml.Unmarshal(data, &tree); err != nil {
		return nil // the strict decode reports syntax errors
	}
	for _, k := range prefix {
		sub, ok := tree[k].(map[string]any)
		if !ok {
			return nil
		}
		tree = sub
	}
	tenants, _ := tree["tenants"].(map[string]any)
	var errs []error
	for _, name2 := range sortedKeys(tenants) {
		t, _ := tenants[name2].(map[string]any)
		if pr, ok := t["projects"].(map[string]any); ok && len(pr) == 0 {
			errs = append(errs, fmt.Errorf("%w: %w: %s: tenant %q: its projects table is empty; remove it to allow every project, or list at least one",
				ErrConfig, ErrEmptyProjects, name, name2))
		}
	}
	return errors.Join(errs...)
}

// Validate lists every problem, each wrapping [ErrConfig]: the rules of
// [admin.Policy.Validate], one set of rules for the hub.toml table, the
// policy file and the admin socket (errors also wrap admin.ErrPolicy).
func (p *PolicyConfig) Validate() error {
	var errs []error
	ap := policyToAdmin(p)
	if err := ap.Validate(); err != nil {
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

func splitRunner(s string) (relay, runner string, ok bool) {
	relay, runner, ok = strings.Cut(s, "/")
	return relay, runner, ok && relay != "" && runner != ""
}

// defaultTenant returns the name of the tenant of unlisted runners.
func (p *PolicyConfig) defaultTenant() string {
	if p == nil || p.DefaultTenant == "" {
		return DefaultTenant
	}
	return p.DefaultTenant
}

// tenantOf returns the tenant name of a relay's runner and whether the
// policy marks it production.
func (p *PolicyConfig) tenantOf(relay, runner string) (tenant string, production bool) {
	if p == nil {
		return DefaultTenant, false
	}
	key := relay + "/" + runner
	names := sortedKeys(p.Tenants)
	for _, n := range names {
		t := p.Tenants[n]
		for _, r := range t.ProductionRunners {
			if r == key {
				return n, true
			}
		}
		for _, r := range t.Runners {
			if r == key {
				return n, false
			}
		}
	}
	for _, n := range names {
		for _, r := range p.Tenants[n].Relays {
			if r == relay {
				return n, false
			}
		}
	}
	return p.defaultTenant(), false
}

// toSched converts the policy for the core, minting IDs through ids.
// Production runners are those already known to ids (runners are added
// to the policy as their relays report them, see driver.refreshPolicy).
func (p *PolicyConfig) toSched(ids *idTable) sched.Policy {
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
	for key, id := range ids.runners {
		if _, prod := p.tenantOf(key.relay, key.name); prod {
			out.ProductionRunners[id] = true
		}
	}
	return out
}
