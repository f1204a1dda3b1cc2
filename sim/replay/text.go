package replay

import (
	"fmt"
	"html"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/vk-ci/vk/sim"
)

func secs(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s" }
func pct(f float64) string        { return strconv.FormatFloat(100*f, 'f', 1, 64) + "%" }

func waitCell(w sim.WaitStats) string {
	if w.N == 0 {
		return "-"
	}
	return secs(w.P50) + "/" + secs(w.P95) + "/" + secs(w.P99)
}

func count(n int) string {
	if n < 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

// WriteText writes the report as tables: the totals, then per tenant and
// per size class, one column per side (trace, in force, candidate). It is
// a pure function of (trace, policies, seed).
func (rep *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	wl := rep.Workload
	var cpus int64
	for _, n := range wl.Nodes {
		cpus += n.Capacity.CPUs
	}
	fmt.Fprintf(&b, "%s: window %s from %s, %d jobs, %d runners, %d nodes (%d vCPU), seed %d\n", rep.Name,
		wl.End.Sub(wl.Start).Round(time.Second), wl.Start.Format(time.RFC3339), len(wl.Jobs), len(wl.Runners), len(wl.Nodes), cpus, rep.Seed)
	if wl.PolicyChanges > 0 {
		fmt.Fprintf(&b, "the policy changed %d times in the window; the replay applies the last one throughout\n", wl.PolicyChanges)
	}
	if wl.Dropped > 0 {
		fmt.Fprintf(&b, "the hub dropped %d trace records (a full buffer): the trace misses some events\n", wl.Dropped)
	}
	if recorded := len(wl.Jobs) - wl.Hidden; recorded > 0 {
		fmt.Fprintf(&b, "arrivals: %d of %d recorded jobs from GitLab's time in queue, the rest estimated\n", wl.Queued, recorded)
	}
	if wl.Hidden > 0 {
		fmt.Fprintf(&b, "%d hidden jobs: GitLab's backlog at the end (its last queue sizes), never handed out in the trace\n", wl.Hidden)
	}
	if wl.Censored > 0 || wl.Unstarted > 0 {
		fmt.Fprintf(&b, "%d jobs had not ended and %d not started by the end of the trace\n", wl.Censored, wl.Unstarted)
	}
	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 2, 8, 2, ' ', tabwriter.AlignRight)
	head := "\t"
	for _, s := range rep.Sides {
		head += s.Label + "\t"
	}
	fmt.Fprintln(tw, head)
	row := func(name string, f func(m Measures) string) {
		line := name + "\t"
		for _, s := range rep.Sides {
			line += f(s) + "\t"
		}
		fmt.Fprintln(tw, line)
	}
	row("utilization", func(m Measures) string { return pct(m.Util) })
	row("GitLab job requests", func(m Measures) string { return strconv.Itoa(m.Requests) })
	row("empty answers", func(m Measures) string { return strconv.Itoa(m.Empty) })
	row("jobs unstarted at the end", func(m Measures) string { return strconv.Itoa(m.Unstarted) })
	row("jobs that waited on a tenant cap", func(m Measures) string { return count(m.CapWaits) })
	row("jobs that waited on headroom", func(m Measures) string { return count(m.HeadroomWts) })
	tw.Flush()

	b.WriteString("\nby tenant: share of vCPU·s run (weight share), wait p50/p95/p99\n")
	tw = tabwriter.NewWriter(&b, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "tenant"+head)
	for t, name := range rep.Tenants {
		line := name + "\t"
		for _, s := range rep.Sides {
			line += fmt.Sprintf("%s (%s)  %s\t", pct(s.Shares[t]), pct(s.Weights[t]), waitCell(s.Waits[t]))
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()

	b.WriteString("\nby size class: wait p50/p95/p99\n")
	tw = tabwriter.NewWriter(&b, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "class"+head)
	for i, c := range rep.Sides[0].Classes {
		line := c.Class + "\t"
		for _, s := range rep.Sides {
			line += waitCell(s.Classes[i].Wait) + "\t"
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
	if len(rep.Sides) > 2 {
		b.WriteString("\n")
		rep.writeDeltas(&b)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeDeltas says what the candidate changes against the policy in force.
func (rep *Report) writeDeltas(b *strings.Builder) {
	in, c := rep.Sides[1], rep.Sides[2]
	fmt.Fprintf(b, "candidate against the policy in force: utilization %+.1f points, GitLab requests %+d, unstarted %+d, capped %+d, held by headroom %+d\n",
		100*(c.Util-in.Util), c.Requests-in.Requests, c.Unstarted-in.Unstarted, c.CapWaits-in.CapWaits, c.HeadroomWts-in.HeadroomWts)
	for t, name := range rep.Tenants {
		fmt.Fprintf(b, "  %s: share %s → %s (weight share %s → %s), wait p95 %s → %s\n", name,
			pct(in.Shares[t]), pct(c.Shares[t]), pct(in.Weights[t]), pct(c.Weights[t]), secs(in.Waits[t].P95), secs(c.Waits[t].P95))
	}
}

// WriteHTML writes one self-contained page: the tables, then the
// simulator's charts of both replays (utilization over time, wait CDFs,
// each tenant's share over time).
func (rep *Report) WriteHTML(w io.Writer) error {
	var txt, page strings.Builder
	if err := rep.WriteText(&txt); err != nil {
		return err
	}
	if err := rep.merged.WriteHTML(&page); err != nil {
		return err
	}
	// the simulator's page, with the replay's tables under its title
	s := page.String()
	i := strings.Index(s, "</h1>")
	if i < 0 {
		return fmt.Errorf("replay: unexpected simulator page")
	}
	i += len("</h1>")
	_, err := io.WriteString(w, s[:i]+"\n<h2>Replay</h2>\n<pre>"+html.EscapeString(txt.String())+"</pre>\n<h2>Simulator</h2>"+s[i:])
	return err
}
