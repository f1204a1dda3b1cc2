package sim

import (
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strings"
)

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}

// WriteHTML writes a self-contained HTML report: the text tables and inline
// SVG charts (utilization over time per policy, wait CDFs, quota-margin's
// margin sweep, each tenant's share over time per policy). It loads nothing from elsewhere and, like
// [Report.WriteText], is a pure function of (scenario, seed).
func (rep *Report) WriteHTML(w io.Writer) error {
	var b strings.Builder
	var txt strings.Builder
	if err := rep.WriteText(&txt); err != nil {
		return err
	}
	s := rep.Scenario
	fmt.Fprintf(&b, "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>vk-sim: %s</title>\n", html.EscapeString(s.Name))
	b.WriteString("<style>body{font-family:sans-serif;margin:2em;max-width:1100px}pre{font-size:11px;overflow-x:auto;background:#f6f6f6;padding:1em}svg{background:#fff;border:1px solid #ddd;margin:.5em 0}.lg span{margin-right:1.2em;white-space:nowrap}</style></head><body>\n")
	fmt.Fprintf(&b, "<h1>vk-sim: %s</h1>\n<p>seed %d, %d jobs, %d nodes (%d vCPU), window %s</p>\n", html.EscapeString(s.Name), rep.Seed, rep.Jobs, rep.Nodes, rep.CPUs, s.Duration.Duration)
	fmt.Fprintf(&b, "<pre>%s</pre>\n", html.EscapeString(txt.String()))
	legend := func(names []string) {
		b.WriteString("<p class=\"lg\">")
		for i, n := range names {
			fmt.Fprintf(&b, "<span><span style=\"color:%s\">■</span> %s</span>", palette[i%len(palette)], html.EscapeString(n))
		}
		b.WriteString("</p>\n")
	}
	var labels []string
	for _, r := range rep.Results {
		labels = append(labels, r.Label)
	}
	// utilization over time
	b.WriteString("<h2>Utilization over time (CPU-weighted)</h2>\n")
	legend(labels)
	var series [][]pt
	for _, r := range rep.Results {
		var ps []pt
		for i, u := range r.UtilSeries {
			ps = append(ps, pt{float64(i+1) * s.Bucket.Duration.Minutes(), u})
		}
		series = append(series, ps)
	}
	chart(&b, series, s.Duration.Duration.Minutes(), 1, "minutes", "utilization")
	// wait CDFs
	b.WriteString("<h2>Wait CDF (arrival at GitLab → running), seconds, log scale</h2>\n")
	legend(labels)
	series = nil
	maxW := 1.0
	for _, r := range rep.Results {
		for _, x := range r.Waits {
			maxW = max(maxW, x.Seconds())
		}
	}
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
		series = append(series, ps)
	}
	chart(&b, series, 1, 1, fmt.Sprintf("log10(0.01 s … %.0f s)", maxW), "fraction of jobs started")
	// the margin sweep's trade-off (K8S-09, K8S-10)
	var sweep []*Result
	for _, r := range rep.Results {
		if r.Policy == "quota-margin" {
			sweep = append(sweep, r)
		}
	}
	if len(sweep) > 1 {
		maxLost, maxIdle, maxM := 1.0, 1.0, 1.0
		for _, r := range sweep {
			maxLost = max(maxLost, float64(r.Failed[FailQuotaRejected]))
			maxIdle = max(maxIdle, r.FreeWhileWaitingCPUSecs/3600)
			maxM = max(maxM, float64(r.Margin))
		}
		b.WriteString("<h2>quota-margin: margin against jobs lost and capacity idle</h2>\n")
		legend([]string{fmt.Sprintf("jobs lost to quota (max %.0f)", maxLost), fmt.Sprintf("vCPU·h free while jobs waited (max %.1f)", maxIdle)})
		var lost, idle []pt
		for _, r := range sweep {
			lost = append(lost, pt{float64(r.Margin), float64(r.Failed[FailQuotaRejected]) / maxLost})
			idle = append(idle, pt{float64(r.Margin), r.FreeWhileWaitingCPUSecs / 3600 / maxIdle})
		}
		chart(&b, [][]pt{lost, idle}, maxM, 1, "margin (pods)", "fraction of the maximum")
	}
	// share over time
	if len(s.Tenants) > 1 {
		var tn []string
		for _, t := range s.Tenants {
			tn = append(tn, fmt.Sprintf("%s (weight %d)", t.Name, t.Weight))
		}
		b.WriteString("<h2>Share of the fleet per tenant over time</h2>\n")
		legend(tn)
		for _, r := range rep.Results {
			fmt.Fprintf(&b, "<h3>%s</h3>\n", html.EscapeString(r.Label))
			series = nil
			for _, ser := range r.TenantSeries {
				var ps []pt
				for i, u := range ser {
					ps = append(ps, pt{float64(i+1) * s.Bucket.Duration.Minutes(), u})
				}
				series = append(series, ps)
			}
			chart(&b, series, s.Duration.Duration.Minutes(), 1, "minutes", "share of vCPUs")
		}
	}
	b.WriteString("</body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
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

func chart(b *strings.Builder, series [][]pt, xmax, ymax float64, xl, yl string) {
	const W, H, L, B = 900.0, 260.0, 50.0, 30.0
	fmt.Fprintf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\">\n", W, H, W, H)
	pw, ph := W-L-10, H-B-10
	for i := 0; i <= 4; i++ {
		y := 10 + ph*(1-float64(i)/4)
		fmt.Fprintf(b, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#eee\"/><text x=\"4\" y=\"%.1f\" font-size=\"10\">%.2f</text>\n", L, y, W-10, y, y+3, ymax*float64(i)/4)
	}
	fmt.Fprintf(b, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\">%s</text><text x=\"%.0f\" y=\"%.0f\" font-size=\"11\" text-anchor=\"end\">%s (max %.4g)</text>\n", L, H-8, html.EscapeString(yl), W-10, H-8, html.EscapeString(xl), xmax)
	for i, ser := range series {
		if len(ser) == 0 {
			continue
		}
		var p strings.Builder
		for k, q := range ser {
			x := L + pw*min(q.x/xmax, 1)
			y := 10 + ph*(1-min(q.y/ymax, 1))
			if k == 0 {
				fmt.Fprintf(&p, "M%.1f %.1f", x, y)
			} else {
				fmt.Fprintf(&p, "L%.1f %.1f", x, y)
			}
		}
		fmt.Fprintf(b, "<path d=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\"/>\n", p.String(), palette[i%len(palette)])
	}
	b.WriteString("</svg>\n")
}
