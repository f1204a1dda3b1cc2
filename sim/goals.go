package sim

import (
	"context"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// GoalScenarios are the scenarios (files in sim/scenarios, without .toml)
// the arbiter's goals are measured on (issue 15): the reference workload at
// 0.9 and 1.1 of fleet capacity, and both tenants backlogged with the same
// job mix and with different job sizes.
var GoalScenarios = []string{"reference-090", "reference-110", "both-backlogged", "sizes-backlogged"}

// Metric is one figure the goals judge, read from one policy's result on
// one goal scenario.
type Metric struct {
	Scenario string // one of GoalScenarios
	Name     string // what is measured, in words
	// Goal says in words what vk must reach, "" for a figure shown for
	// comparison only; Met checks it on one seed, given the value of every
	// policy's result on that seed by label.
	Goal string
	Met  func(vk float64, by map[string]float64) bool
	// Needs are the labels Met compares vk with: a seed without all of
	// them is not judged.
	Needs []string
	// Higher says a larger value is better (which way "worst" is).
	Higher bool
	Value  func(rep *Report, r *Result) float64
	Format func(float64) string
}

func fmtSecs(v float64) string  { return strconv.FormatFloat(v, 'f', 1, 64) + " s" }
func fmtPct(v float64) string   { return strconv.FormatFloat(100*v, 'f', 1, 64) + "%" }
func fmtPct2(v float64) string  { return strconv.FormatFloat(100*v, 'f', 2, 64) + "%" }
func fmtCount(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }
func fmtRatio(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }

// classWait returns the seconds of one wait percentile of a size class.
func classWait(class string, p func(WaitStats) float64) func(*Report, *Result) float64 {
	return func(rep *Report, r *Result) float64 {
		c, ok := rep.Class(r, class)
		if !ok {
			return math.NaN()
		}
		return p(c.Wait)
	}
}

func p95(w WaitStats) float64 { return w.P95.Seconds() }
func p99(w WaitStats) float64 { return w.P99.Seconds() }

// WideServedRatio is the wide jobs' share of the vCPU·s run over their
// share of the vCPU·s demanded: 1 when the shortfall of an overload is
// spread evenly over every size, below 1 when it falls on wide jobs.
func WideServedRatio(rep *Report, r *Result) float64 {
	c, ok := rep.Class(r, "wide")
	if !ok || c.DemandShare == 0 {
		return math.NaN()
	}
	return c.RunShare / c.DemandShare
}

// TenantShare returns the share of busy vCPU·s of tenant ti.
func TenantShare(ti int) func(*Report, *Result) float64 {
	return func(rep *Report, r *Result) float64 {
		sh, _ := rep.TenantShares(r)
		return sh[ti]
	}
}

// withinShare is the backlogged goal: a share within 5 % (relative) of the
// weight's share.
func withinShare(weightShare float64) func(float64, map[string]float64) bool {
	return func(v float64, _ map[string]float64) bool { return math.Abs(v-weightShare) <= 0.05*weightShare }
}

func atMost(x float64) func(float64, map[string]float64) bool {
	return func(v float64, _ map[string]float64) bool { return v <= x }
}

func atLeast(x float64) func(float64, map[string]float64) bool {
	return func(v float64, _ map[string]float64) bool { return v >= x }
}

// below says vk's value is below every named baseline's.
func below(labels ...string) func(float64, map[string]float64) bool {
	return func(v float64, by map[string]float64) bool {
		for _, l := range labels {
			if !(v < by[l]) {
				return false
			}
		}
		return true
	}
}

// above says vk's value is above every named baseline's.
func above(labels ...string) func(float64, map[string]float64) bool {
	return func(v float64, by map[string]float64) bool {
		for _, l := range labels {
			if !(v > by[l]) {
				return false
			}
		}
		return true
	}
}

func jainOf(_ *Report, r *Result) float64 { return r.Jain }

// Metrics are the figures of the goal table, in its order.
var Metrics = []Metric{
	{Scenario: "reference-090", Name: "32-vCPU p99 wait", Goal: "≤ 300 s", Met: atMost(300), Value: classWait("32vCPU/128G", p99), Format: fmtSecs},
	{Scenario: "reference-090", Name: "32-vCPU p99 wait against the baselines that fail no job", Goal: "< pull-fifo, greedy-backfill",
		Met: below("pull-fifo", "greedy-backfill"), Needs: []string{"pull-fifo", "greedy-backfill"}, Value: classWait("32vCPU/128G", p99), Format: fmtSecs},
	{Scenario: "reference-090", Name: "wide (16-32 vCPU) p99 wait", Value: classWait("wide", p99), Format: fmtSecs},
	{Scenario: "reference-090", Name: "narrow (2-8 vCPU) p95 wait", Goal: "≤ 10 s", Met: atMost(10), Value: classWait("narrow", p95), Format: fmtSecs},
	{Scenario: "reference-090", Name: "narrow (2-8 vCPU) p99 wait", Value: classWait("narrow", p99), Format: fmtSecs},
	{Scenario: "reference-090", Name: "jobs failed", Goal: "0", Met: atMost(0), Value: func(_ *Report, r *Result) float64 { return float64(r.FailedTotal()) }, Format: fmtCount},
	{Scenario: "reference-090", Name: "jobs lost to capacity races", Goal: "0", Met: atMost(0), Value: func(_ *Report, r *Result) float64 { return float64(r.RaceLost()) }, Format: fmtCount},
	{Scenario: "reference-090", Name: "jobs left waiting at the end of the drain", Goal: "0", Met: atMost(0), Value: func(_ *Report, r *Result) float64 { return float64(r.Unstarted) }, Format: fmtCount},
	{Scenario: "reference-090", Name: "utilization", Goal: "≥ 88%", Met: atLeast(0.88), Higher: true, Value: func(_ *Report, r *Result) float64 { return r.Util }, Format: fmtPct},
	{Scenario: "reference-090", Name: "offered load (vCPU·s demanded by the window's arrivals / capacity)", Higher: true, Value: (*Report).OfferedLoad, Format: fmtPct},
	{Scenario: "reference-090", Name: "GitLab job requests per job started (today's vk: 2.257)", Value: func(_ *Report, r *Result) float64 { return r.RequestsPerStart() }, Format: fmtRatio},
	{Scenario: "reference-090", Name: "GitLab job requests beyond one per job, per runner per second", Goal: "≤ 1 (ruled in place of ≤ today's vk)", Met: atMost(1), Value: (*Report).IdleRequestRate, Format: fmtRatio},
	{Scenario: "reference-090", Name: "idle reservation time / fleet capacity", Goal: "≤ 2%", Met: atMost(0.02), Value: (*Report).HeldIdleFraction, Format: fmtPct2},
	{Scenario: "reference-110", Name: "utilization", Goal: "≥ 97%", Met: atLeast(0.97), Higher: true, Value: func(_ *Report, r *Result) float64 { return r.Util }, Format: fmtPct},
	{Scenario: "reference-110", Name: "utilization against greedy-backfill", Goal: "≥ greedy-backfill − 1 point", Higher: true, Needs: []string{"greedy-backfill"},
		Met: func(v float64, by map[string]float64) bool {
			return v >= by["greedy-backfill"]-0.01
		}, Value: func(_ *Report, r *Result) float64 { return r.Util }, Format: fmtPct},
	{Scenario: "reference-110", Name: "16-32 vCPU share of vCPU·s run / of vCPU·s demanded", Goal: "≥ 0.9", Met: atLeast(0.9), Higher: true, Value: WideServedRatio, Format: fmtRatio},
	{Scenario: "reference-110", Name: "jobs lost to capacity races", Goal: "0", Met: atMost(0), Value: func(_ *Report, r *Result) float64 { return float64(r.RaceLost()) }, Format: fmtCount},
	{Scenario: "reference-110", Name: "GitLab job requests per job started (today's vk: 2.032)", Value: func(_ *Report, r *Result) float64 { return r.RequestsPerStart() }, Format: fmtRatio},
	{Scenario: "reference-110", Name: "GitLab job requests beyond one per job, per runner per second", Goal: "≤ 1 (ruled in place of ≤ today's vk)", Met: atMost(1), Value: (*Report).IdleRequestRate, Format: fmtRatio},
	{Scenario: "reference-110", Name: "idle reservation time / fleet capacity", Goal: "≤ 2%", Met: atMost(0.02), Value: (*Report).HeldIdleFraction, Format: fmtPct2},
	{Scenario: "both-backlogged", Name: "tenant a (weight 1) share of busy vCPU·s", Goal: "25% ± 5% of it", Met: withinShare(0.25), Value: TenantShare(0), Format: fmtPct},
	{Scenario: "both-backlogged", Name: "tenant b (weight 3) share of busy vCPU·s", Goal: "75% ± 5% of it", Met: withinShare(0.75), Higher: true, Value: TenantShare(1), Format: fmtPct},
	{Scenario: "both-backlogged", Name: "Jain's index over share/weight", Goal: "≥ 0.99", Met: atLeast(0.99), Higher: true, Value: jainOf, Format: fmtRatio},
	{Scenario: "both-backlogged", Name: "Jain's index against the baselines that fail no job", Goal: "> pull-fifo, greedy-backfill", Met: above("pull-fifo", "greedy-backfill"), Needs: []string{"pull-fifo", "greedy-backfill"}, Higher: true, Value: jainOf, Format: fmtRatio},
	{Scenario: "sizes-backlogged", Name: "tenant a (weight 1, 2-vCPU jobs) share", Goal: "25% ± 5% of it", Met: withinShare(0.25), Value: TenantShare(0), Format: fmtPct},
	{Scenario: "sizes-backlogged", Name: "tenant b (weight 3, 8-vCPU jobs) share", Goal: "75% ± 5% of it", Met: withinShare(0.75), Higher: true, Value: TenantShare(1), Format: fmtPct},
	{Scenario: "sizes-backlogged", Name: "Jain's index over share/weight", Goal: "≥ 0.99", Met: atLeast(0.99), Higher: true, Value: jainOf, Format: fmtRatio},
	{Scenario: "sizes-backlogged", Name: "Jain's index against the baselines that fail no job", Goal: "> pull-fifo, greedy-backfill", Met: above("pull-fifo", "greedy-backfill"), Needs: []string{"pull-fifo", "greedy-backfill"}, Higher: true, Value: jainOf, Format: fmtRatio},
	{Scenario: "sizes-backlogged", Name: "jobs lost to capacity races", Goal: "0", Met: atMost(0), Value: func(_ *Report, r *Result) float64 { return float64(r.RaceLost()) }, Format: fmtCount},
}

// GoalOptions configure [RunGoals].
type GoalOptions struct {
	Dir      string   // the scenarios' directory (sim/scenarios)
	Seeds    []uint64 // default 1..5
	Policies []string // nil: all
	// CheckInvariants checks sched's invariants after every step of vk
	// (slow); violations are a row of the table.
	CheckInvariants bool
	Progress        io.Writer // a line per scenario and seed; nil: silent
}

// GoalRun is every goal scenario's report for every seed.
type GoalRun struct {
	Seeds   []uint64
	Reports map[string][]*Report // by scenario, one per seed
	checked bool
}

// RunGoals runs every goal scenario on every seed.
func RunGoals(ctx context.Context, opt GoalOptions) (*GoalRun, error) {
	seeds := opt.Seeds
	if len(seeds) == 0 {
		seeds = []uint64{1, 2, 3, 4, 5}
	}
	g := &GoalRun{Seeds: seeds, Reports: map[string][]*Report{}, checked: opt.CheckInvariants}
	for _, name := range GoalScenarios {
		s, err := LoadScenario(filepath.Join(opt.Dir, name+".toml"))
		if err != nil {
			return nil, err
		}
		for _, seed := range seeds {
			rep, err := Run(ctx, Options{Scenario: s, Seed: seed, Policies: opt.Policies, CheckInvariants: opt.CheckInvariants})
			if err != nil {
				return nil, err
			}
			g.Reports[name] = append(g.Reports[name], rep)
			if opt.Progress != nil {
				fmt.Fprintf(opt.Progress, "vk-sim: %s seed %d done\n", name, seed)
			}
		}
	}
	return g, nil
}

// Labels returns the result labels of the run, vk's first, in report order.
func (g *GoalRun) Labels() []string {
	var out []string
	for _, reps := range g.Reports {
		for _, r := range reps[0].Results {
			if !slices.Contains(out, r.Label) {
				out = append(out, r.Label)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b string) int {
		return slices.Index(PolicyNames, policyOf(a)) - slices.Index(PolicyNames, policyOf(b))
	})
	return out
}

func policyOf(label string) string {
	if i := strings.IndexByte(label, '/'); i >= 0 {
		return label[:i]
	}
	return label
}

// values returns metric m's value for each seed, by label.
func (g *GoalRun) values(m Metric) []map[string]float64 {
	var out []map[string]float64
	for _, rep := range g.Reports[m.Scenario] {
		by := map[string]float64{}
		for _, r := range rep.Results {
			by[r.Label] = m.Value(rep, r)
		}
		out = append(out, by)
	}
	return out
}

// WriteMarkdown writes the goal table: per metric, each policy's mean over
// the seeds and, when the seeds differ, the worst seed's value in
// brackets; and whether vk met the goal on every seed.
func (g *GoalRun) WriteMarkdown(w io.Writer) error {
	labels := g.Labels()
	var b strings.Builder
	fmt.Fprintf(&b, "seeds %s; each cell the mean over the seeds [the worst seed]\n\n", joinSeeds(g.Seeds))
	b.WriteString("| scenario | figure | goal |")
	for _, l := range labels {
		b.WriteString(" " + l + " |")
	}
	b.WriteString(" vk met |\n|---|---|---|")
	for range labels {
		b.WriteString("---|")
	}
	b.WriteString("---|\n")
	metrics := slices.Clone(Metrics)
	if g.checked {
		metrics = append(metrics, Metric{Scenario: "reference-090", Name: "sched invariant violations", Goal: "0", Met: atMost(0),
			Value: func(_ *Report, r *Result) float64 { return float64(len(r.Invariants)) }, Format: fmtCount})
	}
	for _, m := range metrics {
		vals := g.values(m)
		if len(vals) == 0 {
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %s |", m.Scenario, m.Name, m.Goal)
		for _, l := range labels {
			var xs []float64
			for _, by := range vals {
				if v, ok := by[l]; ok {
					xs = append(xs, v)
				}
			}
			b.WriteString(" " + cell(m, xs) + " |")
		}
		met := "-"
		if m.Met != nil {
			n, of := 0, 0
			for _, by := range vals {
				v, ok := by["vk"]
				for _, l := range m.Needs {
					_, has := by[l]
					ok = ok && has
				}
				if ok {
					of++
					if m.Met(v, by) {
						n++
					}
				}
			}
			if of > 0 {
				met = strconv.Itoa(n) + "/" + strconv.Itoa(of)
			}
		}
		b.WriteString(" " + met + " |\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// cell is the mean of xs and, when they differ, the worst in brackets.
func cell(m Metric, xs []float64) string {
	if len(xs) == 0 {
		return "-"
	}
	sum, worst := 0.0, xs[0]
	for _, x := range xs {
		sum += x
		if m.Higher {
			worst = math.Min(worst, x)
		} else {
			worst = math.Max(worst, x)
		}
	}
	mean := sum / float64(len(xs))
	if math.IsNaN(mean) {
		return "-"
	}
	s := m.Format(mean)
	if len(xs) > 1 && m.Format(worst) != s {
		s += " [" + m.Format(worst) + "]"
	}
	return s
}

func joinSeeds(seeds []uint64) string {
	var parts []string
	for _, s := range seeds {
		parts = append(parts, strconv.FormatUint(s, 10))
	}
	return strings.Join(parts, ", ")
}
