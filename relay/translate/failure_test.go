package translate

import (
	"testing"

	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/relay/gitlab"
)

// The failure kinds relay/gitlab maps are exactly proto/client's
// JobResult.failure values, so every failure a node reports has its
// GitLab failure reason.
// spec: FAIL-02, FAIL-03, FAIL-04, FAIL-05, FAIL-06, FAIL-07, FAIL-08, FAIL-09, FAIL-10, FAIL-11
func TestFailureKindsMatchProto(t *testing.T) {
	pairs := []struct {
		relay  string
		proto  client.Failure
		reason string
	}{
		{gitlab.FailureScript, client.FailureScript, "script_failure"},
		{gitlab.FailureTimeout, client.FailureTimeout, "job_execution_timeout"},
		{gitlab.FailureImagePull, client.FailureImagePull, "image_pull_failure"},
		{gitlab.FailureConfiguration, client.FailureConfiguration, "runner_configuration_error"},
		{gitlab.FailureExternalDependency, client.FailureExternalDependency, "runner_external_dependency_failure"},
		{gitlab.FailureSystem, client.FailureSystem, "runner_system_failure"},
		{gitlab.FailureInterrupted, client.FailureInterrupted, "runner_interrupted"},
		{gitlab.FailureCanceled, client.FailureCanceled, "unknown_failure"},
		{gitlab.FailureNoCapacity, client.FailureNoCapacity, "runner_system_failure"},
		{gitlab.FailureLost, client.FailureLost, "runner_system_failure"},
		{"other", client.FailureOther, "runner_system_failure"},
	}
	for _, p := range pairs {
		if p.relay != string(p.proto) {
			t.Errorf("relay/gitlab kind %q != proto/client %q", p.relay, p.proto)
		}
		if got := gitlab.FailureReasonFor(string(p.proto)); got != p.reason {
			t.Errorf("FailureReasonFor(%q) = %q, want %q", p.proto, got, p.reason)
		}
	}
}
