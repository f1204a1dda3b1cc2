package testfleet_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/testfleet"
	"github.com/vk-ci/vk/proto/client"
)

var pickupFull = flag.Bool("pickup", false, "TestE2EPickupLatency: idle spells of 60 s, three of them, and 30 busy jobs (about 8 min); off, one 10 s spell and 8 jobs")

// TestE2EPickupLatency measures pick-up latency on a fleet of the real
// hub, node and relays against the fake GitLab: from a job becoming
// pending in GitLab to GitLab's 201 handing it to a relay. It is a test
// with a report: it prints the latencies (p50, p99, max) of jobs arriving
// every 1-2 s and of the first job after an idle spell, and the GitLab job
// requests each runner sent per idle minute, once with GitLab's long
// polling off (Workhorse's default) and once at 50 s (the figure GitLab's
// docs recommend). The goal it reports on is issue 15's: p50 ≤ 0.5 s and
// p99 ≤ 2 s in both, while an idle runner sends GitLab at most one job
// request a second (gitlab-runner's check_interval = 1).
//
// Latencies depend on the machine's load, so it asserts only what timing
// cannot break: every job is handed out and succeeds, and an idle runner
// sends at most one request per 0.75 s (the lead request's interval less
// its jitter, DECISIONS 14) plus its request loops' first round. With
// -pickup the spells last 60 s, as the goal states; without it, 10 s.
//
// spec: ARB-18, ARB-20, ARB-21
func TestE2EPickupLatency(t *testing.T) {
	for _, lp := range []time.Duration{0, 50 * time.Second} {
		name := "long-poll-off"
		if lp > 0 {
			name = "long-poll-" + lp.String()
		}
		t.Run(name, func(t *testing.T) { pickupRun(t, lp) })
	}
}

// pickupTenants is how many tenants (each its own GitLab, relay and
// runner) go idle together, so one idle spell yields that many samples.
const pickupTenants = 4

func pickupRun(t *testing.T, longPoll time.Duration) {
	idle, spells, busyJobs := 10*time.Second, 1, 8
	if *pickupFull {
		idle, spells, busyJobs = 60*time.Second, 3, 30
	}
	env := client.Envelope{CPUs: 1, Mem: 256 << 20, Disk: 1 << 30}
	var tenants []testfleet.TenantSpec
	for i := range pickupTenants {
		tenants = append(tenants, testfleet.TenantSpec{Name: fmt.Sprintf("t%d", i+1), Envelope: env,
			RequestConcurrency: 4, Concurrent: 8, GitLab: gitlabfake.Options{LongPoll: longPoll}})
	}
	f := newFleet(t, testfleet.Options{
		Nodes:   []testfleet.NodeSpec{{CPUs: 8, Mem: 8 << 30, MaxConcurrency: 8}},
		Tenants: tenants,
		// production's backoff (ARB-21: 1 s doubling to 60 s), not the
		// fleet's 2 s test default
		Policy: admin.Policy{BackoffInitialSecs: 1, BackoffMaxSecs: 60},
	})
	ctx := timeout(t, time.Duration(spells)*(idle+time.Minute)+time.Duration(busyJobs)*4*time.Second+3*time.Minute)
	rng := rand.New(rand.NewPCG(15, uint64(longPoll)))
	gap := func() time.Duration { return time.Second + time.Duration(rng.Int64N(int64(time.Second))) }

	// pickup creates a one-job pipeline on tn and returns the job's ID
	// and when it was created (an upper bound of when it became pending).
	type sample struct {
		tn    *testfleet.Tenant
		job   int64
		avail time.Time
	}
	var all []sample
	pickup := func(tn *testfleet.Tenant, name string) sample {
		at := time.Now()
		pl, err := tn.CreatePipeline("acme/pickup-"+tn.Spec.Name, readme, oneJob(name, "true"))
		if err != nil {
			t.Fatal(err)
		}
		s := sample{tn, pl.Jobs[name], at}
		all = append(all, s)
		return s
	}
	// waitTaken waits until GitLab handed s's job out.
	waitTaken := func(s sample) {
		if _, err := s.tn.GitLab.WaitJobState(ctx, s.job, gitlabfake.StateRunning, gitlabfake.StateSuccess, gitlabfake.StateFailed); err != nil {
			t.Fatalf("%s job %d was not handed out: %v", s.tn.Spec.Name, s.job, err)
		}
	}

	// Warm-up: each tenant's project exists and its runner has run a job.
	for _, tn := range f.Tenants() {
		waitTaken(pickup(tn, "warm"))
	}

	// Busy: jobs arriving every 1-2 s on one runner.
	var busy []sample
	busyTn := f.Tenants()[0]
	for i := range busyJobs {
		busy = append(busy, pickup(busyTn, fmt.Sprintf("busy%02d", i)))
		sleepCtx(t, ctx, gap())
	}
	for _, s := range busy {
		waitTaken(s)
	}

	// Idle spells: every runner idle for the spell, then one job per
	// tenant, 1-2 s apart. Requests are counted from 5 s into the spell
	// (the last jobs' own requests and their loops' round are over).
	var idle1st []sample
	var perMin []float64
	for sp := range spells {
		from := time.Now().Add(5 * time.Second)
		sleepCtx(t, ctx, idle)
		to := time.Now()
		for _, tn := range f.Tenants() {
			n := 0
			for _, r := range tn.GitLab.RequestsTo(gitlabfake.RouteJobRequest) {
				if !r.At.Before(from) && r.At.Before(to) {
					n++
				}
			}
			window := to.Sub(from)
			perMin = append(perMin, float64(n)*float64(time.Minute)/float64(window))
			// the lead request's interval is at least 0.75 s; the
			// request loops' first round after the last job adds at
			// most request_concurrency
			if limit := int(window/(750*time.Millisecond)) + 4; n > limit {
				t.Errorf("spell %d: %s sent GitLab %d job requests in %v of idle, want at most %d", sp+1, tn.Spec.Name, n, window.Round(time.Second), limit)
			}
		}
		var spell []sample
		for i, tn := range f.Tenants() {
			if i > 0 {
				sleepCtx(t, ctx, gap())
			}
			spell = append(spell, pickup(tn, fmt.Sprintf("idle%d", sp)))
		}
		for _, s := range spell {
			waitTaken(s)
		}
		idle1st = append(idle1st, spell...)
	}

	for _, s := range all {
		if st, err := s.tn.GitLab.WaitJobState(ctx, s.job, gitlabfake.StateSuccess, gitlabfake.StateFailed); err != nil || st != gitlabfake.StateSuccess {
			t.Errorf("%s job %d ended %s (%v)", s.tn.Spec.Name, s.job, st, err)
		}
	}
	// A job is handed out by a 201 to a job request; the fake hands out
	// a tenant's pending jobs lowest ID first, and this test's jobs of a
	// tenant were created in that order, so its n-th 201 took its n-th
	// job. The request log's time is the request's arrival, when the
	// fake picks the job (a held long poll ends in a 204, never a 201).
	type key struct {
		tn  *testfleet.Tenant
		job int64
	}
	taken := map[key]time.Time{} // job IDs are per GitLab: keyed by tenant too
	for _, tn := range f.Tenants() {
		var ids []int64
		for _, s := range all {
			if s.tn == tn {
				ids = append(ids, s.job)
			}
		}
		slices.Sort(ids)
		i := 0
		for _, r := range tn.GitLab.RequestsTo(gitlabfake.RouteJobRequest) {
			if r.Status == http.StatusCreated && i < len(ids) {
				taken[key{tn, ids[i]}] = r.At
				i++
			}
		}
		if i != len(ids) {
			t.Fatalf("%s: %d jobs handed out, want %d", tn.Spec.Name, i, len(ids))
		}
	}
	lat := func(ss []sample) []time.Duration {
		var out []time.Duration
		for _, s := range ss {
			out = append(out, taken[key{s.tn, s.job}].Sub(s.avail))
		}
		return out
	}
	busyLat, idleLat := lat(busy), lat(idle1st)
	t.Logf("pick-up latency, job pending in GitLab → 201, GitLab long poll %v:\n%s", longPoll, strings.Join([]string{
		fmt.Sprintf("  jobs every 1-2 s:        %s", latencyLine(busyLat)),
		fmt.Sprintf("  after %v idle:           %s", idle, latencyLine(idleLat)),
		fmt.Sprintf("  job requests per runner per idle minute: %s", perMinLine(perMin)),
	}, "\n"))
}

// latencyLine is "n N  p50 X  p99 Y  max Z" of ds.
func latencyLine(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	q := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return fmt.Sprintf("n %d  p50 %v  p99 %v  max %v", len(s), q(0.5).Round(time.Millisecond),
		q(0.99).Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
}

func perMinLine(v []float64) string {
	lo, hi := slices.Min(v), slices.Max(v)
	return fmt.Sprintf("%.1f-%.1f (goal: at most 60)", lo, hi)
}

// sleepCtx lets d pass (the workload's own pacing: arrivals 1-2 s apart,
// an idle spell), failing the test if ctx ends first.
func sleepCtx(t *testing.T, ctx context.Context, d time.Duration) {
	t.Helper()
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
	case <-ctx.Done():
		t.Fatalf("ran out of time: %v", ctx.Err())
	}
}
