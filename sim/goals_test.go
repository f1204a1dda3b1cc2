package sim

import (
	"context"
	"testing"
	"time"
)

// The arbiter's goals (issue 15), each asserted on one seed of its goal
// scenario: the reference workloads shortened to a 2 h window with the
// first 30 min not measured (their drains kept), so the package's tests
// stay quick; the backlogged scenarios as they are (4 h, the first hour
// not measured), because shares drift over hours: on seed 1 tenant a's
// share is 25.7 % in the first 2 h and 29.3 % over the full run. The
// 5-seed table of the full scenarios is `vk-sim goals` (docs/sim.md), not
// a test.

// goalPolicies are the policies each short goal scenario runs.
var goalPolicies = map[string][]string{
	"reference-090":    {"vk", "pull-fifo", "accept-then-wait", "quota-margin", "k8s-lease", "greedy-backfill"},
	"reference-110":    {"vk", "greedy-backfill"},
	"both-backlogged":  {"vk", "pull-fifo", "greedy-backfill"},
	"sizes-backlogged": {"vk", "pull-fifo", "greedy-backfill"},
}

// goalReports memoizes the short runs: the goal tests share them.
var goalReports = map[string]*Report{}

// goalReport runs goal scenario name on seed 1, cut to 2 h when longer
// than the 4 h of the backlogged ones.
func goalReport(t *testing.T, name string) *Report {
	t.Helper()
	if rep := goalReports[name]; rep != nil {
		return rep
	}
	s := load(t, name)
	if s.Duration.Duration > 4*time.Hour {
		s.Duration.Duration, s.Warmup.Duration = 2*time.Hour, 30*time.Minute
	}
	rep, err := Run(context.Background(), Options{Scenario: s, Seed: 1, Policies: goalPolicies[name]})
	if err != nil {
		t.Fatal(err)
	}
	goalReports[name] = rep
	return rep
}

// Every vk run of the goal scenarios loses no job to a capacity race, and
// sched's invariants hold after every step. Checking them after every
// step is slow (some 50 µs a step), so that part runs the first 10 min of
// each scenario: start-up, the fleet filling, the first wide jobs, and
// with the backlogged scenarios a full fleet and a growing backlog.
// `vk-sim goals --check-invariants` checks the full runs.
//
// spec: ARB-01, BS-06
func TestGoalNoRacesAndInvariantsHold(t *testing.T) {
	for _, name := range GoalScenarios {
		t.Run(name, func(t *testing.T) {
			if vk := result(t, goalReport(t, name), "vk"); vk.RaceLost() != 0 {
				t.Errorf("%d jobs lost to capacity races (%v)", vk.RaceLost(), vk.Failed)
			}
			s := load(t, name)
			s.Duration.Duration, s.Warmup.Duration, s.Drain.Duration = 10*time.Minute, 0, time.Second
			rep, err := Run(context.Background(), Options{Scenario: s, Seed: 1, Policies: []string{"vk"}, CheckInvariants: true})
			if err != nil {
				t.Fatal(err)
			}
			vk := result(t, rep, "vk")
			if len(vk.Invariants) > 0 {
				t.Errorf("%d invariant violations, first: %s", len(vk.Invariants), vk.Invariants[0])
			}
			if vk.RaceLost() != 0 || vk.CoreSteps < 10_000 {
				t.Errorf("%d jobs lost to capacity races in %d core steps", vk.RaceLost(), vk.CoreSteps)
			}
		})
	}
}

func goalClass(t *testing.T, rep *Report, r *Result, class string) ClassStats {
	t.Helper()
	c, ok := rep.Class(r, class)
	if !ok {
		t.Fatalf("%s: no class %q", rep.Scenario.Name, class)
	}
	return c
}

// At 0.9 of capacity the widest jobs, a whole node each, start within
// five minutes at the 99th percentile: the arbiter makes room for them
// without preempting or draining broadly.
//
// spec: BS-20, BS-22
func TestGoal090WideJobsServed(t *testing.T) {
	rep := goalReport(t, "reference-090")
	c := goalClass(t, rep, result(t, rep, "vk"), "32vCPU/128G")
	if c.Wait.P99 > 300*time.Second {
		t.Errorf("32-vCPU p99 wait %v, want ≤ 300 s (p50 %v, p95 %v, %d left waiting)", c.Wait.P99, c.Wait.P50, c.Wait.P95, c.Left)
	}
}

// At 0.9 of capacity narrow jobs (2-8 vCPU) start within 10 s at the 95th
// percentile: no job waits on a backoff it did not cause.
//
// spec: ARB-18, ARB-20
func TestGoal090NarrowJobsQuick(t *testing.T) {
	rep := goalReport(t, "reference-090")
	c := goalClass(t, rep, result(t, rep, "vk"), "narrow")
	if c.Wait.P95 > 10*time.Second {
		t.Errorf("narrow p95 wait %v, want ≤ 10 s (p50 %v, p99 %v)", c.Wait.P95, c.Wait.P50, c.Wait.P99)
	}
}

// At 0.9 of capacity no job fails and none is left waiting when the drain
// ends, and the fleet runs at least 88 % busy.
//
// spec: ARB-01, BS-20
func TestGoal090CarriesTheLoad(t *testing.T) {
	rep := goalReport(t, "reference-090")
	vk := result(t, rep, "vk")
	if vk.FailedTotal() != 0 || vk.Unstarted != 0 {
		t.Errorf("vk failed %v and left %d waiting, want none", vk.Failed, vk.Unstarted)
	}
	if vk.Util < 0.88 {
		t.Errorf("utilization %.1f%%, want ≥ 88%%", 100*vk.Util)
	}
}

// vk beats the baselines that fail no job (pull-fifo, greedy-backfill) on
// wide-job p99 at 0.9 and on fairness with both tenants backlogged, and
// fails none where the Kubernetes baselines fail many.
//
// spec: BS-18, BS-20, BS-28
func TestGoalBeatsTheBaselines(t *testing.T) {
	rep := goalReport(t, "reference-090")
	vk := result(t, rep, "vk")
	wide := goalClass(t, rep, vk, "32vCPU/128G").Wait.P99
	for _, l := range []string{"pull-fifo", "greedy-backfill"} {
		b := result(t, rep, l)
		if bw := goalClass(t, rep, b, "32vCPU/128G").Wait.P99; wide >= bw {
			t.Errorf("32-vCPU p99 wait %v, not below %s's %v", wide, l, bw)
		}
	}
	if vk.FailedTotal() != 0 {
		t.Errorf("vk failed %v", vk.Failed)
	}
	for _, r := range rep.Results {
		if r.Policy != "vk" && r.Policy != "pull-fifo" && r.Policy != "greedy-backfill" && r.FailedTotal() < 100 {
			t.Errorf("%s failed only %d jobs; the comparison expects the Kubernetes baselines to fail many", r.Label, r.FailedTotal())
		}
	}
	for _, name := range []string{"both-backlogged", "sizes-backlogged"} {
		rep := goalReport(t, name)
		j := result(t, rep, "vk").Jain
		for _, l := range []string{"pull-fifo", "greedy-backfill"} {
			if bj := result(t, rep, l).Jain; j <= bj {
				t.Errorf("%s: Jain's index %.3f, not above %s's %.3f", name, j, l, bj)
			}
		}
	}
}

// Reservations held idle (granted, not yet running a job) stay at most 2 %
// of the fleet's capacity at 0.9 and 1.1.
//
// spec: ARB-01, ARB-28
func TestGoalIdleReservations(t *testing.T) {
	for _, name := range []string{"reference-090", "reference-110"} {
		rep := goalReport(t, name)
		if f := rep.HeldIdleFraction(result(t, rep, "vk")); f > 0.02 {
			t.Errorf("%s: reservations held idle %.2f%% of the fleet's capacity, want ≤ 2%%", name, 100*f)
		}
	}
}

// With tenant a (weight 1) sending only 2-vCPU jobs and tenant b (weight
// 3) only 8-vCPU jobs, both backlogged, each gets its weight's share of
// the busy vCPU·s within 5 % (a 25 % ± 1.25 points), Jain's index ≥ 0.99:
// fairness drains keep the freed 2-vCPU pieces from all going to a.
//
// spec: ARB-09, ARB-10, BS-28
func TestGoalWeightedShareSizes(t *testing.T) {
	rep := goalReport(t, "sizes-backlogged")
	vk := result(t, rep, "vk")
	sh, _ := rep.TenantShares(vk)
	if !withinShare(0.25)(sh[0], nil) || !withinShare(0.75)(sh[1], nil) || vk.Jain < 0.99 {
		t.Errorf("shares %.1f%% / %.1f%%, Jain %.3f; want 25/75 within 5%% and Jain ≥ 0.99", 100*sh[0], 100*sh[1], vk.Jain)
	}
}

// With the same job mix for both tenants, both backlogged, each gets its
// weight's share within 5 % and Jain's index ≥ 0.99 with the defaults an
// operator gets: vk-gitlab's request loops per runner (six,
// DefaultRequestConcurrency, the relay's own) keep a backlogged tenant's
// runners with a request waiting at the core when room frees. The core
// can only order the requests it has: with one loop, the relay's default
// before, tenant a took 47.5 %, with four 27.2 % (docs/capacity-policy.md,
// "Fair shares with the relay's defaults").
//
// spec: ARB-02, ARB-09, ARB-10, BS-28
func TestGoalWeightedShareSameMix(t *testing.T) {
	rep := goalReport(t, "both-backlogged")
	if c := rep.Scenario.VK.RequestConcurrency; c != DefaultRequestConcurrency {
		t.Fatalf("the scenario runs %d request loops per runner, want the default %d", c, DefaultRequestConcurrency)
	}
	vk := result(t, rep, "vk")
	sh, _ := rep.TenantShares(vk)
	if !withinShare(0.25)(sh[0], nil) || !withinShare(0.75)(sh[1], nil) || vk.Jain < 0.99 {
		t.Errorf("shares %.1f%% / %.1f%%, Jain %.3f; want 25/75 within 5%% and Jain ≥ 0.99", 100*sh[0], 100*sh[1], vk.Jain)
	}
}

// At 1.1 of capacity the fleet stays at least 97 % busy, and within a
// point of greedy-backfill's utilization: overload is no excuse for idle
// room (wide work keeps the whole nodes it frees, drains are few and
// kept).
//
// spec: BS-21, BS-22
func TestGoal110Utilization(t *testing.T) {
	rep := goalReport(t, "reference-110")
	vk, greedy := result(t, rep, "vk"), result(t, rep, "greedy-backfill")
	if vk.Util < 0.97 || vk.Util < greedy.Util-0.01 {
		t.Errorf("utilization %.1f%% (greedy-backfill %.1f%%), want ≥ 97%% and ≥ greedy-backfill's - 1 point", 100*vk.Util, 100*greedy.Util)
	}
}

// At 1.1 of capacity the overload is spread over every size: the 16- and
// 32-vCPU jobs get at least 0.9 of their share of the vCPU·s demanded.
//
// spec: BS-20, BS-22, BS-25
func TestGoal110OverloadSpread(t *testing.T) {
	rep := goalReport(t, "reference-110")
	c := goalClass(t, rep, result(t, rep, "vk"), "wide")
	if c.RunShare < 0.9*c.DemandShare {
		t.Errorf("wide jobs ran %.1f%% of the vCPU·s against %.1f%% demanded (%.2f), want ≥ 0.9 of it", 100*c.RunShare, 100*c.DemandShare, c.RunShare/c.DemandShare)
	}
}

// GitLab job requests, as ruled in docs/capacity-policy.md ("Ruling:
// GitLab requests are bounded per runner, not per job") in place of
// issue 15's "no more requests per job than vk before it" (2.26 at 0.9,
// 2.03 at 1.1), which no polling runner meets with narrow p95 ≤ 10 s:
// with GitLab's default (no long polling) a runner asks no more often
// than gitlab-runner with check_interval = 1 does, one request per
// second while it finds nothing, beyond one per job started.
//
// spec: ARB-18, ARB-20, ARB-21
func TestGoalGitLabRequestsBounded(t *testing.T) {
	for _, name := range []string{"reference-090", "reference-110"} {
		rep := goalReport(t, name)
		vk := result(t, rep, "vk")
		if r := rep.IdleRequestRate(vk); r > 1 {
			t.Errorf("%s: %.2f GitLab job requests per runner per second beyond one per job (%d requests, %d jobs, %.0f s), want ≤ 1",
				name, r, vk.GitLabRequests, vk.Started, vk.RunSecs)
		}
	}
}

// With GitLab's long polling on (Workhorse's api_ci_long_polling_duration
// = 50 s, what GitLab recommends and the ruling tells operators who want
// fewer GitLab requests to set), a job costs at most the three requests
// GitLab's protocol needs after an idle spell: the held request Workhorse
// answers 204 when the job arrives, the request Rails answers with it,
// and one empty answer that learns the runner's new queue version. And a
// job is still picked up at once: narrow p50 ≤ 0.5 s.
//
// spec: ARB-18, ARB-20, ARB-33
func TestGoalGitLabRequestsLongPoll(t *testing.T) {
	s := load(t, "reference-090")
	s.Duration.Duration, s.Warmup.Duration = 2*time.Hour, 30*time.Minute
	s.GitLab.LongPoll.Duration = 50 * time.Second
	rep, err := Run(context.Background(), Options{Scenario: s, Seed: 1, Policies: []string{"vk"}})
	if err != nil {
		t.Fatal(err)
	}
	vk := result(t, rep, "vk")
	if r := vk.RequestsPerStart(); r > 3 {
		t.Errorf("%.2f GitLab job requests per job started under long polling, want ≤ 3", r)
	}
	if c := goalClass(t, rep, vk, "narrow"); c.Wait.P50 > 500*time.Millisecond || c.Wait.P95 > 10*time.Second {
		t.Errorf("narrow wait p50 %v, p95 %v under long polling, want ≤ 0.5 s and ≤ 10 s", c.Wait.P50, c.Wait.P95)
	}
}
