package sim

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"
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
