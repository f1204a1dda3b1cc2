package hub

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

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
func LoadPolicyFile(path string) (PolicyConfig, error) {
	var f struct {
		Version              int                     `toml:"version"`
		BusySecs             int                     `toml:"busy_secs"`
		ProbeLimit           int                     `toml:"probe_limit"`
		BackoffInitialSecs   int                     `toml:"backoff_initial_secs"`
		BackoffMaxSecs       int                     `toml:"backoff_max_secs"`
		ProductionProbeBurst int                     `toml:"production_probe_burst"`
		LeaseSecs            int                     `toml:"lease_secs"`
		DefaultTenant        string                  `toml:"default_tenant"`
		Headroom             []HeadroomConfig        `toml:"headroom"`
		Tenants              map[string]TenantConfig `toml:"tenants"`
	}
	if err := conffile.Load(path, &f, ConfigVersion); err != nil {
		return PolicyConfig{}, err
	}
	p := PolicyConfig{BusySecs: f.BusySecs, ProbeLimit: f.ProbeLimit, BackoffInitialSecs: f.BackoffInitialSecs,
		BackoffMaxSecs: f.BackoffMaxSecs, ProductionProbeBurst: f.ProductionProbeBurst, LeaseSecs: f.LeaseSecs,
		DefaultTenant: f.DefaultTenant, Headroom: f.Headroom, Tenants: f.Tenants}
	if err := p.Validate(); err != nil {
		return PolicyConfig{}, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// Validate lists every problem, each wrapping [ErrConfig].
func (p *PolicyConfig) Validate() error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: capacity_policy: "+format, append([]any{ErrConfig}, a...)...))
	}
	if len(p.Headroom) > sched.MaxHeadroom {
		bad("%d headroom entries, at most %d", len(p.Headroom), sched.MaxHeadroom)
	}
	for i, h := range p.Headroom {
		if h.Pool == "" || h.Slots < 0 || h.Mem <= 0 || h.Disk <= 0 || h.CPUs <= 0 {
			bad("headroom[%d]: needs pool, mem, cpus, disk > 0 and slots >= 0", i)
		}
	}
	for name, t := range p.Tenants {
		if name == "" {
			bad("tenant with an empty name")
		}
		if t.Weight < 0 || t.Cap < 0 {
			bad("tenant %q: negative weight or cap", name)
		}
		for _, r := range append(append([]string{}, t.Runners...), t.ProductionRunners...) {
			if _, _, ok := splitRunner(r); !ok {
				bad("tenant %q: runner %q is not <relay>/<runner>", name, r)
			}
		}
		for proj, pc := range t.Projects {
			if n, err := strconv.ParseInt(proj, 10, 64); err != nil || n <= 0 {
				bad("tenant %q: project key %q is not a GitLab project ID", name, proj)
			}
			if len(pc.PlacementRules) > sched.MaxPlacementRules {
				bad("tenant %q project %s: %d placement rules, at most %d", name, proj, len(pc.PlacementRules), sched.MaxPlacementRules)
			}
			for i, r := range pc.PlacementRules {
				if len(r.Nodes) > sched.MaxRuleNodesOrPools || len(r.Pools) > sched.MaxRuleNodesOrPools {
					bad("tenant %q project %s rule %d: more than %d nodes or pools", name, proj, i, sched.MaxRuleNodesOrPools)
				}
			}
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
	out := sched.Policy{ProductionRunners: map[sched.RunnerID]bool{}}
	if p == nil {
		return out
	}
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
