package sim

import (
	"bytes"
	"context"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// oneHost is a scenario of one 4-vCPU host and the given jobs, parsed
// strictly like a file.
func oneHost(t *testing.T, head, jobs string) *Scenario {
	t.Helper()
	s, err := ParseScenario([]byte(head + `
[[nodes]]
count = 1
cpus = 4
mem_gib = 16
[[tenants]]
name = "t"
` + jobs))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The warmup is left out of utilization, shares and waits; the time
// series still show it.
func TestWarmupLeavesOutTheStart(t *testing.T) {
	jobs := `[[jobs]]
name = "long"
tenant = "t"
cpus = 4
mem_gib = 16
bursts = [{ at = "0s", jobs = 1 }]
runtime = { kind = "fixed", value = "30m" }
`
	plain := run(t, oneHost(t, `duration = "1h"`+"\n", jobs), 1, "greedy-backfill").Results[0]
	warm := run(t, oneHost(t, "duration = \"1h\"\nwarmup = \"40m\"\n", jobs), 1, "greedy-backfill").Results[0]
	// the job runs 30 min from about 1 s in: half the hour, none of the
	// 20 minutes after the warmup
	if math.Abs(plain.Util-0.5) > 0.01 || warm.Util != 0 || warm.TenantCPUSecs[0] != 0 {
		t.Fatalf("util %.3f without warmup (want 0.5), %.3f and %.0f vCPU·s after a 40 min warmup (want 0)", plain.Util, warm.Util, warm.TenantCPUSecs[0])
	}
	if plain.Waits[0] < 0 || warm.Waits[0] != -1 {
		t.Fatalf("waits %v and %v: a job arriving in the warmup must not count", plain.Waits[0], warm.Waits[0])
	}
	if warm.UtilSeries[0] == 0 {
		t.Fatal("the time series lost the warmup")
	}
	if _, err := ParseScenario([]byte("duration = \"1h\"\nwarmup = \"1h\"\n")); err == nil || !strings.Contains(err.Error(), "warmup") {
		t.Fatalf("warmup as long as the window: %v", err)
	}
}

// A job still waiting when the run ends counts with its wait so far and
// as left waiting in its size class; the demanded vCPU·s count it too.
func TestLeftWaitingCountsItsWaitSoFar(t *testing.T) {
	s := oneHost(t, "duration = \"1h\"\ndrain = \"1h\"\n", `[[jobs]]
name = "hog"
tenant = "t"
cpus = 4
mem_gib = 16
bursts = [{ at = "0s", jobs = 1 }]
runtime = { kind = "fixed", value = "10h" }
[[jobs]]
name = "small"
tenant = "t"
cpus = 1
mem_gib = 4
bursts = [{ at = "1m", jobs = 1 }]
runtime = { kind = "fixed", value = "1m" }
`)
	for _, p := range []string{"vk", "greedy-backfill"} {
		rep := run(t, s, 1, p)
		r := rep.Results[0]
		// job 1 is "small": it arrived at 1 min and never got room
		if !r.Left[1] || r.Left[0] || r.Unstarted != 1 || r.Waits[1] != 2*time.Hour-time.Minute {
			t.Fatalf("%s: left %v, unstarted %d, wait %v; want the small job left waiting 1h59m", p, r.Left, r.Unstarted, r.Waits[1])
		}
		c, ok := rep.Class(r, "1vCPU/4G")
		if !ok || c.Left != 1 || c.Wait.N != 1 || c.Wait.P99 != 2*time.Hour-time.Minute {
			t.Fatalf("%s: class %+v", p, c)
		}
		if hog, _ := rep.Class(r, "4vCPU/16G"); hog.RunShare != 1 || math.Abs(hog.DemandShare-4*36000.0/(4*36000+60)) > 1e-9 {
			t.Fatalf("%s: hog run share %.4f, demand share %.6f", p, hog.RunShare, hog.DemandShare)
		}
	}
}

// The report shows the per-class, per-tenant and cost columns the arbiter
// is judged by (issue 15), in the text and in the HTML page.
func TestReportShowsTheJudgedFigures(t *testing.T) {
	s := load(t, "push-burst")
	rep := run(t, s, 1, "vk", "quota-margin")
	var b bytes.Buffer
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	txt := b.String()
	for _, want := range []string{"race-lost", "req/job", "held-idle", "by size class", "demand share", " left ", "16vCPU/64G", "wide", "narrow", "Jain's index over share/weight"} {
		if !strings.Contains(txt, want) {
			t.Errorf("text report lacks %q", want)
		}
	}
	var h bytes.Buffer
	if err := rep.WriteHTML(&h); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(h.String(), "by size class") {
		t.Error("HTML report lacks the size-class table")
	}
	// quota-margin's quota rejections are capacity races; vk has none
	for _, r := range rep.Results {
		if r.Policy == "quota-margin" && r.RaceLost() != r.Failed[FailQuotaRejected] {
			t.Errorf("%s: race-lost %d, quota rejections %d", r.Label, r.RaceLost(), r.Failed[FailQuotaRejected])
		}
		if r.Policy == "vk" && (r.RaceLost() != 0 || r.RequestsPerStart() < 1) {
			t.Errorf("vk: race-lost %d, %.2f requests per job", r.RaceLost(), r.RequestsPerStart())
		}
	}
}

// Jain's index: 1 when vCPU·s follow the weights, 1/n when one tenant
// got everything.
func TestJain(t *testing.T) {
	ts := []TenantSpec{{Weight: 1}, {Weight: 3}}
	both := []bool{true, true}
	for _, c := range []struct {
		cpu  []float64
		want float64
	}{
		{[]float64{25, 75}, 1},
		{[]float64{100, 0}, 0.5},
		{[]float64{0, 100}, 0.5},
		{[]float64{0, 0}, 0},
	} {
		if got := jain(c.cpu, ts, both); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("jain(%v) = %v, want %v", c.cpu, got, c.want)
		}
	}
	if got := jain([]float64{10, 0}, ts, []bool{true, false}); got != 1 {
		t.Errorf("a tenant without jobs counts: %v", got)
	}
}

// The measurements agree with one another on any small fleet and workload:
// every job is started, failed or left waiting; a wait is given exactly
// for the jobs that arrived after the warmup and did not fail, and a job
// left waiting has waited to the end of the drain; the size classes'
// shares of run and of demanded vCPU·s each add up to one; the tenants'
// and the templates' vCPU·s are the same total, utilization's.
//
// spec: BS-18
func TestMeasurementProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		dur := time.Duration(rapid.IntRange(10, 90).Draw(t, "mins")) * time.Minute
		s := &Scenario{Name: "p", Duration: Duration{dur},
			Warmup:  Duration{time.Duration(rapid.Int64Range(0, int64(dur)-1).Draw(t, "warmup"))},
			Drain:   Duration{time.Duration(rapid.IntRange(1, 60).Draw(t, "drain")) * time.Minute},
			Tenants: []TenantSpec{{Name: "a", Weight: 1}, {Name: "b", Weight: rapid.IntRange(1, 4).Draw(t, "wb")}}}
		cpus := rapid.SampledFrom([]int{8, 16, 32}).Draw(t, "node cpus")
		s.Nodes = []NodeTemplate{{Count: rapid.IntRange(1, 4).Draw(t, "nodes"), CPUs: cpus, MemGiB: 4 * cpus}}
		for i := range rapid.IntRange(1, 3).Draw(t, "templates") {
			c := rapid.IntRange(1, cpus).Draw(t, "cpus")
			j := JobTemplate{Name: itoa(i), Tenant: rapid.SampledFrom([]string{"a", "b"}).Draw(t, "tenant"), CPUs: c, MemGiB: 4 * c,
				PerHour: rapid.Float64Range(1, 200).Draw(t, "rate"),
				Runtime: Dist{Kind: "shifted-exp", Shift: Duration{time.Minute}, Mean: Duration{time.Duration(rapid.IntRange(1, 30).Draw(t, "mean")) * time.Minute}}}
			s.Jobs = append(s.Jobs, j)
		}
		s.defaults()
		if err := s.validate(); err != nil {
			t.Fatalf("generated an invalid scenario: %v", err)
		}
		pol := rapid.SampledFrom([]string{"vk", "greedy-backfill", "pull-fifo", "accept-then-wait"}).Draw(t, "policy")
		rep, err := Run(context.Background(), Options{Scenario: s, Seed: rapid.Uint64Range(1, 1<<40).Draw(t, "seed"), Policies: []string{pol}})
		if err != nil {
			t.Fatal(err)
		}
		r := rep.Results[0]
		if r.Started+r.FailedTotal()+r.Unstarted != rep.Jobs {
			t.Fatalf("started %d + failed %d + unstarted %d != %d jobs", r.Started, r.FailedTotal(), r.Unstarted, rep.Jobs)
		}
		left, unmeasured := 0, 0
		for j, w := range r.Waits {
			job := rep.jobs[j]
			if r.Left[j] {
				left++
			}
			switch {
			case job.Arrive < s.Warmup.Duration:
				if w != -1 {
					t.Fatalf("job %d arrived at %v in the warmup (%v) with wait %v", j, job.Arrive, s.Warmup.Duration, w)
				}
			case r.Left[j]:
				if w != s.Duration.Duration+s.Drain.Duration-job.Arrive {
					t.Fatalf("job %d left waiting: wait %v, want to the end of the drain", j, w)
				}
			case w < 0:
				unmeasured++ // must have failed
			}
		}
		if unmeasured > r.FailedTotal() {
			t.Fatalf("%d measured jobs without a wait, %d failed", unmeasured, r.FailedTotal())
		}
		if left != r.Unstarted {
			t.Fatalf("%d jobs marked left, %d unstarted", left, r.Unstarted)
		}
		var run, demand float64
		for _, c := range rep.Classes(r) {
			if c.CPUs > 0 {
				run += c.RunShare
				demand += c.DemandShare
			}
		}
		var tenants, templates float64
		for _, c := range r.TenantCPUSecs {
			tenants += c
		}
		for _, c := range r.TemplateCPUSecs {
			templates += c
		}
		if templates > 0 && math.Abs(run-1) > 1e-9 {
			t.Fatalf("run shares add up to %v", run)
		}
		if slices.ContainsFunc(r.TemplateDemandCPUSecs, func(x float64) bool { return x > 0 }) && math.Abs(demand-1) > 1e-9 {
			t.Fatalf("demand shares add up to %v", demand)
		}
		measured := (s.Duration.Duration - s.Warmup.Duration).Seconds()
		if math.Abs(tenants-templates) > 1e-6*max(1, tenants) || math.Abs(r.Util*float64(rep.CPUs)*measured-tenants) > 1e-6*max(1, tenants) || r.Util > 1+1e-9 {
			t.Fatalf("tenants ran %v vCPU·s, templates %v, utilization %v of %d vCPU over %v s", tenants, templates, r.Util, rep.CPUs, measured)
		}
		if f := rep.HeldIdleFraction(r); f < 0 || f > 1 {
			t.Fatalf("held idle %v of capacity", f)
		}
	})
}
