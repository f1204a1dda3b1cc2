package gitlab

import "slices"

// GitLab failure reasons the relay sends (FAIL-01..11). GitLab knows many
// more (features.failure_reasons); these are the ones a runner produces.
const (
	ReasonScriptFailure                   = "script_failure"                     // a step exited non-zero
	ReasonRunnerSystemFailure             = "runner_system_failure"              // runner, node or host failure
	ReasonJobExecutionTimeout             = "job_execution_timeout"              // the job timed out
	ReasonImagePullFailure                = "image_pull_failure"                 // an image could not be pulled
	ReasonUnknownFailure                  = "unknown_failure"                    // the last resort
	ReasonRunnerConfigurationError        = "runner_configuration_error"         // unsupported job or policy refusal
	ReasonRunnerExternalDependencyFailure = "runner_external_dependency_failure" // clone, artifact or cache transfer
	ReasonRunnerInterrupted               = "runner_interrupted"                 // the runner was stopped mid-job
)

// vk failure kinds (JobResult.failure, PROTO-10), as wire strings.
const (
	FailureScript             = "script"              // a step exited non-zero (FAIL-02)
	FailureTimeout            = "timeout"             // the job ran past its timeout (FAIL-03)
	FailureImagePull          = "image_pull"          // an image could not be pulled or built (FAIL-04)
	FailureConfiguration      = "configuration"       // vk or the node's policy cannot run the job (FAIL-05)
	FailureExternalDependency = "external_dependency" // a clone, artifact or cache transfer failed (FAIL-06)
	FailureSystem             = "system"              // the VM, agent or host failed (FAIL-07)
	FailureInterrupted        = "interrupted"         // the node stopped under the job (FAIL-08)
	FailureCanceled           = "canceled"            // the job was cancelled (FAIL-09)
	FailureNoCapacity         = "no_capacity"         // no node took the job in time (FAIL-10)
	FailureLost               = "lost"                // the job's node was lost (FAIL-11)
)

// FailureReasonFor returns the GitLab failure_reason for a vk failure kind
// before any older-GitLab fallback (FAIL-02..11):
//
//	script → script_failure              timeout → job_execution_timeout
//	image_pull → image_pull_failure      configuration → runner_configuration_error
//	external_dependency → runner_external_dependency_failure
//	system, no_capacity, lost → runner_system_failure
//	interrupted → runner_interrupted     canceled → unknown_failure
//
// "" (success, FAIL-01) gives "". An unknown kind (a newer node) gives
// runner_system_failure: the job did fail, and the node is the suspect.
// Send the result through [MapFailureReason].
func FailureReasonFor(failure string) string {
	switch failure {
	case "":
		return ""
	case FailureScript:
		return ReasonScriptFailure
	case FailureTimeout:
		return ReasonJobExecutionTimeout
	case FailureImagePull:
		return ReasonImagePullFailure
	case FailureConfiguration:
		return ReasonRunnerConfigurationError
	case FailureExternalDependency:
		return ReasonRunnerExternalDependencyFailure
	case FailureSystem, FailureNoCapacity, FailureLost:
		return ReasonRunnerSystemFailure
	case FailureInterrupted:
		return ReasonRunnerInterrupted
	case FailureCanceled:
		// GitLab keeps a canceled job canceled whatever the reason (FAIL-09).
		return ReasonUnknownFailure
	}
	return ReasonRunnerSystemFailure
}

// alwaysSupportedReasons are known to every GitLab, listed or not.
var alwaysSupportedReasons = []string{ReasonScriptFailure, ReasonRunnerSystemFailure, ReasonJobExecutionTimeout}

// reasonFallback maps a reason an older GitLab may lack to the one it used
// before (gitlab-runner 19.5 common/network.go failureReasonsCompatibilityMap).
var reasonFallback = map[string]string{
	ReasonImagePullFailure:                ReasonRunnerSystemFailure,
	ReasonRunnerConfigurationError:        ReasonScriptFailure,
	ReasonRunnerExternalDependencyFailure: ReasonRunnerSystemFailure,
}

// maxFallbackHops bounds the fallback chain, as gitlab-runner's mapper does.
const maxFallbackHops = 10

// MapFailureReason returns what to send GitLab as failure_reason for
// reason, given the job's features.failure_reasons (FAIL-12, DECISIONS 7),
// exactly as gitlab-runner 19.5's common/failure_reason_mapper.go:
//
//  1. "" → script_failure;
//  2. a reason GitLab supports (listed, or script_failure,
//     runner_system_failure, job_execution_timeout) is sent as is;
//  3. else follow the fallback chain (image_pull_failure and
//     runner_external_dependency_failure → runner_system_failure,
//     runner_configuration_error → script_failure), at most 10 hops, to the
//     first supported reason;
//  4. else unknown_failure (e.g. runner_interrupted on a GitLab that does
//     not list it).
func MapFailureReason(reason string, supported []string) string {
	return mapFailureReason(reason, supported, reasonFallback, maxFallbackHops)
}

func mapFailureReason(reason string, supported []string, fallback map[string]string, hops int) string {
	if reason == "" {
		return ReasonScriptFailure
	}
	ok := func(r string) bool {
		return slices.Contains(supported, r) || slices.Contains(alwaysSupportedReasons, r)
	}
	if ok(reason) {
		return reason
	}
	for range hops {
		next, found := fallback[reason]
		if !found {
			break
		}
		if ok(next) {
			return next
		}
		reason = next
	}
	return ReasonUnknownFailure
}
