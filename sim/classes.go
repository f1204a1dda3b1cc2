package sim

import (
	"slices"
	"time"
)

// ClassStats are the measurements of one size class (the jobs of one
// envelope, or a group of envelopes) under one policy.
type ClassStats struct {
	Class string // the envelope ("32vCPU/128G"), or "narrow" / "wide"
	CPUs  int    // the envelope's vCPUs; 0 for a group
	Wide  bool   // see [Report.IsWide]
	// Wait is over the jobs that arrived in the measured window and did
	// not fail, those still waiting at the end with their wait so far.
	Wait WaitStats
	Left int // jobs left waiting at the end of the run
	// RunShare is the class's share of the vCPU·s all jobs ran in the
	// measured window; DemandShare its share of the vCPU·s the jobs that
	// arrived in it asked for. Overload spread evenly keeps them equal.
	RunShare, DemandShare float64
}

// IsWide reports whether template t's jobs are wide: their envelope asks
// for at least half the vCPUs of the largest node of their pool (16 or 32
// vCPU on 32-vCPU nodes), the jobs a spreading fleet fails to find room for.
func (rep *Report) IsWide(t int) bool {
	j := rep.Scenario.Jobs[t]
	largest := 0
	for _, n := range rep.Scenario.Nodes {
		if n.Pool == j.Pool {
			largest = max(largest, n.CPUs)
		}
	}
	return largest > 0 && 2*j.CPUs >= largest
}

// Classes returns r's measurements per envelope, smallest first, then the
// groups "narrow" and "wide" when the scenario has both kinds.
func (rep *Report) Classes(r *Result) []ClassStats {
	s := rep.Scenario
	byEnv := map[string][]int{}
	for t, j := range s.Jobs {
		byEnv[envLabel(j)] = append(byEnv[envLabel(j)], t)
	}
	keys := make(map[string]bool, len(byEnv))
	for k := range byEnv {
		keys[k] = true
	}
	var out []ClassStats
	for _, k := range sortedStrings(keys) {
		ts := byEnv[k]
		c := rep.group(r, k, func(t int) bool { return slices.Contains(ts, t) })
		c.CPUs = s.Jobs[ts[0]].CPUs
		c.Wide = rep.IsWide(ts[0])
		out = append(out, c)
	}
	var narrow, wide bool
	for t := range s.Jobs {
		narrow = narrow || !rep.IsWide(t)
		wide = wide || rep.IsWide(t)
	}
	if narrow && wide {
		out = append(out, rep.group(r, "narrow", func(t int) bool { return !rep.IsWide(t) }))
		w := rep.group(r, "wide", rep.IsWide)
		w.Wide = true
		out = append(out, w)
	}
	return out
}

// Class returns the entry of [Report.Classes] named class, and whether
// there is one.
func (rep *Report) Class(r *Result, class string) (ClassStats, bool) {
	for _, c := range rep.Classes(r) {
		if c.Class == class {
			return c, true
		}
	}
	return ClassStats{}, false
}

// group measures the jobs of the templates in.
func (rep *Report) group(r *Result, name string, in func(t int) bool) ClassStats {
	c := ClassStats{Class: name}
	var ws []time.Duration
	for j, w := range r.Waits {
		t := rep.jobs[j].Template
		if !in(t) {
			continue
		}
		if r.Left[j] {
			c.Left++
		}
		if w >= 0 {
			ws = append(ws, w)
		}
	}
	c.Wait = Percentiles(ws)
	var run, runAll, dem, demAll float64
	for t := range rep.Scenario.Jobs {
		runAll += r.TemplateCPUSecs[t]
		demAll += r.TemplateDemandCPUSecs[t]
		if in(t) {
			run += r.TemplateCPUSecs[t]
			dem += r.TemplateDemandCPUSecs[t]
		}
	}
	if runAll > 0 {
		c.RunShare = run / runAll
	}
	if demAll > 0 {
		c.DemandShare = dem / demAll
	}
	return c
}

// TenantShares returns each tenant's share of the busy vCPU·s in the
// measured window, and its weight's share of all weights.
func (rep *Report) TenantShares(r *Result) (share, weight []float64) {
	total, wsum := 0.0, 0
	for _, c := range r.TenantCPUSecs {
		total += c
	}
	for _, t := range rep.Scenario.Tenants {
		wsum += max(t.Weight, 1)
	}
	for ti, t := range rep.Scenario.Tenants {
		sh := 0.0
		if total > 0 {
			sh = r.TenantCPUSecs[ti] / total
		}
		share = append(share, sh)
		weight = append(weight, float64(max(t.Weight, 1))/float64(wsum))
	}
	return share, weight
}
