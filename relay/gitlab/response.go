package gitlab

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// JobResponse is the body of a 201 answer to POST /jobs/request: GitLab's
// job as Rails renders it (Entities::Ci::JobRequest::Response) and
// gitlab-runner 19.5 decodes it (common/spec/spec.go Job). Unknown keys are
// ignored and absent keys decode to zero values, as gitlab-runner does.
//
// It is a wire type of GitLab's API, not of vk's: relay/translate turns it
// into a proto/job CiJob. Decode it with [DecodeJobResponse].
type JobResponse struct {
	// ID is GitLab's job ID, used in every per-job URL.
	ID int64 `json:"id"`
	// Token is the job token (JOB-TOKEN for every call about this job;
	// prefixed glcbt- on current GitLab). Secret.
	Token string `json:"token"`
	// AllowGitFetch: the project allows the fetch git strategy.
	AllowGitFetch bool `json:"allow_git_fetch"`
	// JobInfo names the job, its pipeline and project.
	JobInfo JobInfo `json:"job_info"`
	// GitInfo says what to check out. Its RepoURL carries credentials.
	GitInfo GitInfo `json:"git_info"`
	// RunnerInfo carries the job timeout and the runner's uuid.
	RunnerInfo RunnerInfo `json:"runner_info"`
	// Inputs are job inputs (job_inputs is not advertised, so GitLab should
	// send none; kept for fidelity, never mapped: SPEC-10).
	Inputs []Input `json:"inputs,omitempty"`
	// Variables in GitLab's order; for duplicated keys the last one wins.
	Variables []Variable `json:"variables"`
	// Steps are the job's script steps; Rails omits them for run: jobs.
	Steps []Step `json:"steps,omitempty"`
	// Image is the job image; a zero Image (empty Name) means none given.
	Image Image `json:"image"`
	// Services are service containers.
	Services []Image `json:"services,omitempty"`
	// Artifacts to upload.
	Artifacts []Artifact `json:"artifacts,omitempty"`
	// Cache entries ("cache" on the wire).
	Cache []Cache `json:"cache,omitempty"`
	// Credentials for registries and other services; only type "registry"
	// (exact, lower case) is used.
	Credentials []Credentials `json:"credentials,omitempty"`
	// Dependencies are jobs whose artifacts this job downloads.
	Dependencies []Dependency `json:"dependencies,omitempty"`
	// Features are GitLab's per-job hints (trace sections, masking prefixes,
	// the failure reasons this GitLab knows).
	Features GitLabFeatures `json:"features"`
	// Secrets (EE) by name, kept as raw JSON: vk never resolves them, a job
	// carrying any is refused (SPEC-20). nil or empty means none.
	Secrets map[string]json.RawMessage `json:"secrets,omitempty"`
	// Hooks are scripts around the checkout.
	Hooks []Hook `json:"hooks,omitempty"`
	// Run is the run: keyword's steps as GitLab sends them: a JSON string
	// holding a JSON array. Empty means no run: steps. vk refuses run: jobs
	// (SPEC-22); [JobResponse.RunSteps] decodes it for messages.
	Run string `json:"run,omitempty"`
	// PolicyOptions are set for jobs an execution policy injected.
	PolicyOptions PolicyOptions `json:"policy_options"`
	// SuspendOptions (suspended environments) are ignored by vk.
	SuspendOptions SuspendOptions `json:"suspend_options"`
}

// JobInfo is the response's job_info.
type JobInfo struct {
	// ID is the job's ID again (Rails sends it; gitlab-runner ignores it).
	ID int64 `json:"id,omitempty"`
	// Name is the job's name in .gitlab-ci.yml.
	Name string `json:"name"`
	// Stage is the job's stage name.
	Stage string `json:"stage"`
	// PipelineID is the pipeline's ID.
	PipelineID int64 `json:"pipeline_id"`
	// ProjectID is the project's ID.
	ProjectID int64 `json:"project_id"`
	// ProjectName is the project's name.
	ProjectName string `json:"project_name"`
	// ProjectFullPath is the project's path with namespace, e.g. "acme/demo".
	ProjectFullPath string `json:"project_full_path"`
	// NamespaceID is the project's namespace.
	NamespaceID int64 `json:"namespace_id"`
	// RootNamespaceID is the top-level group's namespace.
	RootNamespaceID int64 `json:"root_namespace_id"`
	// OrganizationID is ignored by vk (SPEC-05).
	OrganizationID int64 `json:"organization_id"`
	// InstanceID is ignored by vk (SPEC-05).
	InstanceID string `json:"instance_id"`
	// InstanceUUID is ignored by vk (SPEC-05).
	InstanceUUID string `json:"instance_uuid"`
	// UserID is the user who triggered the job.
	UserID int64 `json:"user_id"`
	// ScopedUserID is ignored by vk (SPEC-05); nil when GitLab sent null.
	ScopedUserID *int64 `json:"scoped_user_id,omitempty"`
	// TimeInQueueSeconds is a queue metric kept by the relay (SPEC-06).
	TimeInQueueSeconds float64 `json:"time_in_queue_seconds"`
	// ProjectJobsRunningOnInstanceRunnersCount is a queue metric (a string
	// on the wire, e.g. "0" or "+Inf").
	ProjectJobsRunningOnInstanceRunnersCount string `json:"project_jobs_running_on_instance_runners_count"`
	// QueueSize is a queue metric.
	QueueSize int64 `json:"queue_size"`
	// QueueDepth is a queue metric.
	QueueDepth int64 `json:"queue_depth"`
}

// GitInfo is the response's git_info.
type GitInfo struct {
	// RepoURL is the clone URL, credentials included
	// (https://gitlab-ci-token:<job token>@host/group/project.git). Secret.
	RepoURL string `json:"repo_url"`
	// RepoObjectFormat is "sha1" or "sha256".
	RepoObjectFormat string `json:"repo_object_format"`
	// Ref is the branch or tag.
	Ref string `json:"ref"`
	// Sha is the commit.
	Sha string `json:"sha"`
	// BeforeSha is the ref's previous head.
	BeforeSha string `json:"before_sha"`
	// RefType is "branch" or "tag".
	RefType string `json:"ref_type"`
	// Refspecs are what to fetch.
	Refspecs []string `json:"refspecs"`
	// Depth is the clone depth (Rails' git_depth); 0 means full.
	Depth int `json:"depth"`
	// Protected says whether the ref is protected; nil when not sent.
	Protected *bool `json:"protected"`
}

// RunnerInfo is the response's runner_info.
type RunnerInfo struct {
	// UUID identifies the runner in GitLab's logs; relay only (SPEC-06).
	UUID string `json:"uuid,omitempty"`
	// Timeout is the job timeout in seconds; ≤ 0 means gitlab-runner's
	// default of 7200.
	Timeout int `json:"timeout"`
}

// Input is one job input (job_inputs is not advertised; never mapped).
type Input struct {
	// Key is the input's name.
	Key string `json:"key"`
	// Value is its typed value.
	Value InputValue `json:"value"`
}

// InputValue is an input's typed value, kept undecoded.
type InputValue struct {
	// Type is "string", "number", "boolean", "array" or "struct".
	Type string `json:"type"`
	// Content is the value as raw JSON.
	Content json.RawMessage `json:"content"`
	// Sensitive marks a value to be masked.
	Sensitive bool `json:"sensitive,omitempty"`
}

// Variable is a CI/CD variable as GitLab sends it. Rails omits file and raw
// when false and always sends public.
type Variable struct {
	// Key is the variable's name.
	Key string `json:"key"`
	// Value is its value (for a file variable, the file's content).
	Value string `json:"value"`
	// Public: not sensitive.
	Public bool `json:"public"`
	// File: expands to the path of a file holding Value.
	File bool `json:"file,omitempty"`
	// Masked: masked in the trace.
	Masked bool `json:"masked,omitempty"`
	// Raw: not expanded.
	Raw bool `json:"raw,omitempty"`
}

// Step is one script step. gitlab-runner decodes but never consults When,
// Timeout or AllowFailure.
type Step struct {
	// Name is "script", "after_script", "release" or another name.
	Name string `json:"name"`
	// Script holds the step's lines.
	Script []string `json:"script"`
	// Timeout in seconds; 0 means unset.
	Timeout int `json:"timeout"`
	// When is "on_success" (default when empty), "on_failure" or "always".
	When string `json:"when"`
	// AllowFailure is applied by GitLab.
	AllowFailure bool `json:"allow_failure"`
}

// Image is the job image or one service.
type Image struct {
	// Name is the image reference.
	Name string `json:"name"`
	// Alias (services): one or several host names separated by commas
	// and/or spaces; see [Image.Aliases].
	Alias string `json:"alias,omitempty"`
	// Command overrides the image's command.
	Command []string `json:"command,omitempty"`
	// Entrypoint overrides the image's entrypoint.
	Entrypoint []string `json:"entrypoint,omitempty"`
	// Ports the service exposes.
	Ports []Port `json:"ports,omitempty"`
	// Variables are a service's own variables.
	Variables []Variable `json:"variables,omitempty"`
	// PullPolicy lists allowed pull policies, e.g. ["always"].
	PullPolicy []string `json:"pull_policy,omitempty"`
	// ExecutorOptions are executor_opts; unknown keys are recorded, see
	// [ExecutorOptions.Unsupported].
	ExecutorOptions ExecutorOptions `json:"executor_opts"`
}

// Aliases splits Alias at commas and white space, dropping empty parts, as
// gitlab-runner's Image.Aliases does.
func (i Image) Aliases() []string {
	return strings.Fields(strings.ReplaceAll(i.Alias, ",", " "))
}

// Port is a port a service exposes.
type Port struct {
	// Number is the port number.
	Number int `json:"number,omitempty"`
	// Protocol is "http" or "https".
	Protocol string `json:"protocol,omitempty"`
	// Name labels the port.
	Name string `json:"name,omitempty"`
}

// Artifact is one artifacts entry.
type Artifact struct {
	// Name of the archive; GitLab may send null (decoded as "").
	Name string `json:"name"`
	// Untracked: include untracked files.
	Untracked bool `json:"untracked"`
	// Paths to include.
	Paths []string `json:"paths"`
	// Exclude globs.
	Exclude []string `json:"exclude"`
	// When: "on_success" (default), "on_failure", "always".
	When string `json:"when"`
	// ArtifactType, e.g. "archive", "junit".
	ArtifactType string `json:"artifact_type"`
	// ArtifactFormat: "" (= zip), "zip", "gzip", "raw", "zipzstd", "tarzstd".
	ArtifactFormat string `json:"artifact_format"`
	// ExpireIn, e.g. "1 week".
	ExpireIn string `json:"expire_in"`
}

// Cache is one cache entry. Rails already appended -protected or
// -non_protected to Key and each fallback key.
type Cache struct {
	// Key, possibly holding variable references; empty means
	// "<job name>/<ref>".
	Key string `json:"key"`
	// Untracked: include untracked files.
	Untracked bool `json:"untracked"`
	// Policy: "pull-push", "pull", "push" or "" (= pull-push).
	Policy string `json:"policy"`
	// Paths to cache.
	Paths []string `json:"paths"`
	// When: "on_success", "on_failure", "always" or "" (= on_success).
	When string `json:"when"`
	// FallbackKeys are tried in order when Key has no cache.
	FallbackKeys []string `json:"fallback_keys"`
}

// Credentials is one credentials entry.
type Credentials struct {
	// Type; only "registry" is used.
	Type string `json:"type"`
	// URL of the service, e.g. "registry.gitlab.example.com".
	URL string `json:"url"`
	// Username to log in with.
	Username string `json:"username"`
	// Password to log in with. Secret.
	Password string `json:"password"`
}

// Dependency is a job whose artifacts this job downloads.
type Dependency struct {
	// ID is the dependency's job ID.
	ID int64 `json:"id"`
	// Token is the JOB-TOKEN for downloading its artifacts. Secret.
	Token string `json:"token"`
	// Name is the dependency's job name.
	Name string `json:"name"`
	// ArtifactsFile is present only when the dependency has artifacts.
	ArtifactsFile *ArtifactsFile `json:"artifacts_file,omitempty"`
}

// ArtifactsFile describes a dependency's artifacts archive.
type ArtifactsFile struct {
	// Filename, e.g. "artifacts.zip".
	Filename string `json:"filename"`
	// Size in bytes.
	Size int64 `json:"size"`
}

// GitLabFeatures is the response's features object.
type GitLabFeatures struct {
	// TraceSections: write section markers.
	TraceSections bool `json:"trace_sections"`
	// TokenMaskPrefixes are extra token prefixes to mask.
	TokenMaskPrefixes []string `json:"token_mask_prefixes,omitempty"`
	// FailureReasons lists the failure reasons this GitLab knows; the relay
	// maps what it sends through [MapFailureReason] (FAIL-12).
	FailureReasons []string `json:"failure_reasons,omitempty"`
	// Tracing (OpenTelemetry export hints) is ignored (SPEC-05); raw JSON,
	// nil when absent or null.
	Tracing json.RawMessage `json:"tracing,omitempty"`
}

// Hook is a script run around the checkout.
type Hook struct {
	// Name is "pre_get_sources_script" or "post_get_sources_script".
	Name string `json:"name"`
	// Script holds the hook's lines.
	Script []string `json:"script"`
}

// PolicyOptions is the response's policy_options (EE).
type PolicyOptions struct {
	// PolicyJob: the job was injected by an execution policy.
	PolicyJob bool `json:"execution_policy_job"`
	// Name of the policy.
	Name string `json:"policy_name"`
	// VariableOverrideAllowed: nil when absent (policy variables win).
	VariableOverrideAllowed *bool `json:"policy_variables_override_allowed,omitempty"`
	// VariableOverrideExceptions are the exceptions to the above.
	VariableOverrideExceptions []string `json:"policy_variables_override_exceptions,omitempty"`
}

// SuspendOptions is the response's suspend_options (ignored by vk).
type SuspendOptions struct {
	// SuspendOnSuccess keeps the environment after success.
	SuspendOnSuccess bool `json:"suspend_on_success,omitempty"`
	// SuspendOnFailure keeps the environment after failure.
	SuspendOnFailure bool `json:"suspend_on_failure,omitempty"`
	// RuntimeEnvironmentKey names the kept environment.
	RuntimeEnvironmentKey string `json:"runtime_environment_key,omitempty"`
}

// ErrDecode reports a job response that is not valid JSON of the expected
// shape (see [DecodeJobResponse]).
var ErrDecode = errors.New("gitlab: undecodable job response")

// DecodeJobResponse decodes a 201 body. Errors wrap ErrDecode. Trailing
// data after the JSON value is an error, as are values of the wrong JSON
// type for a field (gitlab-runner fails the same way).
func DecodeJobResponse(body []byte) (*JobResponse, error) {
	var j JobResponse
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&j); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDecode, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: trailing data after the job", ErrDecode)
	}
	return &j, nil
}

// JobIdentity is the least a relay needs to fail a job it could not decode
// in GitLab: its ID and token.
type JobIdentity struct {
	// ID is the job's ID; 0 when even that was not readable.
	ID int64 `json:"id"`
	// Token is the job token. Secret.
	Token string `json:"token"`
}

// DecodeJobIdentity reads only id and token from a job response body, for
// bodies [DecodeJobResponse] refused. ok is false when neither is readable.
func DecodeJobIdentity(body []byte) (id JobIdentity, ok bool) {
	var raw struct {
		ID    json.RawMessage `json:"id"`
		Token json.RawMessage `json:"token"`
	}
	if json.Unmarshal(body, &raw) != nil {
		return JobIdentity{}, false
	}
	if len(raw.ID) > 0 {
		if n, err := strconv.ParseInt(string(raw.ID), 10, 64); err == nil {
			id.ID = n
		}
	}
	if len(raw.Token) > 0 {
		_ = json.Unmarshal(raw.Token, &id.Token)
	}
	return id, id.ID != 0 && id.Token != ""
}

// VariableValue returns the value of the last variable named key among
// vars, as gitlab-runner resolves duplicates, and whether there was one.
func VariableValue(vars []Variable, key string) (string, bool) {
	for i := len(vars) - 1; i >= 0; i-- {
		if vars[i].Key == key {
			return vars[i].Value, true
		}
	}
	return "", false
}

// VariableBool reads a variable as gitlab-runner's Variables.Bool does:
// strconv.ParseBool of the lower-cased value, else an integer equal to 1;
// anything else (or absence) is false.
func VariableBool(vars []Variable, key string) bool {
	v, _ := VariableValue(vars, key)
	if b, err := strconv.ParseBool(strings.ToLower(v)); err == nil {
		return b
	}
	if n, err := strconv.ParseInt(v, 10, 32); err == nil {
		return n == 1
	}
	return false
}

// DebugTrace reports whether trace patches for this job carry
// debug_trace=true: CI_DEBUG_TRACE or CI_DEBUG_SERVICES is on (GL-10).
func (j *JobResponse) DebugTrace() bool {
	return VariableBool(j.Variables, "CI_DEBUG_TRACE") || VariableBool(j.Variables, "CI_DEBUG_SERVICES")
}

// RunStep is one step of a run: job, decoded only as far as vk needs to
// name it in a refusal message.
type RunStep struct {
	// Name of the step.
	Name string `json:"name"`
}

// RunSteps decodes Run (a JSON string holding an array) into its steps.
// It returns nil, nil when Run is empty.
func (j *JobResponse) RunSteps() ([]RunStep, error) {
	if j.Run == "" {
		return nil, nil
	}
	var steps []RunStep
	if err := json.Unmarshal([]byte(j.Run), &steps); err != nil {
		return nil, fmt.Errorf("gitlab: run is not a JSON array of steps: %w", err)
	}
	return steps, nil
}

// UnsupportedOptions returns an error naming every unknown executor_opts
// key of the image and the services, or nil. gitlab-runner fails such a
// job before running it (runner_system_failure, exit code 3).
func (j *JobResponse) UnsupportedOptions() error {
	errs := []error{j.Image.ExecutorOptions.Unsupported()}
	for _, s := range j.Services {
		errs = append(errs, s.ExecutorOptions.Unsupported())
	}
	return errors.Join(errs...)
}
