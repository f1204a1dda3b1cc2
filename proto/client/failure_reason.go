package client

// GitLab failure_reason values vk sends (FAIL-02..12).
const (
	GitLabScriptFailure            = "script_failure"
	GitLabJobExecutionTimeout      = "job_execution_timeout"
	GitLabImagePullFailure         = "image_pull_failure"
	GitLabRunnerConfigurationError = "runner_configuration_error"
	GitLabRunnerExternalDependency = "runner_external_dependency_failure"
	GitLabRunnerSystemFailure      = "runner_system_failure"
	GitLabRunnerInterrupted        = "runner_interrupted"
	GitLabUnknownFailure           = "unknown_failure"
)

// GitLabReason returns the failure_reason GitLab should get for f, before
// the older-GitLab fallback (the spec's failure table). Success ("") and
// FailureOther map to "" and unknown_failure.
func (f Failure) GitLabReason() string {
	switch f {
	case "":
		return ""
	case FailureScript:
		return GitLabScriptFailure
	case FailureTimeout:
		return GitLabJobExecutionTimeout
	case FailureImagePull:
		return GitLabImagePullFailure
	case FailureConfiguration:
		return GitLabRunnerConfigurationError
	case FailureExternalDependency:
		return GitLabRunnerExternalDependency
	case FailureSystem, FailureNoCapacity, FailureLost:
		return GitLabRunnerSystemFailure
	case FailureInterrupted:
		return GitLabRunnerInterrupted
	case FailureCanceled:
		return GitLabUnknownFailure // GitLab keeps the job canceled (FAIL-09)
	}
	return GitLabUnknownFailure
}

// alwaysSupported are the reasons gitlab-runner's mapper treats as known
// to every GitLab.
var alwaysSupported = []string{GitLabScriptFailure, GitLabRunnerSystemFailure, GitLabJobExecutionTimeout}

// fallback is gitlab-runner 19.5's compatibility chain
// (common/failure_reason_mapper.go).
var fallback = map[string]string{
	GitLabImagePullFailure:         GitLabRunnerSystemFailure,
	GitLabRunnerConfigurationError: GitLabScriptFailure,
	GitLabRunnerExternalDependency: GitLabRunnerSystemFailure,
}

// MapGitLabFailureReason adapts reason to a GitLab whose job response
// listed supported (features.failure_reasons) exactly as gitlab-runner
// 19.5's failure_reason_mapper does (FAIL-12, DECISIONS 7): empty becomes
// script_failure; a supported reason (or one of script_failure,
// runner_system_failure, job_execution_timeout) is kept; otherwise the
// compatibility chain is followed (at most 10 hops) to a supported reason;
// otherwise unknown_failure.
func MapGitLabFailureReason(reason string, supported []string) string {
	if reason == "" {
		return GitLabScriptFailure
	}
	ok := func(r string) bool {
		for _, s := range alwaysSupported {
			if s == r {
				return true
			}
		}
		for _, s := range supported {
			if s == r {
				return true
			}
		}
		return false
	}
	for hops := 0; hops <= 10; hops++ {
		if ok(reason) {
			return reason
		}
		next, has := fallback[reason]
		if !has {
			break
		}
		reason = next
	}
	return GitLabUnknownFailure
}
