package gitlab

import (
	"encoding/json"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// currentReasons is what a current GitLab lists (fixtures/gitlab/failure_reasons.json).
func currentReasons(t *testing.T) []string {
	t.Helper()
	var r []string
	if err := json.Unmarshal(readFixture(t, "failure_reasons.json"), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// The seed's failure table: each vk failure kind, on a GitLab listing every
// reason a runner produces, on a current GitLab (Rails' enum in
// failure_reasons.json, which has no image_pull_failure: the mapper then
// falls back, as gitlab-runner 19.5 does — DECISIONS 7), and on an older
// one that lists only the always-supported reasons.
// spec: FAIL-01, FAIL-02, FAIL-03, FAIL-04, FAIL-05, FAIL-06, FAIL-07, FAIL-08, FAIL-09, FAIL-10, FAIL-11, FAIL-12
func TestFailureReasonTable(t *testing.T) {
	current := currentReasons(t)
	newest := append(slices.Clone(current), ReasonImagePullFailure)
	older := []string{"unknown_failure", "script_failure", "runner_system_failure", "job_execution_timeout"}
	tests := []struct {
		failure                string
		newest, current, older string
	}{
		{"", "", "", ""}, // success sends no failure_reason (FAIL-01)
		{FailureScript, "script_failure", "script_failure", "script_failure"},
		{FailureTimeout, "job_execution_timeout", "job_execution_timeout", "job_execution_timeout"},
		{FailureImagePull, "image_pull_failure", "runner_system_failure", "runner_system_failure"},
		{FailureConfiguration, "runner_configuration_error", "runner_configuration_error", "script_failure"},
		{FailureExternalDependency, "runner_external_dependency_failure", "runner_external_dependency_failure", "runner_system_failure"},
		{FailureSystem, "runner_system_failure", "runner_system_failure", "runner_system_failure"},
		{FailureInterrupted, "runner_interrupted", "runner_interrupted", "unknown_failure"},
		{FailureCanceled, "unknown_failure", "unknown_failure", "unknown_failure"},
		{FailureNoCapacity, "runner_system_failure", "runner_system_failure", "runner_system_failure"},
		{FailureLost, "runner_system_failure", "runner_system_failure", "runner_system_failure"},
		{"other", "runner_system_failure", "runner_system_failure", "runner_system_failure"},
		{"from_a_newer_node", "runner_system_failure", "runner_system_failure", "runner_system_failure"},
	}
	for _, tt := range tests {
		reason := FailureReasonFor(tt.failure)
		if tt.failure == "" {
			if reason != "" {
				t.Errorf("FailureReasonFor(success) = %q, want none", reason)
			}
			continue
		}
		if got := MapFailureReason(reason, newest); got != tt.newest {
			t.Errorf("%s on a GitLab listing it = %q, want %q", tt.failure, got, tt.newest)
		}
		if got := MapFailureReason(reason, current); got != tt.current {
			t.Errorf("%s on current GitLab = %q, want %q", tt.failure, got, tt.current)
		}
		if got := MapFailureReason(reason, older); got != tt.older {
			t.Errorf("%s on older GitLab = %q, want %q", tt.failure, got, tt.older)
		}
		if got := MapFailureReason(reason, nil); got != tt.older {
			t.Errorf("%s on a GitLab listing nothing = %q, want %q", tt.failure, got, tt.older)
		}
	}
}

// Port of gitlab-runner's common/failure_reason_mapper_test.go
// TestFailureReasonMapper_Map, with its own supported set, compatibility
// map and depth 3.
// spec: FAIL-12
func TestFailureReasonMapper_Map(t *testing.T) {
	const (
		frOne, frTwo, frThree, frFour = "fr_one", "fr_two", "fr_three", "fr_four"
		frFive, frSix, frSeven        = "fr_five", "fr_six", "fr_seven"
		frEight                       = "fr_eight"
		frLoopOne, frLoopTwo          = "fr_loop_one", "fr_loop_two"
		frLoopThree, frLoopFour       = "fr_loop_three", "fr_loop_four"
		frTotallyUnknown              = "fr_totally_unknown"
		maxDepth                      = 3
	)
	supported := []string{frOne, frTwo}
	compat := map[string]string{
		frThree: frOne, frFive: frFour, frFour: frTwo, frSeven: frSix, frEight: frSeven,
		frLoopOne: frLoopOne, frLoopFour: frLoopThree, frLoopThree: frLoopTwo, frLoopTwo: frLoopThree,
	}
	m := func(r string) string { return mapFailureReason(r, supported, compat, maxDepth) }
	tests := []struct {
		name string
		in   []string
		want []string
	}{
		{"default failure", []string{""}, []string{ReasonScriptFailure}},
		{"always supported by GitLab",
			[]string{ReasonScriptFailure, ReasonRunnerSystemFailure, ReasonJobExecutionTimeout},
			[]string{ReasonScriptFailure, ReasonRunnerSystemFailure, ReasonJobExecutionTimeout}},
		{"optionally supported by GitLab", []string{frOne, frTwo}, []string{frOne, frTwo}},
		{"unsupported by GitLab", []string{frSix}, []string{ReasonUnknownFailure}},
		{"new directly mapped to older supported by GitLab", []string{frThree, frFour}, []string{frOne, frTwo}},
		{"new indirectly mapped to older supported by GitLab", []string{frFive}, []string{frTwo}},
		{"directly mapped to unsupported by GitLab", []string{frSeven}, []string{ReasonUnknownFailure}},
		{"indirectly mapped to unsupported by GitLab", []string{frEight}, []string{ReasonUnknownFailure}},
		{"totally unknown reason", []string{frTotallyUnknown}, []string{ReasonUnknownFailure}},
		{"endless direct loop", []string{frLoopOne}, []string{ReasonUnknownFailure}},
		{"endless indirect loop", []string{frLoopFour}, []string{ReasonUnknownFailure}},
	}
	for _, tt := range tests {
		for i, in := range tt.in {
			if got := m(in); got != tt.want[i] {
				t.Errorf("%s: Map(%q) = %q, want %q", tt.name, in, got, tt.want[i])
			}
		}
	}
}

// Port of TestFailureReasonsCompatibilityMap: the real map has no loop and
// every reason a runner produces maps to something every GitLab knows.
// spec: FAIL-12
func TestFailureReasonsCompatibilityMap(t *testing.T) {
	all := []string{ReasonScriptFailure, ReasonRunnerSystemFailure, ReasonJobExecutionTimeout,
		ReasonImagePullFailure, ReasonUnknownFailure, ReasonRunnerConfigurationError,
		ReasonRunnerExternalDependencyFailure, ReasonRunnerInterrupted}
	for _, r := range all {
		// Follow the chain by hand: it must end within the hop limit.
		seen := map[string]bool{}
		for cur := r; ; {
			next, ok := reasonFallback[cur]
			if !ok {
				break
			}
			if seen[next] || len(seen) >= maxFallbackHops {
				t.Fatalf("fallback chain from %q loops or exceeds %d hops", r, maxFallbackHops)
			}
			seen[next] = true
			cur = next
		}
		got := MapFailureReason(r, nil)
		if !slices.Contains(append(slices.Clone(alwaysSupportedReasons), ReasonUnknownFailure), got) {
			t.Errorf("MapFailureReason(%q, nil) = %q: not known to every GitLab", r, got)
		}
	}
}

// Property: the mapped reason is always the reason itself when supported,
// otherwise a supported reason or unknown_failure, and never empty.
// spec: FAIL-12
func TestMapFailureReasonProperty(t *testing.T) {
	pool := []string{"", ReasonScriptFailure, ReasonRunnerSystemFailure, ReasonJobExecutionTimeout,
		ReasonImagePullFailure, ReasonUnknownFailure, ReasonRunnerConfigurationError,
		ReasonRunnerExternalDependencyFailure, ReasonRunnerInterrupted, "api_failure", "x_new"}
	rapid.Check(t, func(t *rapid.T) {
		supported := rapid.SliceOf(rapid.SampledFrom(pool[1:])).Draw(t, "supported")
		reason := rapid.SampledFrom(pool).Draw(t, "reason")
		got := MapFailureReason(reason, supported)
		ok := func(r string) bool {
			return slices.Contains(supported, r) || slices.Contains(alwaysSupportedReasons, r)
		}
		switch {
		case got == "":
			t.Fatalf("empty reason sent")
		case reason != "" && ok(reason) && got != reason:
			t.Fatalf("supported %q mapped to %q", reason, got)
		case got != ReasonUnknownFailure && !ok(got):
			t.Fatalf("%q mapped to unsupported %q", reason, got)
		}
	})
}
