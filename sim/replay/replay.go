package replay

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/vk-ci/vk/hub/wtrace"
	"github.com/vk-ci/vk/sched"
	"github.com/vk-ci/vk/sim"
)

// Options configure [Run].
type Options struct {
	Name string // labels the report; default "replay"
	Seed uint64 // the simulator's seed; 0 means 1
	// Candidate is the policy to compare with the one in force; nil runs
	// the policy in force alone.
	Candidate *wtrace.Policy
	// SampleEvery is how often the replay looks at why requests wait
	// (caps, headroom); default 1 s of virtual time.
	SampleEvery time.Duration
}

// Measures are one side's figures: the trace's own, or a replay's.
type Measures struct {
	Label string
	Util  float64 // running vCPUs over the fleet's vCPUs over the window, 0..1
	// Tenants are per tenant (in [Report.Tenants] order): the waits of the
	// jobs that arrived in the window, and the share of the vCPU·s run.
	Waits  []sim.WaitStats
	Shares []float64
	// Weights are the tenants' weight shares under this side's policy.
	Weights []float64
	// Classes are the waits per size class (envelope label), sorted.
	Classes     []ClassWaits
	Requests    int // GitLab job requests
	Empty       int // empty answers among them
	Unstarted   int // jobs not started by the end
	CapWaits    int // jobs that waited while their runner's demand was held by its tenant's cap; -1 unknown (the trace)
	HeadroomWts int // same, held by production headroom; -1 unknown
	result      *sim.Result
}

// ClassWaits are one size class's waits.
type ClassWaits struct {
	Class string
	Wait  sim.WaitStats
}

// Report is a replay: the trace's own measures, then the policy in force
// replayed, then the candidate's (when given).
type Report struct {
	Name     string
	Seed     uint64
	Workload *Workload
	Tenants  []string   // names, in the order of the per-tenant slices
	Sides    []Measures // trace, in force[, candidate]
	Policies []*wtrace.Policy
	merged   *sim.Report // both runs on one report, for the HTML charts
}

// Run replays w under the policy in force and, with opt.Candidate, under
// the candidate: the same recorded jobs, node capacity over time, seed.
func Run(ctx context.Context, w *Workload, opt Options) (*Report, error) {
	if opt.Name == "" {
		opt.Name = "replay"
	}
	if opt.Seed == 0 {
		opt.Seed = 1
	}
	if opt.SampleEvery <= 0 {
		opt.SampleEvery = time.Second
	}
	rep := &Report{Name: opt.Name, Seed: opt.Seed, Workload: w}
	pols := []*wtrace.Policy{w.Policy}
	labels := []string{"in force"}
	if opt.Candidate != nil {
		pols = append(pols, opt.Candidate)
		labels = append(labels, "candidate")
	}
	var trace Measures
	for i, pol := range pols {
		b, err := build(w, pol, opt.Name, opt.Seed)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			rep.Tenants = b.names
			trace = observed(w, b)
			rep.Sides = append(rep.Sides, trace)
		}
		held := newHeldLog(len(b.s.Jobs))
		b.s.SampleVKWaits(opt.SampleEvery, held.note)
		sr, err := sim.Run(ctx, sim.Options{Scenario: b.s, Seed: opt.Seed, Policies: []string{"vk"}})
		if err != nil {
			return nil, err
		}
		r := sr.Results[0]
		r.Label = labels[i]
		m := simulated(sr, r, b, pol, held)
		m.Label = labels[i]
		rep.Sides = append(rep.Sides, m)
		rep.Policies = append(rep.Policies, pol)
		if rep.merged == nil {
			rep.merged = sr
		} else {
			rep.merged.Results = append(rep.merged.Results, r)
		}
	}
	return rep, nil
}

// weightShares are the tenants' weights over their sum under pol.
func weightShares(b *built, pol *wtrace.Policy) []float64 {
	out := make([]float64, len(b.tenants))
	var sum float64
	for i, id := range b.tenants {
		wt := 1
		for _, t := range pol.Tenants {
			if t.ID == id {
				wt = max(t.Weight, 1)
			}
		}
		out[i] = float64(wt)
		sum += float64(wt)
	}
	for i := range out {
		out[i] /= sum
	}
	return out
}

func shares(cpuSecs []float64) []float64 {
	var sum float64
	for _, c := range cpuSecs {
		sum += c
	}
	out := make([]float64, len(cpuSecs))
	for i, c := range cpuSecs {
		if sum > 0 {
			out[i] = c / sum
		}
	}
	return out
}

func classLabel(t sim.JobTemplate) string {
	return strconv.Itoa(t.CPUs) + "vCPU/" + strconv.Itoa(t.MemGiB) + "G"
}

// classWaits groups waits (by template) into size classes, sorted.
func classWaits(s *sim.Scenario, byTmpl map[int][]time.Duration) []ClassWaits {
	by := map[string][]time.Duration{}
	for t, ws := range byTmpl {
		by[classLabel(s.Jobs[t])] = append(by[classLabel(s.Jobs[t])], ws...)
	}
	var keys []string
	for k := range by {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return classOrder(a, b) })
	var out []ClassWaits
	for _, k := range keys {
		out = append(out, ClassWaits{Class: k, Wait: sim.Percentiles(by[k])})
	}
	return out
}

// classOrder sorts "4vCPU/16G" by vCPUs, then text.
func classOrder(a, b string) int {
	na, _ := strconv.Atoi(a[:max(0, indexByte(a, 'v'))])
	nb, _ := strconv.Atoi(b[:max(0, indexByte(b, 'v'))])
	if na != nb {
		return na - nb
	}
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// observed is the trace's own measures, with the replay's definitions: a
// job's wait from its estimated arrival to its start (to the end of the
// window when it did not start), utilization over the same fleet and
// window.
func observed(w *Workload, b *built) Measures {
	m := Measures{Label: "trace", Requests: w.Asks, Empty: w.Empty, Unstarted: w.Unstarted, CapWaits: -1, HeadroomWts: -1}
	win := w.window()
	var total float64
	for _, n := range b.s.Nodes {
		total += float64(n.CPUs)
	}
	ridx := map[uint64]int{}
	for i, id := range b.runners {
		ridx[id] = i
	}
	tidx := map[string]int{}
	for i, n := range b.names {
		tidx[n] = i
	}
	cpu := make([]float64, len(b.names))
	waits := make([][]time.Duration, len(b.names))
	byTmpl := map[int][]time.Duration{}
	var run float64
	for _, j := range w.Jobs {
		t := ridx[j.Runner]
		ti := tidx[b.s.Jobs[t].Tenant]
		if j.Start >= 0 {
			from, to := max(j.Start, 0), min(j.Start+j.Runtime, win)
			if to > from {
				a := float64(b.s.Jobs[t].CPUs) * (to - from).Seconds()
				run += a
				cpu[ti] += a
			}
		}
		if j.Arrive < 0 {
			continue // arrived before the window
		}
		wait := win - j.Arrive
		if j.Start >= 0 {
			wait = max(j.Start-j.Arrive, 0)
		}
		waits[ti] = append(waits[ti], wait)
		byTmpl[t] = append(byTmpl[t], wait)
	}
	if total > 0 {
		m.Util = run / (total * win.Seconds())
	}
	m.Shares = shares(cpu)
	m.Weights = weightShares(b, w.Policy)
	for _, ws := range waits {
		m.Waits = append(m.Waits, sim.Percentiles(ws))
	}
	m.Classes = classWaits(b.s, byTmpl)
	return m
}

// simulated is one replay's measures.
func simulated(sr *sim.Report, r *sim.Result, b *built, pol *wtrace.Policy, held *heldLog) Measures {
	m := Measures{Util: r.Util, Requests: r.GitLabRequests, Empty: r.EmptyAnswers, Unstarted: r.Unstarted, result: r}
	m.Shares = shares(r.TenantCPUSecs)
	m.Weights = weightShares(b, pol)
	jobs := sr.Workload()
	waits := make([][]time.Duration, len(b.names))
	byTmpl := map[int][]time.Duration{}
	for id, wt := range r.Waits {
		j := jobs[id]
		waits[j.Tenant] = append(waits[j.Tenant], wt)
		byTmpl[j.Template] = append(byTmpl[j.Template], wt)
		if wt < 0 {
			continue
		}
		if held.during(j.Template, sched.ReasonTenantCap, j.Arrive, j.Arrive+wt) {
			m.CapWaits++
		}
		if held.during(j.Template, sched.ReasonHeadroom, j.Arrive, j.Arrive+wt) {
			m.HeadroomWts++
		}
	}
	for _, ws := range waits {
		m.Waits = append(m.Waits, sim.Percentiles(ws))
	}
	m.Classes = classWaits(b.s, byTmpl)
	return m
}

// heldLog keeps, per template and reason (caps, headroom), the seconds at
// which a request of the template waited for that reason.
type heldLog struct {
	cap, headroom [][]int64
}

func newHeldLog(n int) *heldLog {
	return &heldLog{cap: make([][]int64, n), headroom: make([][]int64, n)}
}

func (h *heldLog) note(at time.Duration, tmpl int, why sched.Reason) {
	var l *[]int64
	switch why.Code {
	case sched.ReasonTenantCap:
		l = &h.cap[tmpl]
	case sched.ReasonHeadroom:
		l = &h.headroom[tmpl]
	default:
		return
	}
	s := int64(at / time.Millisecond)
	if n := len(*l); n == 0 || (*l)[n-1] != s {
		*l = append(*l, s)
	}
}

// during reports whether a request of tmpl waited for code within [from, to].
func (h *heldLog) during(tmpl int, code sched.ReasonCode, from, to time.Duration) bool {
	l := h.cap[tmpl]
	if code == sched.ReasonHeadroom {
		l = h.headroom[tmpl]
	}
	lo := int64(from / time.Millisecond)
	i, _ := slices.BinarySearch(l, lo)
	return i < len(l) && l[i] <= int64(to/time.Millisecond)
}

// Calibration is how far a replay under the policy in force lands from
// the trace's own measures.
type Calibration struct {
	UtilPoints float64 // |replay − trace| utilization, in percentage points
	// P50, P95 are per tenant |replay − trace| / trace (0 when both are
	// under MinWait, where a relative error means nothing).
	P50, P95 []float64
}

// MinWait is the floor of [Report.Calibrate]'s relative errors: waits
// both under it count as equal, and a difference is taken relative to at
// least it. Below a second a wait is GitLab's and the hub's message
// latency, which the trace cannot see better than a round trip (the
// estimated arrival), not scheduling (docs/sim.md).
const MinWait = time.Second

// Calibrate compares the replay under the policy in force with the trace.
func (rep *Report) Calibrate() Calibration {
	tr, in := rep.Sides[0], rep.Sides[1]
	c := Calibration{UtilPoints: 100 * abs(in.Util-tr.Util)}
	for t := range rep.Tenants {
		c.P50 = append(c.P50, relErr(tr.Waits[t].P50, in.Waits[t].P50))
		c.P95 = append(c.P95, relErr(tr.Waits[t].P95, in.Waits[t].P95))
	}
	return c
}

func relErr(want, got time.Duration) float64 {
	if want < MinWait && got < MinWait {
		return 0
	}
	return abs(float64(got-want)) / float64(max(want, MinWait))
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}

// Within reports whether c holds the bounds (utilization within points,
// every tenant's p50 and p95 within rel) and, if not, why.
func (c Calibration) Within(points, rel float64, tenants []string) error {
	if c.UtilPoints > points {
		return fmt.Errorf("utilization off by %.1f points (bound %.1f)", c.UtilPoints, points)
	}
	for i, t := range tenants {
		if c.P50[i] > rel || c.P95[i] > rel {
			return fmt.Errorf("tenant %s: wait p50 off by %.0f%%, p95 by %.0f%% (bound %.0f%%)", t, 100*c.P50[i], 100*c.P95[i], 100*rel)
		}
	}
	return nil
}
