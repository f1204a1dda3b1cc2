package sim

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

func secs(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s" }

func pct(f float64) string { return strconv.FormatFloat(100*f, 'f', 1, 64) + "%" }

func cpuHours(s float64) string { return strconv.FormatFloat(s/3600, 'f', 1, 64) }

// WriteText writes the comparison as text tables. The output is a pure
// function of (scenario, seed): wall-clock figures are left out (see
// [Report.WriteWall]).
func (rep *Report) WriteText(w io.Writer) error {
	s := rep.Scenario
	var b strings.Builder
	fmt.Fprintf(&b, "scenario %s  seed %d  jobs %d  nodes %d (%d vCPU)  window %s", s.Name, rep.Seed, rep.Jobs, rep.Nodes, rep.CPUs, s.Duration.Duration)
	if s.Warmup.Duration > 0 {
		fmt.Fprintf(&b, " (the first %s not measured)", s.Warmup.Duration)
	}
	b.WriteString("\n")
	if s.Description != "" {
		fmt.Fprintf(&b, "%s\n", strings.TrimSpace(s.Description))
	}
	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tutil\twait p50\tp95\tp99\tstarted\tfailed\tquota-lost\tovershoot\ttimeout\trace-lost\tunstarted\theld-idle vCPU·h\theld-idle\tfree-while-waiting vCPU·h\tgitlab req\tempty\treq/job\tjain\t")
	for _, r := range rep.Results {
		ws := Percentiles(r.Waits)
		over := "-"
		if (r.Policy == "quota-margin" || r.Policy == "k8s-lease") && s.Baseline.QuotaPods > 0 {
			over = strconv.Itoa(r.MarginOvershoot)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%d\t%d\t%.2f\t%.3f\t\n", r.Label, pct(r.Util), secs(ws.P50), secs(ws.P95), secs(ws.P99),
			r.Started, r.FailedTotal(), r.Failed[FailQuotaRejected]+r.Failed[FailQuotaNoRequest], over, r.Failed[FailPollTimeout], r.RaceLost(), r.Unstarted,
			cpuHours(r.HeldIdleCPUSecs), pct(rep.HeldIdleFraction(r)), cpuHours(r.FreeWhileWaitingCPUSecs), r.GitLabRequests, r.EmptyAnswers, r.RequestsPerStart(), r.Jain)
	}
	tw.Flush()
	if by := failedBy(rep, FailQuotaNoRequest); by != "" {
		fmt.Fprintf(&b, "quota-lost includes pods rejected for lacking a memory request under the requests.memory quota (K8S-12): %s\n", by)
	}
	if by := failedBy(rep, FailManagerCrash); by != "" {
		fmt.Fprintf(&b, "failed includes jobs held by a crashed manager (crash_at): %s\n", by)
	}

	// the capacity checks' Kubernetes API cost (K8S-13)
	kube := false
	for _, r := range rep.Results {
		kube = kube || r.Policy == "quota-margin" || r.Policy == "k8s-lease"
	}
	if kube {
		b.WriteString("\nKubernetes API calls of the capacity check (quota gets; lease takes, renewals, deletes, sweeps), stale leases\n")
		tw = tabwriter.NewWriter(&b, 2, 8, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "policy\tapi calls\tper job\tleases swept\tstale-lease vCPU·h\t")
		for _, r := range rep.Results {
			switch r.Policy {
			case "quota-margin":
				fmt.Fprintf(tw, "%s\t%d\t%.1f\t-\t-\t\n", r.Label, r.KubeAPICalls, float64(r.KubeAPICalls)/float64(max(rep.Jobs, 1)))
			case "k8s-lease":
				fmt.Fprintf(tw, "%s\t%d\t%.1f\t%d\t%s\t\n", r.Label, r.KubeAPICalls, float64(r.KubeAPICalls)/float64(max(rep.Jobs, 1)), r.LeasesSwept, cpuHours(r.StaleLeaseCPUSecs))
			}
		}
		tw.Flush()
	}

	// per size class: waits, jobs left waiting, run against demanded vCPU·s
	b.WriteString("\nby size class: wait p50/p95/p99 (jobs still waiting at the end count with their wait so far), jobs left waiting at the end, share of vCPU·s run against share of vCPU·s demanded\n")
	tw = tabwriter.NewWriter(&b, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tclass\tjobs\twait p50\tp95\tp99\tleft\trun share\tdemand share\t")
	for _, r := range rep.Results {
		for _, c := range rep.Classes(r) {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%d\t%s\t%s\t\n", r.Label, c.Class, c.Wait.N, secs(c.Wait.P50), secs(c.Wait.P95), secs(c.Wait.P99),
				c.Left, pct(c.RunShare), pct(c.DemandShare))
		}
	}
	tw.Flush()

	if len(s.Tenants) > 1 {
		b.WriteString("\nby tenant: wait p50/p95/p99, share of busy vCPU·s in the measured window (weight share); Jain's index over share/weight\n")
		tw = tabwriter.NewWriter(&b, 2, 8, 2, ' ', tabwriter.AlignRight)
		fmt.Fprint(tw, "policy\t")
		wsum := 0
		for _, t := range s.Tenants {
			fmt.Fprintf(tw, "%s\t", t.Name)
			wsum += t.Weight
		}
		fmt.Fprintln(tw, "jain\t")
		for _, r := range rep.Results {
			by := rep.WaitsBy(r, func(t int) string { return s.Jobs[t].Tenant })
			total := 0.0
			for _, c := range r.TenantCPUSecs {
				total += c
			}
			fmt.Fprintf(tw, "%s\t", r.Label)
			for ti, t := range s.Tenants {
				share := 0.0
				if total > 0 {
					share = r.TenantCPUSecs[ti] / total
				}
				fmt.Fprintf(tw, "%s %s (%s)\t", statCell(by[t.Name]), pct(share), pct(float64(t.Weight)/float64(wsum)))
			}
			fmt.Fprintf(tw, "%.3f\t\n", r.Jain)
		}
		tw.Flush()
	}
	for _, r := range rep.Results {
		if len(r.Invariants) > 0 {
			fmt.Fprintf(&b, "\n%s: %d sched invariant violations, first: %s\n", r.Label, len(r.Invariants), r.Invariants[0])
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// HeldIdleFraction is r's held-idle vCPU·s as a fraction of the fleet's
// capacity over the measured window.
func (rep *Report) HeldIdleFraction(r *Result) float64 {
	cap := float64(rep.CPUs) * (rep.Scenario.Duration.Duration - rep.Scenario.Warmup.Duration).Seconds()
	if cap <= 0 {
		return 0
	}
	return r.HeldIdleCPUSecs / cap
}

// OfferedLoad is the vCPU·s demanded by the jobs that arrived in the
// measured window over the fleet's vCPU·s in it: the most utilization any
// policy can reach on this sample of the workload (a Poisson sample of
// "0.9 of capacity" offers a little more or less than 0.9).
func (rep *Report) OfferedLoad(r *Result) float64 {
	cap := float64(rep.CPUs) * (rep.Scenario.Duration.Duration - rep.Scenario.Warmup.Duration).Seconds()
	if cap <= 0 {
		return 0
	}
	var dem float64
	for _, d := range r.TemplateDemandCPUSecs {
		dem += d
	}
	return dem / cap
}

// IdleRequestRate is r's GitLab job requests beyond one per job started,
// per runner and second ([Result.IdleRequestRate]); the scenario's job
// templates are its runners.
func (rep *Report) IdleRequestRate(r *Result) float64 {
	return r.IdleRequestRate(len(rep.Scenario.Jobs))
}

// WriteWall writes the wall-clock figures: the vk core's events per second.
// They vary from run to run and are kept apart from the report.
func (rep *Report) WriteWall(w io.Writer) error {
	for _, r := range rep.Results {
		if r.CoreSteps > 0 {
			if _, err := fmt.Fprintf(w, "%s core: %d steps in %s wall, %.0f decisions/s\n", r.Label, r.CoreSteps, r.CoreWall.Round(time.Millisecond), r.DecisionsPerSec()); err != nil {
				return err
			}
		}
	}
	return nil
}

// failedBy lists "label n" for every result with failures of reason, or "".
func failedBy(rep *Report, reason string) string {
	var parts []string
	for _, r := range rep.Results {
		if n := r.Failed[reason]; n > 0 {
			parts = append(parts, r.Label+" "+strconv.Itoa(n))
		}
	}
	return strings.Join(parts, ", ")
}

func envLabel(j JobTemplate) string {
	return strconv.Itoa(j.CPUs) + "vCPU/" + strconv.Itoa(j.MemGiB) + "G"
}

func statCell(ws []time.Duration) string {
	st := Percentiles(ws)
	if st.N == 0 {
		return "-"
	}
	return secs(st.P50) + "/" + secs(st.P95) + "/" + secs(st.P99)
}

func sortedStrings(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b string) int {
		// numeric vCPU first
		ai, _ := strconv.Atoi(a[:strings.IndexByte(a+"v", 'v')])
		bi, _ := strconv.Atoi(b[:strings.IndexByte(b+"v", 'v')])
		if ai != bi {
			return ai - bi
		}
		return strings.Compare(a, b)
	})
	return out
}
