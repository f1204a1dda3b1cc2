package stage

import (
	"strconv"
	"strings"

	"github.com/vk-ci/vk/proto/job"
)

// featureFlag is one of gitlab-runner's feature flags and its default.
type featureFlag struct {
	name string
	def  bool
}

// featureFlags are gitlab-runner 19.3's feature flags (helpers/featureflags),
// in the order it lists them: the order of the trace's "feature flags:"
// line and of the FF_* exports at the head of every stage script. The node
// acts on those that change the trace or the script: FF_TIMESTAMPS,
// FF_MASK_ALL_DEFAULT_TOKENS, FF_SCRIPT_SECTIONS,
// FF_ENABLE_BASH_EXIT_CODE_CHECK, FF_USE_LEGACY_BASH_EVAL,
// FF_POSIXLY_CORRECT_ESCAPES and FF_USE_GITALY_CORRELATION_ID; the others are executor or transfer
// settings of gitlab-runner's own, only reported and exported.
var featureFlags = []featureFlag{
	{"FF_TEST_FEATURE", false},
	{"FF_NETWORK_PER_BUILD", false},
	{"FF_USE_LEGACY_KUBERNETES_EXECUTION_STRATEGY", false},
	{"FF_USE_DIRECT_DOWNLOAD", true},
	{"FF_USE_FASTZIP", false},
	{"FF_DISABLE_UMASK_FOR_DOCKER_EXECUTOR", false},
	{"FF_ENABLE_BASH_EXIT_CODE_CHECK", false},
	{"FF_USE_WINDOWS_LEGACY_PROCESS_STRATEGY", false},
	{"FF_USE_LEGACY_BASH_EVAL", false},
	{"FF_USE_POWERSHELL_PATH_RESOLVER", false},
	{"FF_USE_DYNAMIC_TRACE_FORCE_SEND_INTERVAL", false},
	{"FF_SCRIPT_SECTIONS", false},
	{"FF_ENABLE_JOB_CLEANUP", false},
	{"FF_KUBERNETES_HONOR_ENTRYPOINT", false},
	{"FF_POSIXLY_CORRECT_ESCAPES", false},
	{"FF_RESOLVE_FULL_TLS_CHAIN", false},
	{"FF_DISABLE_POWERSHELL_STDIN", false},
	{"FF_USE_POD_ACTIVE_DEADLINE_SECONDS", true},
	{"FF_USE_ADVANCED_POD_SPEC_CONFIGURATION", false},
	{"FF_SECRET_RESOLVING_FAILS_IF_MISSING", true},
	{"FF_PRINT_POD_EVENTS", false},
	{"FF_USE_GIT_BUNDLE_URIS", true},
	{"FF_USE_GIT_NATIVE_CLONE", false},
	{"FF_USE_DUMB_INIT_WITH_KUBERNETES_EXECUTOR", false},
	{"FF_USE_INIT_WITH_DOCKER_EXECUTOR", false},
	{"FF_LOG_IMAGES_CONFIGURED_FOR_JOB", false},
	{"FF_USE_DOCKER_AUTOSCALER_DIAL_STDIO", true},
	{"FF_CLEAN_UP_FAILED_CACHE_EXTRACT", false},
	{"FF_USE_WINDOWS_JOB_OBJECT", false},
	{"FF_TIMESTAMPS", true},
	{"FF_DISABLE_AUTOMATIC_TOKEN_ROTATION", false},
	{"FF_USE_LEGACY_GCS_CACHE_ADAPTER", false},
	{"FF_DISABLE_UMASK_FOR_KUBERNETES_EXECUTOR", false},
	{"FF_USE_LEGACY_S3_CACHE_ADAPTER", false},
	{"FF_GIT_URLS_WITHOUT_TOKENS", false},
	{"FF_WAIT_FOR_POD_TO_BE_REACHABLE", false},
	{"FF_MASK_ALL_DEFAULT_TOKENS", true},
	{"FF_EXPORT_HIGH_CARDINALITY_METRICS", false},
	{"FF_USE_FLEETING_ACQUIRE_HEARTBEATS", false},
	{"FF_USE_EXPONENTIAL_BACKOFF_STAGE_RETRY", true},
	{"FF_USE_ADAPTIVE_REQUEST_CONCURRENCY", true},
	{"FF_USE_GITALY_CORRELATION_ID", true},
	{"FF_USE_GIT_PROACTIVE_AUTH", false},
	{"FF_HASH_CACHE_KEYS", false},
	{"FF_ENABLE_JOB_INPUTS_INTERPOLATION", true},
	{"FF_USE_JOB_ROUTER", false},
	{"FF_SCRIPT_TO_STEP_MIGRATION", false},
	{"FF_USE_PARALLEL_CACHE_TRANSFER", false},
	{"FF_USE_PARALLEL_ARTIFACT_TRANSFER", false},
	{"FF_CONCRETE", false},
	{"FF_SUSPENDABLE_ENVIRONMENTS", false},
	{"FF_USE_NATIVE_CONTAINER_STOP", false},
}

// Feature flags the node acts on.
const (
	ffTimestamps            = "FF_TIMESTAMPS"
	ffMaskAllDefaultTokens  = "FF_MASK_ALL_DEFAULT_TOKENS"
	ffScriptSections        = "FF_SCRIPT_SECTIONS"
	ffBashExitCodeCheck     = "FF_ENABLE_BASH_EXIT_CODE_CHECK"
	ffLegacyBashEval        = "FF_USE_LEGACY_BASH_EVAL"
	ffGitalyCorrelationID   = "FF_USE_GITALY_CORRELATION_ID"
	ffPosixlyCorrectEscapes = "FF_POSIXLY_CORRECT_ESCAPES"
)

// flagDefault returns a feature flag's default as the variable
// gitlab-runner puts before the job's when it resolves the flags
// (GetDefaultFeatureFlagsVariables), for [job.CiJob.FlagValue].
func flagDefault(key string) (string, bool) {
	for _, f := range featureFlags {
		if f.name == key {
			return strconv.FormatBool(f.def), true
		}
	}
	return "", false
}

// resolveFlags returns every feature flag's value for a job: its job
// variable, expanded as gitlab-runner expands it first
// ([job.CiJob.FlagValue]: `FF_SCRIPT_SECTIONS: $MY_FLAG` reads MY_FLAG),
// when strconv.ParseBool reads it (as gitlab-runner's
// populateFeatureFlags does; the node has no runner-level flags, TRACE-03),
// else the default. FF_TIMESTAMPS follows [job.CiJob.Timestamps], which the
// relay reads too.
func resolveFlags(j *job.CiJob) map[string]bool {
	ff := make(map[string]bool, len(featureFlags))
	for _, f := range featureFlags {
		ff[f.name] = f.def
		if v, ok := j.FlagValue(f.name, flagDefault); ok {
			if b, err := strconv.ParseBool(v); err == nil {
				ff[f.name] = b
			}
		}
	}
	ff[ffTimestamps] = j.Timestamps()
	return ff
}

// flagErrors returns gitlab-runner's settings warning for the job's
// feature flag variables that strconv.ParseBool cannot read once
// expanded, or "": one
// "NAME: could not parse feature flag, expected bool, got VALUE" per flag
// in list order, the lines joined by "\n" (errors.Join). gitlab-runner
// resolves the flags twice while building its settings and reports each
// failure both times, so the list is written twice, as it prints it.
func flagErrors(j *job.CiJob) string {
	var errs []string
	for _, f := range featureFlags {
		if v, ok := j.FlagValue(f.name, flagDefault); ok {
			if _, err := strconv.ParseBool(v); err != nil {
				errs = append(errs, f.name+": could not parse feature flag, expected bool, got "+v)
			}
		}
	}
	if len(errs) == 0 {
		return ""
	}
	return strings.Join(append(errs, errs...), "\n")
}

// flagsLine returns what gitlab-runner prints after "  feature flags: ":
// NAME:bool for every flag that differs from its default, in list order,
// joined by ", "; "" when none does.
func flagsLine(ff map[string]bool) string {
	var parts []string
	for _, f := range featureFlags {
		if ff[f.name] != f.def {
			parts = append(parts, f.name+":"+strconv.FormatBool(ff[f.name]))
		}
	}
	return strings.Join(parts, ", ")
}

// isFeatureFlag reports whether key names one of [featureFlags].
func isFeatureFlag(key string) bool {
	for _, f := range featureFlags {
		if f.name == key {
			return true
		}
	}
	return false
}
