package gitlab

import (
	"fmt"
	"runtime"
	"time"

	"github.com/vk-ci/vk/internal/version"
)

// FeaturesInfo is info.features: what the runner can do. All 31 keys are
// always sent, in gitlab-runner's order (common/network.go), with no
// omitempty: Rails reads an absent key as false anyway, and the fixed shape
// keeps request bodies comparable with gitlab-runner's.
type FeaturesInfo struct {
	Variables               bool `json:"variables"`                 // job variables
	Image                   bool `json:"image"`                     // image:
	Services                bool `json:"services"`                  // services:
	Artifacts               bool `json:"artifacts"`                 // artifacts:
	Cache                   bool `json:"cache"`                     // cache:
	FallbackCacheKeys       bool `json:"fallback_cache_keys"`       // cache:fallback_keys
	Shared                  bool `json:"shared"`                    // shared build dirs
	UploadMultipleArtifacts bool `json:"upload_multiple_artifacts"` // report artifacts
	UploadRawArtifacts      bool `json:"upload_raw_artifacts"`      // artifact_format raw
	Session                 bool `json:"session"`                   // interactive session server
	Terminal                bool `json:"terminal"`                  // web terminal
	Refspecs                bool `json:"refspecs"`                  // git_info.refspecs
	Masking                 bool `json:"masking"`                   // masked variables
	Proxy                   bool `json:"proxy"`                     // service proxy
	RawVariables            bool `json:"raw_variables"`             // variables raw
	ArtifactsExclude        bool `json:"artifacts_exclude"`         // artifacts:exclude
	MultiBuildSteps         bool `json:"multi_build_steps"`         // steps other than script
	TraceReset              bool `json:"trace_reset"`               // 416 rewinds
	TraceChecksum           bool `json:"trace_checksum"`            // output.checksum
	TraceSize               bool `json:"trace_size"`                // output.bytesize
	VaultSecrets            bool `json:"vault_secrets"`             // secrets:
	Cancelable              bool `json:"cancelable"`                // Job-Status cancel
	ReturnExitCode          bool `json:"return_exit_code"`          // exit_code in updates
	ServiceVariables        bool `json:"service_variables"`         // services:variables
	ServiceMultipleAliases  bool `json:"service_multiple_aliases"`  // several aliases per service
	ImageExecutorOpts       bool `json:"image_executor_opts"`       // image executor_opts
	ServiceExecutorOpts     bool `json:"service_executor_opts"`     // service executor_opts
	CancelGracefully        bool `json:"cancel_gracefully"`         // canceling state
	NativeStepsIntegration  bool `json:"native_steps_integration"`  // run: steps
	TwoPhaseJobCommit       bool `json:"two_phase_job_commit"`      // commit with PUT running
	JobInputs               bool `json:"job_inputs"`                // inputs:
}

// AdvertisedFeatures returns the features vk-gitlab advertises: true for
// what it supports, false for what it does not (session, terminal, proxy,
// shared, vault_secrets, service_multiple_aliases, image_executor_opts,
// service_executor_opts, native_steps_integration, job_inputs) (GL-05,
// GL-06).
func AdvertisedFeatures() FeaturesInfo {
	return FeaturesInfo{
		Variables:               true,
		Image:                   true,
		Services:                true,
		Artifacts:               true,
		Cache:                   true,
		FallbackCacheKeys:       true,
		UploadMultipleArtifacts: true,
		UploadRawArtifacts:      true,
		Refspecs:                true,
		Masking:                 true,
		RawVariables:            true,
		ArtifactsExclude:        true,
		MultiBuildSteps:         true,
		TraceReset:              true,
		TraceChecksum:           true,
		TraceSize:               true,
		Cancelable:              true,
		CancelGracefully:        true,
		ReturnExitCode:          true,
		ServiceVariables:        true,
		TwoPhaseJobCommit:       true,
	}
}

// ConfigInfo is info.config; gitlab-runner always sends it.
type ConfigInfo struct {
	// Gpus is docker's gpus setting; always "" for vk.
	Gpus string `json:"gpus"`
}

// Info is the runner info sent with verify, job requests and job updates.
type Info struct {
	// Name of the runner software: "vk-gitlab".
	Name string `json:"name,omitempty"`
	// Version of the software (internal/version).
	Version string `json:"version,omitempty"`
	// Revision is the source commit, short; "unknown" when not stamped.
	Revision string `json:"revision,omitempty"`
	// Platform is GOOS.
	Platform string `json:"platform,omitempty"`
	// Architecture is GOARCH.
	Architecture string `json:"architecture,omitempty"`
	// Executor is "vk" (GL-07).
	Executor string `json:"executor,omitempty"`
	// Shell is "bash" (GL-07).
	Shell string `json:"shell,omitempty"`
	// Features are the advertised features (GL-05, GL-06).
	Features FeaturesInfo `json:"features"`
	// Config is always {"gpus": ""}.
	Config ConfigInfo `json:"config"`
	// Labels are runner labels; omitted when empty.
	Labels map[string]string `json:"labels,omitempty"`
}

// Executor and shell vk-gitlab reports (GL-07).
const (
	InfoName     = "vk-gitlab"
	InfoExecutor = "vk"
	InfoShell    = "bash"
)

// DefaultInfo returns the info vk-gitlab sends: its name, version and
// revision, this machine's platform, executor "vk", shell "bash" and
// [AdvertisedFeatures].
func DefaultInfo() Info {
	rev := version.Commit
	if len(rev) > 8 {
		rev = rev[:8]
	}
	if rev == "" {
		rev = "unknown"
	}
	return Info{
		Name:         InfoName,
		Version:      version.Version,
		Revision:     rev,
		Platform:     runtime.GOOS,
		Architecture: runtime.GOARCH,
		Executor:     InfoExecutor,
		Shell:        InfoShell,
		Features:     AdvertisedFeatures(),
	}
}

// JobRequest is the body of POST /jobs/request.
type JobRequest struct {
	// Info is the runner info.
	Info Info `json:"info"`
	// Token is the runner authentication token (also in RUNNER-TOKEN).
	Token string `json:"token,omitempty"`
	// SystemID identifies this runner manager, e.g. "s_0123456789ab".
	SystemID string `json:"system_id,omitempty"`
	// LastUpdate is the previous answer's X-GitLab-Last-Update; empty on
	// the first request (GL-03).
	LastUpdate string `json:"last_update,omitempty"`
}

// VerifyRunnerRequest is the body of POST /runners/verify.
type VerifyRunnerRequest struct {
	// Token is the runner authentication token.
	Token string `json:"token"`
	// SystemID identifies this runner manager.
	SystemID string `json:"system_id,omitempty"`
	// Info is the runner info (Rails creates the runner manager from it).
	Info Info `json:"info"`
}

// VerifyRunnerResponse is the JSON of a 200 answer to /runners/verify.
type VerifyRunnerResponse struct {
	// ID is the runner's ID in GitLab (job.runner_id, SPEC-25).
	ID int64 `json:"id"`
	// Token is the runner token GitLab has (the one sent).
	Token string `json:"token"`
	// TokenExpiresAt is when the token expires; nil when it does not.
	TokenExpiresAt *time.Time `json:"token_expires_at"`
}

// JobState is the state a runner reports in PUT /jobs/:id.
type JobState string

// States a runner sends. vk never sends pending.
const (
	StateRunning JobState = "running"
	StateSuccess JobState = "success"
	StateFailed  JobState = "failed"
)

// TraceOutput is the output object of a job update: what the runner holds
// of the trace. Zero fields are omitted, so a zero TraceOutput encodes as
// {} (the two-phase commit's "output": {}).
type TraceOutput struct {
	// Checksum is "crc32:" and 8 lower-case hex digits of the trace.
	Checksum string `json:"checksum,omitempty"`
	// Bytesize is the trace's length in bytes.
	Bytesize int64 `json:"bytesize,omitempty"`
}

// UpdateJobRequest is the body of PUT /jobs/:id.
type UpdateJobRequest struct {
	// Info is the runner info.
	Info Info `json:"info"`
	// Token is the job token (also in JOB-TOKEN).
	Token string `json:"token"`
	// State is running, success or failed.
	State JobState `json:"state"`
	// FailureReason is set only with failed, already mapped for this
	// GitLab ([MapFailureReason]).
	FailureReason string `json:"failure_reason,omitempty"`
	// Checksum duplicates Output.Checksum (deprecated by GitLab, still sent).
	Checksum string `json:"checksum,omitempty"`
	// Output describes the trace.
	Output TraceOutput `json:"output"`
	// ExitCode of the failing step; 0 is never sent.
	ExitCode int `json:"exit_code,omitempty"`
}

// UpdateJobInfo is what a caller says in a job update; the client adds
// info and token.
type UpdateJobInfo struct {
	// State to report.
	State JobState
	// FailureReason for StateFailed, already mapped ([MapFailureReason]).
	FailureReason string
	// Output describes the trace sent so far; zero for the commit.
	Output TraceOutput
	// ExitCode of the failing step; 0 is not sent.
	ExitCode int
}

// String returns a short description for logs.
func (u UpdateJobInfo) String() string {
	return fmt.Sprintf("state=%s failure_reason=%q bytesize=%d", u.State, u.FailureReason, u.Output.Bytesize)
}
