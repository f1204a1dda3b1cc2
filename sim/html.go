package sim

import (
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"slices"
	"strings"
)

// Line styles: each variant (policy, tenant) gets a colour and a dash
// pattern, so lines that overlap or print in grey still differ. Pairs
// repeat only after 70 variants.
var (
	palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}
	dashes  = []string{"", "8 4", "2 3", "10 3 2 3", "4 4", "1 3", "12 4 4 4"}
)

func lineStyle(i int) (colour, dash string) { return palette[i%len(palette)], dashes[i%len(dashes)] }

// The page's layout fits a 1400 px window: the body takes the window's
// width up to 1400 px, charts scale to it, the text tables are set small
// enough to fit it whole (and scroll inside their box in a narrower one).
const htmlStyle = `*{box-sizing:border-box}body{font-family:sans-serif;margin:1em auto;max-width:1400px;padding:0 1em}` +
	`pre{font-size:10px;overflow-x:auto;max-width:100%;background:#f6f6f6;padding:.6em}` +
	`svg.chart{display:block;width:100%;max-width:1100px;height:auto;background:#fff;border:1px solid #ddd;margin:.5em 0}` +
	`.lg span{display:inline-block;margin-right:1.2em;white-space:nowrap}.lg svg{vertical-align:middle;margin-right:.3em}` +
	`li.met{color:#080}li.unmet{color:#c00}li.unjudged{color:#777}`

// WriteHTML writes a self-contained HTML report: the verdict on each goal
// set for the scenario, the text tables and inline SVG charts (utilization
// over time per policy, wait CDFs, quota-margin's margin sweep, each
// tenant's share over time per policy), every chart with axis ticks and a
// legend. It loads nothing from elsewhere and, like [Report.WriteText],
// is a pure function of (scenario, seed).
func (rep *Report) WriteHTML(w io.Writer) error {
	var txt strings.Builder
	if err := rep.WriteText(&txt); err != nil {
		return err
	}
	s := rep.Scenario
	var b strings.Builder
	fmt.Fprintf(&b, "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>vk-sim: %s</title>\n<style>%s</style></head><body>\n",
		html.EscapeString(s.Name), htmlStyle)
	fmt.Fprintf(&b, "<h1>vk-sim: %s</h1>\n<p>seed %d, %d jobs, %d nodes (%d vCPU), window %s</p>\n",
		html.EscapeString(s.Name), rep.Seed, rep.Jobs, rep.Nodes, rep.CPUs, s.Duration.Duration)
	writeVerdicts(&b, rep, Metrics)
	fmt.Fprintf(&b, "<pre>%s</pre>\n", html.EscapeString(txt.String()))
	rep.utilChart(&b)
	rep.waitChart(&b)
	rep.sweepChart(&b)
	rep.shareCharts(&b)
	b.WriteString("</body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func (rep *Report) labels() []string {
	var out []string
	for _, r := range rep.Results {
		out = append(out, r.Label)
	}
	return out
}

// overTime is a per-bucket series as points (minutes, value).
func (rep *Report) overTime(vs []float64) []pt {
	var ps []pt
	for i, u := range vs {
		ps = append(ps, pt{float64(i+1) * rep.Scenario.Bucket.Duration.Minutes(), u})
	}
	return ps
}

func (rep *Report) utilChart(b *strings.Builder) {
	b.WriteString("<h2>Utilization over time (CPU-weighted)</h2>\n")
	c := chartSpec{names: rep.labels(), x: linearAxis(rep.Scenario.Duration.Duration.Minutes(), "minutes", fmtTick),
		y: linearAxis(1, "utilization", fmtPctTick)}
	for _, r := range rep.Results {
		c.series = append(c.series, rep.overTime(r.UtilSeries))
	}
	c.write(b)
}

func (rep *Report) waitChart(b *strings.Builder) {
	b.WriteString("<h2>Wait CDF (arrival at GitLab → running), log scale</h2>\n")
	maxW := 1.0
	for _, r := range rep.Results {
		for _, x := range r.Waits {
			maxW = max(maxW, x.Seconds())
		}
	}
	c := chartSpec{names: rep.labels(), x: logAxis(maxW, "wait"), y: linearAxis(1, "fraction of jobs started", fmtPctTick)}
	for _, r := range rep.Results {
		var v []float64
		for _, x := range r.Waits {
			if x >= 0 {
				v = append(v, x.Seconds())
			}
		}
		slices.Sort(v)
		var ps []pt
		n := float64(len(r.Waits))
		step := max(1, len(v)/400)
		for i := 0; i < len(v); i += step {
			ps = append(ps, pt{logx(v[i], maxW), float64(i+1) / n})
		}
		if len(v) > 0 {
			ps = append(ps, pt{logx(v[len(v)-1], maxW), float64(len(v)) / n})
		}
		c.series = append(c.series, ps)
	}
	c.write(b)
}

// sweepChart is the margin sweep's trade-off (K8S-09, K8S-10).
func (rep *Report) sweepChart(b *strings.Builder) {
	var sweep []*Result
	for _, r := range rep.Results {
		if r.Policy == "quota-margin" {
			sweep = append(sweep, r)
		}
	}
	if len(sweep) < 2 {
		return
	}
	maxLost, maxIdle, maxM := 1.0, 1.0, 1.0
	for _, r := range sweep {
		maxLost = max(maxLost, float64(r.Failed[FailQuotaRejected]))
		maxIdle = max(maxIdle, r.FreeWhileWaitingCPUSecs/3600)
		maxM = max(maxM, float64(r.Margin))
	}
	b.WriteString("<h2>quota-margin: margin against jobs lost and capacity idle</h2>\n")
	var lost, idle []pt
	for _, r := range sweep {
		lost = append(lost, pt{float64(r.Margin), float64(r.Failed[FailQuotaRejected]) / maxLost})
		idle = append(idle, pt{float64(r.Margin), r.FreeWhileWaitingCPUSecs / 3600 / maxIdle})
	}
	chartSpec{names: []string{fmt.Sprintf("jobs lost to quota (max %.0f)", maxLost), fmt.Sprintf("vCPU·h free while jobs waited (max %.1f)", maxIdle)},
		series: [][]pt{lost, idle}, x: linearAxis(maxM, "margin (pods)", fmtTick), y: linearAxis(1, "fraction of the maximum", fmtPctTick)}.write(b)
}

func (rep *Report) shareCharts(b *strings.Builder) {
	s := rep.Scenario
	if len(s.Tenants) < 2 {
		return
	}
	var tn []string
	for _, t := range s.Tenants {
		tn = append(tn, fmt.Sprintf("%s (weight %d)", t.Name, t.Weight))
	}
	b.WriteString("<h2>Share of the fleet per tenant over time</h2>\n")
	for _, r := range rep.Results {
		fmt.Fprintf(b, "<h3>%s</h3>\n", html.EscapeString(r.Label))
		c := chartSpec{names: tn, x: linearAxis(s.Duration.Duration.Minutes(), "minutes", fmtTick), y: linearAxis(1, "share of vCPUs", fmtPctTick)}
		for _, ser := range r.TenantSeries {
			c.series = append(c.series, rep.overTime(ser))
		}
		c.write(b)
	}
}

// writeVerdicts writes a line per goal of ms set for the scenario: met or
// not by vk's result on this seed, with vk's value, or not judged when a
// policy it compares with did not run.
func writeVerdicts(b *strings.Builder, rep *Report, ms []Metric) {
	var vk *Result
	for _, r := range rep.Results {
		if r.Policy == "vk" {
			vk = r
			break
		}
	}
	b.WriteString("<h2>Goals</h2>\n")
	n := 0
	for _, m := range ms {
		if m.Scenario != rep.Scenario.Name || m.Goal == "" || m.Met == nil || vk == nil {
			continue
		}
		if n == 0 {
			b.WriteString("<ul class=\"verdicts\">\n")
		}
		n++
		by := map[string]float64{}
		for _, r := range rep.Results {
			by[r.Label] = m.Value(rep, r)
		}
		v := by[vk.Label]
		class, word := "unjudged", "not judged"
		if slices.ContainsFunc(m.Needs, func(l string) bool { _, ok := by[l]; return !ok }) {
			word += " (needs " + strings.Join(m.Needs, ", ") + ")"
		} else if m.Met(v, by) {
			class, word = "met", "✓ met"
		} else {
			class, word = "unmet", "✗ not met"
		}
		fmt.Fprintf(b, "<li class=\"%s\">%s: %s %s — %s %s</li>\n", class, word, html.EscapeString(m.Name), html.EscapeString(m.Goal),
			html.EscapeString(vk.Label), html.EscapeString(m.Format(v)))
	}
	if n > 0 {
		b.WriteString("</ul>\n")
		return
	}
	fmt.Fprintf(b, "<p class=\"verdicts\">No goal is set for scenario %s (with policy vk); goals are judged on %s.</p>\n",
		html.EscapeString(rep.Scenario.Name), html.EscapeString(strings.Join(GoalScenarios, ", ")))
}

type pt struct{ x, y float64 }

// logx maps a wait in seconds to [0, 1] on a log scale from 10 ms to maxW.
func logx(v, maxW float64) float64 {
	lo, hi := -2.0, log10(maxW)
	if hi <= lo {
		return 0
	}
	return (log10(max(v, 0.01)) - lo) / (hi - lo)
}

func log10(v float64) float64 {
	return math.Log10(v)
}

// SaveHTML writes a report's page with write (a WriteHTML method: this
// package's or the replay's) to the file at path, created or truncated.
func SaveHTML(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
