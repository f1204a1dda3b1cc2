package sim

import (
	"context"
	"testing"
	"time"
)

// The arbiter's goals (issue 15), each asserted on one seed of a short
// version of its goal scenario: the same fleet and job mix, a 2 h window
// with the first 30 min not measured (the drains of the full scenarios
// kept), so the package's tests stay quick. The 5-seed table of the full
// scenarios is `vk-sim goals` (docs/sim.md), not a test.

// goalPolicies are the policies each short goal scenario runs.
var goalPolicies = map[string][]string{
	"reference-090":    {"vk", "pull-fifo", "accept-then-wait", "quota-margin", "k8s-lease", "greedy-backfill"},
	"reference-110":    {"vk", "greedy-backfill"},
	"both-backlogged":  {"vk", "pull-fifo", "greedy-backfill"},
	"sizes-backlogged": {"vk", "pull-fifo", "greedy-backfill"},
}

// goalReports memoizes the short runs: the goal tests share them.
var goalReports = map[string]*Report{}

// goalReport runs the short version of goal scenario name (seed 1).
func goalReport(t *testing.T, name string) *Report {
	t.Helper()
	if rep := goalReports[name]; rep != nil {
		return rep
	}
	s := load(t, name)
	s.Duration.Duration, s.Warmup.Duration = 2*time.Hour, 30*time.Minute
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
