package sim

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// validate lists every problem of the scenario, each wrapping
// ErrScenario.
func (s *Scenario) validate() error {
	var e scenarioErrs
	s.validateRun(&e)
	tenants := s.validateFleet(&e)
	s.validateJobs(&e, tenants)
	s.validateVK(&e)
	s.validateBaseline(&e)
	return errors.Join(e...)
}

// scenarioErrs collects a scenario's problems.
type scenarioErrs []error

func (e *scenarioErrs) bad(f string, a ...any) {
	*e = append(*e, fmt.Errorf("%w: "+f, append([]any{ErrScenario}, a...)...))
}

// validateRun checks the run's length, buckets and policies.
func (s *Scenario) validateRun(e *scenarioErrs) {
	bad := e.bad
	if s.Duration.Duration <= 0 {
		bad("duration must be positive")
	}
	if s.Warmup.Duration >= s.Duration.Duration && s.Duration.Duration > 0 {
		bad("warmup (%s) must be shorter than duration (%s)", s.Warmup.Duration, s.Duration.Duration)
	}
	if s.Duration.Duration > 30*24*time.Hour || s.Drain.Duration > 30*24*time.Hour {
		bad("duration and drain are at most 30 days")
	}
	if s.Bucket.Duration < time.Second || s.Duration.Duration/s.Bucket.Duration > 100_000 {
		bad("bucket must be at least 1s and duration/bucket at most 100000")
	}
	for _, p := range s.Policies {
		if !slices.Contains(PolicyNames, p) {
			bad("unknown policy %q (known: %s)", p, strings.Join(PolicyNames, ", "))
		}
	}
}

// validateFleet checks the nodes and the tenants and returns the tenant
// names.
func (s *Scenario) validateFleet(e *scenarioErrs) map[string]bool {
	bad := e.bad
	tenants := map[string]bool{}
	if len(s.Nodes) == 0 {
		bad("no [[nodes]]")
	}
	total := 0
	for _, n := range s.Nodes {
		if n.Count <= 0 || n.CPUs <= 0 || n.MemGiB <= 0 || n.DiskGiB <= 0 || n.MaxConcurrency < 0 {
			bad("nodes %q: count, cpus, mem_gib and disk_gib must be positive", n.Name)
		}
		total += n.Count
	}
	if total > 100_000 {
		bad("at most 100000 nodes")
	}
	for _, t := range s.Tenants {
		if t.Name == "" || tenants[t.Name] {
			bad("tenant names must be unique and non-empty (%q)", t.Name)
		}
		tenants[t.Name] = true
		if t.Weight < 0 || t.Cap < 0 {
			bad("tenant %q: negative weight or cap", t.Name)
		}
	}
	return tenants
}

// validateJobs checks every job class: names, tenant, size, arrivals
// and runtime.
func (s *Scenario) validateJobs(e *scenarioErrs, tenants map[string]bool) {
	bad := e.bad
	if len(s.Jobs) == 0 {
		bad("no [[jobs]]")
	}
	names := map[string]bool{}
	for _, j := range s.Jobs {
		if j.Name == "" || names[j.Tenant+"/"+j.Name] {
			bad("job names must be unique per tenant and non-empty (%q)", j.Name)
		}
		names[j.Tenant+"/"+j.Name] = true
		if !tenants[j.Tenant] {
			bad("job %q: unknown tenant %q", j.Name, j.Tenant)
		}
		if j.CPUs <= 0 || j.MemGiB <= 0 || j.DiskGiB <= 0 || j.Count < 0 {
			bad("job %q: cpus, mem_gib, disk_gib must be positive", j.Name)
		}
		if j.PerHour < 0 || math.IsNaN(j.PerHour) || j.PerHour > 1e6 {
			bad("job %q: per_hour must be in [0, 1e6]", j.Name)
		}
		for _, b := range j.Bursts {
			if b.Jobs <= 0 || b.Jobs > 1_000_000 {
				bad("job %q: burst jobs must be in [1, 1e6]", j.Name)
			}
		}
		if p := j.Pushes; p != nil {
			if p.Fanout <= 0 || p.Fanout > 100_000 || p.PerHour < 0 || math.IsNaN(p.PerHour) || p.PerHour > 1e5 || (p.PerHour == 0 && p.Every.Duration == 0) || p.Count < 0 {
				bad("job %q: pushes need fanout in [1, 1e5] and per_hour in (0, 1e5] or every", j.Name)
			}
		}
		if j.PerHour == 0 && len(j.Bursts) == 0 && j.Pushes == nil && s.Trace == "" {
			bad("job %q: no arrivals (per_hour, bursts or pushes)", j.Name)
		}
		if err := j.Runtime.validate(); err != nil {
			bad("job %q runtime: %v", j.Name, err)
		}
	}
}

// validateVK checks GitLab's round trip and every vk variant's
// parameters.
func (s *Scenario) validateVK(e *scenarioErrs) {
	bad := e.bad
	if err := s.GitLab.RoundTrip.validate(); err != nil {
		bad("gitlab round_trip: %v", err)
	}
	vnames := map[string]bool{}
	for i, x := range append([]VKVariant{{Name: ""}}, s.VK.Variants...) {
		if i > 0 && (x.Name == "" || vnames[x.Name] || strings.ContainsAny(x.Name, " \t\n/")) {
			bad("vk variant %d: names must be unique, non-empty, without spaces or slashes", i)
		}
		vnames[x.Name] = true
		v := x.apply(s.VK)
		if v.RequestConcurrency <= 0 || v.RequestConcurrency > 64 || v.RelayConcurrent < 0 || v.ProbeLimit < -1 || v.BusySecs < 0 || v.BackoffInitialSecs < 0 || v.BackoffMaxSecs < 0 || v.LeaseSecs < 0 || v.DrainsPerPool < -1 {
			bad("vk%s: request_concurrency must be in [1, 64], drains_per_pool at least -1 (no drains), probe_limit at least -1, and no other parameter negative", variantLabel(x.Name))
		}
		if !(v.PackAboveUtilization >= -1 && v.PackAboveUtilization <= 1) || !(v.WideFraction >= 0 && v.WideFraction <= 1) {
			bad("vk%s: pack_above_utilization is in [-1, 1] (negative: only while wide work waits) and wide_fraction a fraction in [0, 1]", variantLabel(x.Name))
		}
	}
}

// validateBaseline checks today's policies' parameters.
func (s *Scenario) validateBaseline(e *scenarioErrs) {
	bad := e.bad
	b := s.Baseline
	if b.Concurrent < 0 || b.Replicas < 0 || b.RequestConcurrency < 0 || b.QuotaPods < 0 {
		bad("baseline: negative parameter")
	}
	for _, m := range b.Margins {
		if m < 0 || m > 100_000 {
			bad("baseline: margin %d out of [0, 100000]", m)
		}
	}
	if b.LeaseRenew.Duration >= b.LeaseDuration.Duration {
		bad("baseline: lease_renew (%s) must be shorter than lease_duration (%s)", b.LeaseRenew.Duration, b.LeaseDuration.Duration)
	}
	if b.LeaseRenew.Duration < time.Second || b.LeaseSweep.Duration < time.Second || b.APILatency.Duration > time.Minute {
		bad("baseline: lease_renew and lease_sweep are at least 1s, api_latency at most 1m")
	}
}
