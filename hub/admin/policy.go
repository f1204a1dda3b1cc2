package admin

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"github.com/vk-ci/vk/internal/conffile"
	"github.com/vk-ci/vk/proto/client"
)

// PolicyVersion is the only `version` a capacity policy file may have.
const PolicyVersion = 1

// Limits of a capacity policy (the seed's numbers).
const (
	// MaxHeadroom bounds the headroom entries.
	MaxHeadroom = 64
	// MaxPlacementRules bounds one project's placement rules.
	MaxPlacementRules = 64
	// MaxRuleNodesOrPools bounds the nodes, and separately the pools, of
	// one placement rule.
	MaxRuleNodesOrPools = 256
)

// ErrPolicy is wrapped by every capacity policy validation error.
var ErrPolicy = errors.New("admin: invalid capacity policy")

// Policy is the hub's capacity policy as an operator writes it (OPS-03,
// DECISIONS 11): the file `vk-hub capacity-policy set FILE` reads and
// `capacity-policy get` prints, with `version = 1` at the top. Its keys
// are those of hub.toml's [capacity_policy] table, so a policy moves
// between the two unchanged; docs/capacity-policy.md has a worked
// example. Zero values mean the spec's defaults, noted per field.
//
// The hub converts it to its own form in its [Backend] (the conversion
// hook): this package does not import the hub.
type Policy struct {
	// BusySecs: a request of a runner that took no job within this many
	// seconds is a probe (ARB-18); 0 means 60.
	BusySecs int `toml:"busy_secs,omitempty"`
	// ProbeLimit bounds the probes outstanding fleet-wide (ARB-19); 0
	// means 1.
	ProbeLimit int `toml:"probe_limit,omitempty"`
	// BackoffInitialSecs and BackoffMaxSecs bound a runner's backoff after
	// empty answers (ARB-19..21); 0 means 1 and 60.
	BackoffInitialSecs int `toml:"backoff_initial_secs,omitempty"`
	BackoffMaxSecs     int `toml:"backoff_max_secs,omitempty"`
	// ProductionProbeBurst is how many production probes may go ahead of
	// normal work before normal work gets a turn (ARB-07); 0 means 1.
	ProductionProbeBurst int `toml:"production_probe_burst,omitempty"`
	// LeaseSecs is the lease offered to nodes; 0 means 90 (ARB-28).
	LeaseSecs int `toml:"lease_secs,omitempty"`
	// DefaultTenant names the tenant of runners no tenant lists; empty
	// means "default" (weight 1, no cap).
	DefaultTenant string `toml:"default_tenant,omitempty"`
	// Headroom entries reserve room for production work; at most
	// [MaxHeadroom].
	Headroom []Headroom `toml:"headroom,omitempty"`
	// Tenants by name.
	Tenants map[string]Tenant `toml:"tenants,omitempty"`

	// ClaimRenewals bounds the renewals an admission may ask before its
	// outcome (ARB-32); past it a renew answers 409 and the reservation
	// lives out its lease. 0 means the spec's 1; -1 means no bound.
	ClaimRenewals int `toml:"claim_renewals,omitempty"`
	// PackAboveUtilization (BS-21): at or above this utilization of a
	// pool (and always while wide work of the pool waits), work goes to
	// the most loaded node with room first; in [0, 1]. 0 means sched's
	// default, 0.7.
	PackAboveUtilization float64 `toml:"pack_above_utilization,omitempty"`
	// DrainsPerPool bounds the automatic drains (BS-22) a pool holds for
	// wide work that fits nowhere. 0 means sched's default: a quarter of
	// the pool's ready nodes, at least one.
	DrainsPerPool int `toml:"drains_per_pool,omitempty"`
	// WideFraction: an envelope taking at least this fraction of a node's
	// vCPUs or memory is wide there (BS-20); in [0, 1], 0 means 0.5.
	WideFraction float64 `toml:"wide_fraction,omitempty"`
	// DrainMaxHoldSecs: an automatic drain held this long is chosen again
	// from fresh predictions; 0 means 900.
	DrainMaxHoldSecs int `toml:"drain_max_hold_secs,omitempty"`
	// FairDrainMaxWaitSecs bounds fairness drains: a node is held for a
	// starved tenant under its share only when it is predicted to fit
	// that tenant's work within this long, and never held longer; 0
	// means 300, -1 places no fairness drains.
	FairDrainMaxWaitSecs int `toml:"fair_drain_max_wait_secs,omitempty"`
}

// Headroom is one headroom entry: Slots envelopes of a placement kept
// free of normal work.
type Headroom struct {
	// Pool is the placement's pool. Required.
	Pool string `toml:"pool"`
	// Labels the nodes must carry; empty means any.
	Labels []string `toml:"labels,omitempty"`
	// Mem, CPUs and Disk are the envelope; each > 0.
	Mem  client.Size `toml:"mem"`
	CPUs int         `toml:"cpus"`
	Disk client.Size `toml:"disk"`
	// Slots is how many envelopes to keep; >= 1.
	Slots int `toml:"slots"`
}

// Tenant is one tenant: whose runners, how much weight, what cap.
type Tenant struct {
	// Weight scales its fair share (ARB-09); 0 means 1, otherwise >= 1.
	Weight int `toml:"weight,omitempty"`
	// Cap bounds how much it holds at once (reservations and jobs,
	// ARB-11); 0 means no cap.
	Cap int `toml:"cap,omitempty"`
	// Relays lists relay IDs all of whose runners belong to the tenant.
	Relays []string `toml:"relays,omitempty"`
	// Runners lists single runners, "<relay ID>/<runner name>".
	Runners []string `toml:"runners,omitempty"`
	// ProductionRunners lists runners ("<relay>/<runner>") whose work is
	// production; they belong to the tenant too.
	ProductionRunners []string `toml:"production_runners,omitempty"`
	// Projects by GitLab project ID (decimal). Absent or empty means every
	// project is allowed; with at least one entry, a job of an unlisted
	// project is held (ARB-41). (An empty [tenants.X.projects] table reads
	// as absent: TOML decoding cannot tell them apart, so neither may
	// mean "no project".)
	Projects map[string]Project `toml:"projects,omitempty"`
}

// Project is one project of a tenant.
type Project struct {
	// Production marks its jobs as production work.
	Production bool `toml:"production,omitempty"`
	// PlacementRules restrict where its jobs run (PLACE-19..24); at most
	// [MaxPlacementRules]. Empty means anywhere its runner reaches.
	PlacementRules []Rule `toml:"placement_rules,omitempty"`
}

// Rule is one placement rule (PLACE-19..22): it allows a node that is
// one of Nodes (when Nodes is set) and in one of Pools (when Pools is
// set); at least one of the two is set, each at most
// [MaxRuleNodesOrPools] long. It applies to every job of the project, or
// with Branches (path.Match globs) only to jobs whose ref matches one. A
// job goes only to nodes every applicable rule allows.
type Rule struct {
	Nodes    []string `toml:"nodes,omitempty"`
	Pools    []string `toml:"pools,omitempty"`
	Branches []string `toml:"branches,omitempty"`
}

// policyFile is a policy file: the version key and the policy.
type policyFile struct {
	Version int `toml:"version"`
	Policy
}

// Validate lists every problem of p, each wrapping [ErrPolicy], joined;
// nil when p is usable. It is pure.
func (p *Policy) Validate() error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrPolicy}, a...)...))
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"busy_secs", p.BusySecs}, {"probe_limit", p.ProbeLimit}, {"backoff_initial_secs", p.BackoffInitialSecs},
		{"backoff_max_secs", p.BackoffMaxSecs}, {"production_probe_burst", p.ProductionProbeBurst}, {"lease_secs", p.LeaseSecs}} {
		if f.v < 0 {
			bad("%s is %d; want >= 0 (0: the default)", f.name, f.v)
		}
	}
	if p.BackoffInitialSecs > 0 && p.BackoffMaxSecs > 0 && p.BackoffInitialSecs > p.BackoffMaxSecs {
		bad("backoff_initial_secs %d is above backoff_max_secs %d", p.BackoffInitialSecs, p.BackoffMaxSecs)
	}
	if p.LeaseSecs > 600 {
		bad("lease_secs %d is above 600, the most a node grants", p.LeaseSecs)
	}
	if p.ClaimRenewals < -1 {
		bad("claim_renewals is %d; want >= 0 (0: 1, ARB-32) or -1 (no bound)", p.ClaimRenewals)
	}
	if p.PackAboveUtilization < 0 || p.PackAboveUtilization > 1 {
		bad("pack_above_utilization %v is not in [0, 1]", p.PackAboveUtilization)
	}
	if p.WideFraction < 0 || p.WideFraction > 1 {
		bad("wide_fraction %v is not in [0, 1]", p.WideFraction)
	}
	if p.DrainsPerPool < 0 || p.DrainMaxHoldSecs < 0 {
		bad("drains_per_pool and drain_max_hold_secs must be >= 0")
	}
	if p.FairDrainMaxWaitSecs < -1 {
		bad("fair_drain_max_wait_secs is %d; want >= 0 (0: 300) or -1 (no fairness drains)", p.FairDrainMaxWaitSecs)
	}
	if len(p.Headroom) > MaxHeadroom {
		bad("%d headroom entries; at most %d", len(p.Headroom), MaxHeadroom)
	}
	for i, h := range p.Headroom {
		if h.Pool == "" {
			bad("headroom[%d]: pool missing", i)
		}
		if h.Mem <= 0 || h.CPUs <= 0 || h.Disk <= 0 {
			bad("headroom[%d]: mem, cpus and disk must be > 0", i)
		}
		if h.Slots < 1 {
			bad("headroom[%d]: slots is %d; want >= 1", i, h.Slots)
		}
	}
	for _, name := range sortedKeys(p.Tenants) {
		t := p.Tenants[name]
		if name == "" {
			bad("a tenant has an empty name")
		}
		if t.Weight < 0 {
			bad("tenant %q: weight %d; want >= 1 (absent: 1)", name, t.Weight)
		}
		if t.Cap < 0 {
			bad("tenant %q: cap %d; want >= 1 (absent: no cap)", name, t.Cap)
		}
		for _, r := range t.Relays {
			if r == "" || strings.Contains(r, "/") {
				bad("tenant %q: relay %q is not a relay ID", name, r)
			}
		}
		for _, r := range slices.Concat(t.Runners, t.ProductionRunners) {
			relay, runner, ok := strings.Cut(r, "/")
			if !ok || relay == "" || runner == "" {
				bad("tenant %q: runner %q is not <relay>/<runner>", name, r)
			}
		}
		for _, proj := range sortedKeys(t.Projects) {
			pc := t.Projects[proj]
			if n, err := strconv.ParseInt(proj, 10, 64); err != nil || n <= 0 || strconv.FormatInt(n, 10) != proj {
				bad("tenant %q: project key %q is not a GitLab project ID", name, proj)
			}
			if len(pc.PlacementRules) > MaxPlacementRules {
				bad("tenant %q project %s: %d placement rules; at most %d", name, proj, len(pc.PlacementRules), MaxPlacementRules)
			}
			for i, r := range pc.PlacementRules {
				if len(r.Nodes) > MaxRuleNodesOrPools || len(r.Pools) > MaxRuleNodesOrPools {
					bad("tenant %q project %s rule %d: %d nodes and %d pools; at most %d each", name, proj, i,
						len(r.Nodes), len(r.Pools), MaxRuleNodesOrPools)
				}
				if len(r.Nodes) == 0 && len(r.Pools) == 0 {
					bad("tenant %q project %s rule %d: names no nodes and no pools", name, proj, i)
				}
				for _, b := range r.Branches {
					if _, err := path.Match(b, ""); err != nil || b == "" {
						bad("tenant %q project %s rule %d: branch glob %q is malformed", name, proj, i, b)
					}
				}
			}
		}
	}
	checkSharedProjects(p, bad)
	return errors.Join(errs...)
}

// checkSharedProjects reports a project whose placement rules differ
// between tenants listing it (PLACE-23: identical, order aside).
func checkSharedProjects(p *Policy, bad func(string, ...any)) {
	first := map[string]string{}   // project → first tenant listing it
	canon := map[string][]string{} // project → its rules, canonical
	for _, name := range sortedKeys(p.Tenants) {
		for _, proj := range sortedKeys(p.Tenants[name].Projects) {
			c := canonicalRules(p.Tenants[name].Projects[proj].PlacementRules)
			if prev, ok := canon[proj]; !ok {
				first[proj], canon[proj] = name, c
			} else if !slices.Equal(prev, c) {
				bad("project %s: placement rules differ between tenants %q and %q; they must be identical", proj, first[proj], name)
			}
		}
	}
}

func canonicalRules(rs []Rule) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, strings.Join(slices.Sorted(slices.Values(r.Nodes)), ",")+"|"+
			strings.Join(slices.Sorted(slices.Values(r.Pools)), ",")+"|"+
			strings.Join(slices.Sorted(slices.Values(r.Branches)), ","))
	}
	slices.Sort(out)
	return out
}

// DecodePolicy reads a policy file's bytes strictly (unknown keys, wrong
// types and a missing or other `version` are errors naming name, the line
// and the key) and validates it.
func DecodePolicy(name string, data []byte) (Policy, error) {
	var f policyFile
	if err := conffile.Decode(name, data, &f, PolicyVersion); err != nil {
		return Policy{}, err
	}
	if err := CheckWritten(name, data, nil); err != nil {
		return Policy{}, err
	}
	if err := f.Policy.Validate(); err != nil {
		return Policy{}, fmt.Errorf("%s: %w", name, err)
	}
	return f.Policy, nil
}

// LoadPolicy is [DecodePolicy] for a file path.
func LoadPolicy(path string) (Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Policy{}, err
	}
	return DecodePolicy(path, data)
}

// ErrEmptyProjects is wrapped when a tenant's projects table is present
// but empty (`[tenants.web.projects]` with nothing under it, or
// `projects = {}`). Decoded, it cannot be told from no table, which
// allows every project (ARB-41); reading it so would silently widen what
// the operator meant to narrow, so every reader of a policy (hub.toml's
// table, capacity_policy_file, `capacity-policy set`) refuses it: remove
// the table to allow every project, or list at least one.
var ErrEmptyProjects = errors.New("empty projects table")

// UnknownRelays returns a warning for each relay ID the policy names (in
// relays, runners or production_runners) that is not an enrolled relay of
// rs, in tenant order: the policy is valid, but such an ID is most likely
// mistyped, and its runners would fall to the default tenant.
func UnknownRelays(p Policy, rs []Relay) []string {
	enrolled := map[string]bool{}
	for _, r := range rs {
		if !r.Removed {
			enrolled[r.ID] = true
		}
	}
	var out []string
	for _, name := range sortedKeys(p.Tenants) {
		t := p.Tenants[name]
		seen := map[string]bool{}
		check := func(relay, as string) {
			if relay == "" || enrolled[relay] || seen[as] {
				return
			}
			seen[as] = true
			out = append(out, fmt.Sprintf("tenant %q lists %s, but no enrolled relay has the ID %s (vk-hub relays list)", name, as, relay))
		}
		for _, r := range t.Relays {
			check(r, "relay "+r)
		}
		for _, r := range slices.Concat(t.Runners, t.ProductionRunners) {
			relay, _, _ := strings.Cut(r, "/")
			check(relay, "runner "+r)
		}
	}
	return out
}

// CheckWritten checks what decoding cannot see in a policy document
// (named name in errors; prefix as for [EmptyProjects]): an empty
// projects table ([ErrEmptyProjects]) and a tenant's `weight = 0`
// written out, which would otherwise read as "absent" (weight 1) although
// the operator meant no share at all ([ErrPolicy]).
func CheckWritten(name string, data []byte, prefix []string) error {
	return errors.Join(EmptyProjects(name, data, prefix), zeroWeights(name, data, prefix))
}

func zeroWeights(name string, data []byte, prefix []string) error {
	tenants := rawTenants(data, prefix)
	var errs []error
	for _, n := range sortedKeys(tenants) {
		t, _ := tenants[n].(map[string]any)
		if w, ok := t["weight"].(int64); ok && w == 0 {
			errs = append(errs, fmt.Errorf("%w: %s: tenant %q: weight = 0: a weight is at least 1 (leave it out for 1; to stop a tenant's work, take its runners away)",
				ErrPolicy, name, n))
		}
	}
	return errors.Join(errs...)
}

// rawTenants is the tenants table of a policy document decoded
// generically; nil if it has none or does not parse.
func rawTenants(data []byte, prefix []string) map[string]any {
	var tree map[string]any
	if err := toml.Unmarshal(data, &tree); err != nil {
		return nil
	}
	for _, k := range prefix {
		sub, ok := tree[k].(map[string]any)
		if !ok {
			return nil
		}
		tree = sub
	}
	t, _ := tree["tenants"].(map[string]any)
	return t
}

// EmptyProjects reads the TOML document data (named name in errors)
// generically and reports every tenant whose projects table is defined
// but empty; prefix is the key path of the policy table in the document
// (nil: the top level). A document that does not parse gives nil: the
// strict decode reports its syntax errors.
func EmptyProjects(name string, data []byte, prefix []string) error {
	tenants := rawTenants(data, prefix)
	var errs []error
	for _, n := range sortedKeys(tenants) {
		t, _ := tenants[n].(map[string]any)
		if pr, ok := t["projects"].(map[string]any); ok && len(pr) == 0 {
			errs = append(errs, fmt.Errorf("%w: %s: tenant %q: its projects table is empty; remove it to allow every project, or list at least one",
				ErrEmptyProjects, name, n))
		}
	}
	return errors.Join(errs...)
}

// EncodePolicy writes p as a policy file ([DecodePolicy] reads it back to
// an equal Policy), `version = 1` first, defaults left out.
func EncodePolicy(p Policy) ([]byte, error) {
	var buf bytes.Buffer
	enc := toml.NewEncoder(&buf)
	enc.SetIndentTables(true)
	if err := enc.Encode(policyFile{Version: PolicyVersion, Policy: p}); err != nil {
		return nil, fmt.Errorf("admin: encode policy: %w", err)
	}
	return buf.Bytes(), nil
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
