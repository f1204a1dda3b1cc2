package stage

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/vk-ci/vk/node/exec"
	"github.com/vk-ci/vk/node/trace"
	"github.com/vk-ci/vk/proto/job"
)

// Failure is why a job failed, in the spec's vocabulary (FAIL-01..09); the
// session layer maps it to the wire result and the relay to GitLab's
// failure_reason. The zero value means the job succeeded.
type Failure string

// Failures the stage runner produces.
const (
	FailureNone               Failure = ""
	FailureScript             Failure = "script"              // a step exited non-zero (FAIL-02)
	FailureTimeout            Failure = "timeout"             // past timeout_secs (FAIL-03)
	FailureImagePull          Failure = "image_pull"          // image not pulled (FAIL-04)
	FailureConfiguration      Failure = "configuration"       // unsupported job or policy (FAIL-05)
	FailureExternalDependency Failure = "external_dependency" // clone, cache, artifact transfer (FAIL-06)
	FailureSystem             Failure = "system"              // executor or host (FAIL-07)
	FailureInterrupted        Failure = "interrupted"         // node stopped mid-job (FAIL-08)
	FailureCanceled           Failure = "canceled"            // job cancelled (FAIL-09)
)

// Errors a [Transfers] implementation (or an executor) may wrap to choose
// the failure a stage error maps to. An unmarked transfer error is
// [FailureExternalDependency].
var (
	ErrSystem        = errors.New("stage: system failure")
	ErrConfiguration = exec.ErrConfiguration
	ErrImagePull     = exec.ErrImagePull
)

// ArtifactOutcome is what became of one of the job's artifacts.
type ArtifactOutcome struct {
	// Name is the artifact's name ("" = GitLab's default).
	Name string
	// Type is its artifact_type, e.g. "archive", "junit".
	Type string
	// Uploaded: GitLab accepted it.
	Uploaded bool
	// Bytes is the uploaded archive's size; 0 when not uploaded.
	Bytes int64
	// Err says why it was not uploaded; "" when it was or when nothing
	// matched its paths.
	Err string
}

// Transfers moves the job's data in and out of its environment: the
// checkout, caches and artifacts. node/xfer implements it. Each method
// writes its own progress to tr (runner lines on [trace.Trace.Println] and
// friends). projectDir is the host path of CI_PROJECT_DIR. An error fails
// the job: by default with [FailureExternalDependency]; wrap [ErrSystem],
// [ErrConfiguration] or [ErrImagePull] to say otherwise.
type Transfers interface {
	// GetSources checks the project out into projectDir (STAGE-02,
	// STAGE-03), honouring GIT_STRATEGY and friends from the job's
	// variables (GIT_STRATEGY=none is handled by the stage runner).
	GetSources(ctx context.Context, j *job.CiJob, projectDir string, tr *trace.Trace) error
	// RestoreCache restores the job's caches with a pull policy; reg,
	// when not nil, is the job's own cache repository and token
	// (XFER-13), else the node's own registry and credential serve.
	RestoreCache(ctx context.Context, j *job.CiJob, reg *CacheRegistry, projectDir string, tr *trace.Trace) error
	// DownloadArtifacts fetches the artifacts of the job's dependencies.
	DownloadArtifacts(ctx context.Context, j *job.CiJob, projectDir string, tr *trace.Trace) error
	// ArchiveCache saves the caches whose `when` matches the job's state
	// (failed true: on_failure and always; else on_success and always),
	// in reg as RestoreCache does.
	ArchiveCache(ctx context.Context, j *job.CiJob, reg *CacheRegistry, projectDir string, failed bool, tr *trace.Trace) error
	// UploadArtifacts uploads the artifacts whose `when` matches, returning
	// an outcome for each it tried.
	UploadArtifacts(ctx context.Context, j *job.CiJob, projectDir string, failed bool, tr *trace.Trace) ([]ArtifactOutcome, error)
}

// Result is how a job ended.
type Result struct {
	// Failure is empty when the job succeeded (FAIL-01).
	Failure Failure
	// ExitCode is the failing step's exit code when Failure is
	// FailureScript; 0 otherwise.
	ExitCode int
	// Err describes the failure for logs; nil on success.
	Err error
	// Usage is what the job used; Wall covers cleanup (NODE-14), Size is
	// the size it ran with (NODE-17, DECISIONS 9).
	Usage exec.Usage
	// Artifacts are the upload outcomes, in the job's order.
	Artifacts []ArtifactOutcome
	// OutputLen is the trace's final length in bytes (NODE-10, NODE-13).
	OutputLen int64
	// Truncated: the trace hit its limit.
	Truncated bool
}

// Spec is one job to run.
type Spec struct {
	// ID names the job's executor environment (unique on the node).
	// Required.
	ID string
	// Job is the job. Required.
	Job *job.CiJob
	// Reserved is the envelope the job's reservation holds: the size used
	// when the job asks for none.
	Reserved exec.Size
	// Out receives the trace bytes as GitLab will store them. Required.
	Out io.Writer
	// Executor, when set, prepares this job instead of [Config.Executor]
	// (a node choosing the backend per job by its image); nil means
	// Config.Executor.
	Executor exec.Executor
	// ExecutorName names Executor in the trace; "" means
	// [Config.ExecutorName]. Used only with Executor.
	ExecutorName string
	// Warnings are written to the trace as warnings right after the
	// executor line of prepare_executor (a backend chooser's notes, e.g.
	// services ignored without an image). A prepared job that has a
	// `Warnings() []string` method gets those written after Prepare too.
	Warnings []string
	// WithoutCaches, when not "", is why this job runs without caches:
	// restore_cache and archive_cache write it to the trace as a warning
	// and never call [Transfers] (no registry request at all). The node
	// sets it under [registry] guest_credential = "job" for a start that
	// carries no cache repository (XFER-15).
	WithoutCaches string
	// Cache, when not nil, is the job's own cache repository and the
	// registry token the hub minted for it (the start's cache registry,
	// XFER-13): the job's caches go there with that token, and the token
	// is masked in the trace like a masked variable (XFER-16).
	Cache *CacheRegistry
}

// CacheRegistry is a job's own cache repository on the node's registry
// and the bearer token that grants it (XFER-13, XFER-14).
type CacheRegistry struct {
	// Repository is the absolute repository path on the node's registry.
	Repository string
	// Token is the registry token, sent as a bearer token. A secret.
	Token string
	// Expires is when the token stops working; zero means unknown.
	Expires time.Time
}
