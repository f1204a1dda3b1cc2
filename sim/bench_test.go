package sim

import (
	"context"
	"testing"
	"time"
)

// benchScenario is 1,000 32-vCPU nodes for 24 h of virtual time at about
// 75% load: three tenants, 1-4 vCPU jobs of 4-14 minutes (seed 003's
// "mean runtime of a few minutes"), about 1.9 million jobs.
const benchHours = 24

func benchScenario() *Scenario {
	s := &Scenario{
		Name:     "bench-1000x24h",
		Duration: Duration{benchHours * time.Hour},
		Drain:    Duration{time.Hour},
		Nodes:    []NodeTemplate{{Name: "amd32", Count: 1000, CPUs: 32, MemGiB: 128}},
		Tenants:  []TenantSpec{{Name: "a", Weight: 2}, {Name: "b"}, {Name: "c"}},
		Jobs: []JobTemplate{
			{Name: "lint", Tenant: "a", CPUs: 1, MemGiB: 4, PerHour: 36000, Runtime: Dist{Kind: "shifted-exp", Shift: Duration{time.Minute}, Mean: Duration{3 * time.Minute}}},
			{Name: "build", Tenant: "a", CPUs: 4, MemGiB: 16, PerHour: 12000, Runtime: Dist{Kind: "lognormal", Median: Duration{10 * time.Minute}, Sigma: 0.5}},
			{Name: "test", Tenant: "b", CPUs: 2, MemGiB: 8, PerHour: 24000, Runtime: Dist{Kind: "shifted-exp", Shift: Duration{2 * time.Minute}, Mean: Duration{6 * time.Minute}}},
			{Name: "e2e", Tenant: "c", CPUs: 4, MemGiB: 16, PerHour: 6000, Runtime: Dist{Kind: "lognormal", Median: Duration{12 * time.Minute}, Sigma: 0.5}},
		},
	}
	s.GitLab.LongPoll = Duration{50 * time.Second}
	s.VK.RequestConcurrency = 16
	s.defaults()
	if err := s.validate(); err != nil {
		panic(err)
	}
	return s
}

// BenchmarkSim1000Nodes24h runs the vk policy (the real sched core) on
// 1,000 nodes for 24 h of virtual time. Target: under a minute per op.
// Reports jobs, virtual-to-wall speed-up and the core's decisions per
// wall second.
//
// spec: BS-18, BS-03, BS-04
func BenchmarkSim1000Nodes24h(b *testing.B) {
	s := benchScenario()
	for b.Loop() {
		t0 := time.Now()
		rep, err := Run(context.Background(), Options{Scenario: s, Policies: []string{"vk"}})
		if err != nil {
			b.Fatal(err)
		}
		wall := time.Since(t0)
		r := rep.Results[0]
		b.ReportMetric(float64(rep.Jobs), "jobs")
		b.ReportMetric(r.Util, "util")
		b.ReportMetric(float64(r.Events), "events")
		b.ReportMetric(r.DecisionsPerSec(), "core-steps/s")
		b.ReportMetric((s.Duration.Duration+s.Drain.Duration).Seconds()/wall.Seconds(), "virtual/wall")
	}
}
