package gitlabfake

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Variable is a CI/CD variable as Rails sends it in a job response. The
// zero value is an empty, protected (non-public) variable.
type Variable struct {
	// Key is the variable name.
	Key string
	// Value is the raw value (for a file variable: the file's content).
	Value string
	// Public marks predefined, non-secret variables.
	Public bool
	// File makes the runner write Value to a temp file and expand the
	// variable to its path.
	File bool
	// Masked asks the runner to replace Value by [MASKED] in the trace.
	Masked bool
	// Raw disables variable expansion inside Value.
	Raw bool
}

// Step is one script step of a job (name "script", "after_script", or any
// other name), sent with timeout = the job timeout. Empty When means
// "on_success".
type Step struct {
	Name         string
	Script       []string
	When         string
	AllowFailure bool
}

// Artifact is one artifacts: entry of a job. Empty Type means "archive",
// empty Format means "zip", empty When means "on_success".
type Artifact struct {
	Name      string
	Untracked bool
	Paths     []string
	Exclude   []string
	When      string
	ExpireIn  string
	Type      string
	Format    string
}

// Cache is one cache: entry of a job. The fake appends Rails' "-protected"
// or "-non_protected" suffix to Key and each fallback key, as Rails does.
type Cache struct {
	Key          string
	Untracked    bool
	Paths        []string
	Policy       string
	When         string
	FallbackKeys []string
}

// Image is a job image or service. Alias is used for services only.
type Image struct {
	Name       string
	Alias      string
	Entrypoint []string
	Command    []string
	PullPolicy []string
	Variables  []Variable
}

// FailureReasons is the failure_reason enum a current GitLab lists in a job
// response's features.failure_reasons (app/models/concerns/enums/ci/commit_status.rb).
var FailureReasons = []string{"unknown_failure", "script_failure", "api_failure", "stuck_or_timeout_failure", "runner_system_failure", "missing_dependency_failure", "runner_unsupported", "stale_schedule", "job_execution_timeout", "archived_failure", "unmet_prerequisites", "scheduler_failure", "data_integrity_failure", "forward_deployment_failure", "user_blocked", "project_deleted", "ci_quota_exceeded", "pipeline_loop_detected", "no_matching_runner", "trace_size_exceeded", "builds_disabled", "environment_creation_failure", "deployment_rejected", "failed_outdated_deployment_job", "job_execution_server_timeout", "stuck_pending_with_matching_runners", "stuck_pending_no_matching_runners", "no_updates_running", "no_updates_canceling", "server_timeout_running", "server_timeout_canceling", "runner_configuration_error", "runner_external_dependency_failure", "runner_interrupted", "protected_environment_failure", "insufficient_bridge_permissions", "downstream_bridge_project_not_found", "invalid_bridge_trigger", "upstream_bridge_project_not_found", "insufficient_upstream_permissions", "bridge_pipeline_is_child_pipeline", "downstream_pipeline_creation_failed", "secrets_provider_not_found", "reached_max_descendant_pipelines_depth", "ip_restriction_failure", "reached_max_pipeline_hierarchy_size", "reached_downstream_pipeline_trigger_rate_limit", "duo_workflow_not_allowed", "job_router_failure", "job_token_expired", "id_token_burned_project_path", "downstream_project_trigger_resolved_to_empty"}

// The wire types below mirror Rails' Entities::Ci::JobRequest::Response in
// key order and null/omit behaviour (see testdata/job_response_gitlab_complete.json).

type wireJob struct {
	ID            int64          `json:"id"`
	Token         string         `json:"token"`
	AllowGitFetch bool           `json:"allow_git_fetch"`
	JobInfo       wireJobInfo    `json:"job_info"`
	GitInfo       wireGitInfo    `json:"git_info"`
	RunnerInfo    wireRunnerInfo `json:"runner_info"`
	Variables     []wireVariable `json:"variables"`
	Steps         []wireStep     `json:"steps"`
	Hooks         []wireHook     `json:"hooks"`
	Image         *wireImage     `json:"image"`
	Services      []wireService  `json:"services"`
	Artifacts     []wireArtifact `json:"artifacts"`
	Cache         []wireCache    `json:"cache"`
	Credentials   []wireCred     `json:"credentials"`
	Features      wireFeatures   `json:"features"`
	Dependencies  []wireDep      `json:"dependencies"`
}

type wireJobInfo struct {
	ID                  int64   `json:"id"`
	Name                string  `json:"name"`
	Stage               string  `json:"stage"`
	PipelineID          int64   `json:"pipeline_id"`
	ProjectID           int64   `json:"project_id"`
	ProjectName         string  `json:"project_name"`
	ProjectFullPath     string  `json:"project_full_path"`
	NamespaceID         int64   `json:"namespace_id"`
	RootNamespaceID     int64   `json:"root_namespace_id"`
	OrganizationID      int64   `json:"organization_id"`
	InstanceID          string  `json:"instance_id"`
	InstanceUUID        string  `json:"instance_uuid"`
	UserID              int64   `json:"user_id"`
	ScopedUserID        *int64  `json:"scoped_user_id"`
	TimeInQueueSeconds  float64 `json:"time_in_queue_seconds"`
	InstanceRunnerCount string  `json:"project_jobs_running_on_instance_runners_count"`
	QueueSize           int64   `json:"queue_size"`
	QueueDepth          int64   `json:"queue_depth"`
}

type wireGitInfo struct {
	RepoURL          string   `json:"repo_url"`
	Ref              string   `json:"ref"`
	SHA              string   `json:"sha"`
	BeforeSHA        string   `json:"before_sha"`
	RefType          string   `json:"ref_type"`
	Refspecs         []string `json:"refspecs"`
	Depth            int      `json:"depth"`
	RepoObjectFormat string   `json:"repo_object_format"`
	Protected        *bool    `json:"protected"`
}

type wireRunnerInfo struct {
	UUID             string  `json:"uuid"`
	Timeout          int     `json:"timeout"`
	RunnerSessionURL *string `json:"runner_session_url"`
}

type wireVariable struct {
	Key    string `json:"key"`
	Value  string `json:"value"`
	Public bool   `json:"public"`
	File   bool   `json:"file,omitempty"`
	Raw    bool   `json:"raw,omitempty"`
	Masked *bool  `json:"masked,omitempty"`
}

type wireStep struct {
	Name         string   `json:"name"`
	Script       []string `json:"script"`
	Timeout      int      `json:"timeout"`
	When         string   `json:"when"`
	AllowFailure bool     `json:"allow_failure"`
}

type wireHook struct {
	Name   string   `json:"name"`
	Script []string `json:"script"`
}

type wireImage struct {
	Name       string   `json:"name"`
	Entrypoint []string `json:"entrypoint"`
	Ports      []any    `json:"ports"`
	PullPolicy []string `json:"pull_policy,omitempty"`
}

type wireService struct {
	Name       string         `json:"name"`
	Entrypoint []string       `json:"entrypoint"`
	Ports      []any          `json:"ports"`
	Alias      string         `json:"alias"`
	Command    []string       `json:"command"`
	Variables  []wireVariable `json:"variables"`
}

type wireArtifact struct {
	Name           *string  `json:"name"`
	Untracked      bool     `json:"untracked"`
	Paths          []string `json:"paths"`
	Exclude        []string `json:"exclude,omitempty"`
	When           string   `json:"when"`
	ExpireIn       string   `json:"expire_in"`
	ArtifactType   string   `json:"artifact_type"`
	ArtifactFormat string   `json:"artifact_format"`
}

type wireCache struct {
	Key          string   `json:"key"`
	Untracked    bool     `json:"untracked"`
	Paths        []string `json:"paths"`
	Policy       string   `json:"policy"`
	When         string   `json:"when"`
	FallbackKeys []string `json:"fallback_keys"`
}

type wireCred struct {
	Type     string `json:"type"`
	URL      string `json:"url"`
	Username string `json:"username"`
	Password string `json:"password"`
}

type wireFeatures struct {
	TraceSections  bool     `json:"trace_sections"`
	FailureReasons []string `json:"failure_reasons"`
}

type wireDep struct {
	ID            int64          `json:"id"`
	Name          string         `json:"name"`
	Token         string         `json:"token"`
	ArtifactsFile *wireArtFileID `json:"artifacts_file,omitempty"`
}

type wireArtFileID struct {
	Filename string `json:"filename"`
	Size     int64  `json:"size"`
}

func boolPtr(b bool) *bool { return &b }

func wireVars(vs []Variable, userDefined bool) []wireVariable {
	out := make([]wireVariable, 0, len(vs))
	for _, v := range vs {
		w := wireVariable{Key: v.Key, Value: v.Value, Public: v.Public, File: v.File, Raw: v.Raw}
		if v.Masked || (userDefined && !v.Public) {
			w.Masked = boolPtr(v.Masked)
		}
		out = append(out, w)
	}
	return out
}

// protectedSuffix is what Rails appends to cache keys.
func protectedSuffix(protected bool) string {
	if protected {
		return "-protected"
	}
	return "-non_protected"
}

// slug is CI_COMMIT_REF_SLUG: lower-case, non-alphanumerics to '-', ≤63.
func slug(s string) string {
	b := []byte(strings.ToLower(s))
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			b[i] = '-'
		}
	}
	out := strings.Trim(string(b), "-")
	if len(out) > 63 {
		out = strings.TrimRight(out[:63], "-")
	}
	return out
}

// renderJobLocked builds the 201 body for j. s.mu must be held.
func (s *Server) renderJobLocked(j *job, now time.Time) ([]byte, error) {
	p := j.pipeline
	proj := p.project
	base, err := url.Parse(s.url)
	if err != nil {
		return nil, fmt.Errorf("gitlabfake: base url: %w", err)
	}
	repoURL := fmt.Sprintf("%s://gitlab-ci-token:%s@%s/%s.git", base.Scheme, j.token, base.Host, proj.path)
	timeout := int(j.spec.Timeout / time.Second)
	if timeout <= 0 {
		timeout = 3600
	}
	_, name := splitPath(proj.path)
	resp := wireJob{
		ID:            j.id,
		Token:         j.token,
		AllowGitFetch: true,
		JobInfo: wireJobInfo{
			ID: j.id, Name: j.spec.Name, Stage: j.spec.Stage, PipelineID: p.id,
			ProjectID: proj.id, ProjectName: name, ProjectFullPath: proj.path,
			NamespaceID: 1, RootNamespaceID: 1, OrganizationID: 1,
			InstanceID: "1", InstanceUUID: "a1b2c3d4-0000-4000-8000-00000000fa4e", UserID: 1,
			TimeInQueueSeconds:  now.Sub(j.queuedAt).Seconds(),
			InstanceRunnerCount: "0",
			QueueSize:           int64(s.queueLenLocked()), QueueDepth: 0,
		},
		GitInfo: wireGitInfo{
			RepoURL: repoURL, Ref: p.ref, SHA: p.sha, BeforeSHA: zeroSHA, RefType: "branch",
			Refspecs: []string{
				fmt.Sprintf("+refs/pipelines/%d:refs/pipelines/%d", p.id, p.id),
				fmt.Sprintf("+refs/heads/%s:refs/remotes/origin/%s", p.ref, p.ref),
			},
			Depth: proj.depth, RepoObjectFormat: "sha1", Protected: boolPtr(proj.protectedRef(p.ref)),
		},
		RunnerInfo:   wireRunnerInfo{UUID: j.runner.uuid, Timeout: timeout},
		Variables:    s.jobVariables(j, now, base, repoURL),
		Steps:        jobSteps(j.spec, timeout),
		Hooks:        []wireHook{},
		Image:        jobImage(j.spec),
		Services:     jobServices(j.spec),
		Artifacts:    jobArtifacts(j.spec),
		Cache:        jobCaches(j.spec, protectedSuffix(proj.protectedRef(p.ref))),
		Credentials:  []wireCred{},
		Features:     wireFeatures{TraceSections: true, FailureReasons: FailureReasons},
		Dependencies: s.jobDependenciesLocked(j),
	}
	if len(j.spec.Response) > 0 {
		return overlayResponse(j.spec.Response, resp)
	}
	return json.Marshal(resp)
}

// splitPath splits a project path into its namespace and name; a path
// without a slash is both.
func splitPath(path string) (ns, name string) {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[:i], path[i+1:]
	}
	return path, path
}

// jobVariables are GitLab's predefined variables for j, then the
// project's, the pipeline's and the job's own, in that order.
func (s *Server) jobVariables(j *job, now time.Time, base *url.URL, repoURL string) []wireVariable {
	p := j.pipeline
	proj := p.project
	ns, name := splitPath(proj.path)
	predef := []Variable{
		{Key: "CI_PIPELINE_ID", Value: strconv.FormatInt(p.id, 10), Public: true},
		{Key: "CI_PIPELINE_URL", Value: fmt.Sprintf("%s/%s/-/pipelines/%d", s.url, proj.path, p.id), Public: true},
		{Key: "CI_JOB_ID", Value: strconv.FormatInt(j.id, 10), Public: true},
		{Key: "CI_JOB_URL", Value: fmt.Sprintf("%s/%s/-/jobs/%d", s.url, proj.path, j.id), Public: true},
		{Key: "CI_JOB_TOKEN", Value: j.token, Masked: true},
		{Key: "CI_JOB_STARTED_AT", Value: now.UTC().Format(time.RFC3339), Public: true},
		{Key: "CI_REPOSITORY_URL", Value: repoURL},
		{Key: "CI", Value: "true", Public: true},
		{Key: "GITLAB_CI", Value: "true", Public: true},
		{Key: "CI_SERVER_URL", Value: s.url, Public: true},
		{Key: "CI_SERVER_HOST", Value: base.Hostname(), Public: true},
		{Key: "CI_PROJECT_ID", Value: strconv.FormatInt(proj.id, 10), Public: true},
		{Key: "CI_PROJECT_NAME", Value: name, Public: true},
		{Key: "CI_PROJECT_NAMESPACE", Value: ns, Public: true},
		{Key: "CI_PROJECT_PATH", Value: proj.path, Public: true},
		{Key: "CI_COMMIT_SHA", Value: p.sha, Public: true},
		{Key: "CI_COMMIT_BEFORE_SHA", Value: zeroSHA, Public: true},
		{Key: "CI_COMMIT_REF_NAME", Value: p.ref, Public: true},
		{Key: "CI_COMMIT_REF_SLUG", Value: slug(p.ref), Public: true},
		{Key: "CI_COMMIT_BRANCH", Value: p.ref, Public: true},
		{Key: "CI_DEFAULT_BRANCH", Value: proj.defaultBranch, Public: true},
		{Key: "CI_JOB_NAME", Value: j.spec.Name, Public: true},
		{Key: "CI_JOB_STAGE", Value: j.spec.Stage, Public: true},
	}
	vars := wireVars(predef, false)
	vars = append(vars, wireVars(proj.variables, true)...)
	vars = append(vars, wireVars(p.variables, true)...)
	return append(vars, wireVars(j.spec.Variables, true)...)
}

// jobSteps are the spec's steps (when "" is on_success), or a script step
// and, when there is one, an after_script step that always runs.
func jobSteps(spec JobSpec, timeout int) []wireStep {
	steps := []wireStep{}
	if spec.Steps != nil {
		for _, st := range spec.Steps {
			when := st.When
			if when == "" {
				when = "on_success"
			}
			steps = append(steps, wireStep{Name: st.Name, Script: nonNil(st.Script), Timeout: timeout, When: when, AllowFailure: st.AllowFailure})
		}
		return steps
	}
	steps = append(steps, wireStep{Name: "script", Script: nonNil(spec.Script), Timeout: timeout, When: "on_success"})
	if len(spec.AfterScript) > 0 {
		steps = append(steps, wireStep{Name: "after_script", Script: spec.AfterScript, Timeout: timeout, When: "always", AllowFailure: true})
	}
	return steps
}

// jobImage is the job's image, nil when it names none.
func jobImage(spec JobSpec) *wireImage {
	if spec.Image.Name == "" {
		return nil
	}
	return &wireImage{Name: spec.Image.Name, Entrypoint: spec.Image.Entrypoint, Ports: []any{}, PullPolicy: spec.Image.PullPolicy}
}

func jobServices(spec JobSpec) []wireService {
	services := []wireService{}
	for _, sv := range spec.Services {
		services = append(services, wireService{Name: sv.Name, Entrypoint: sv.Entrypoint, Ports: []any{}, Alias: sv.Alias, Command: sv.Command, Variables: wireVars(sv.Variables, false)})
	}
	return services
}

// jobArtifacts are the job's artifacts with GitLab's defaults: when
// on_success, type archive, format zip.
func jobArtifacts(spec JobSpec) []wireArtifact {
	arts := []wireArtifact{}
	for _, a := range spec.Artifacts {
		w := wireArtifact{Untracked: a.Untracked, Paths: nonNil(a.Paths), Exclude: a.Exclude, When: a.When, ExpireIn: a.ExpireIn, ArtifactType: a.Type, ArtifactFormat: a.Format}
		if a.Name != "" {
			n := a.Name
			w.Name = &n
		}
		if w.When == "" {
			w.When = "on_success"
		}
		if w.ArtifactType == "" {
			w.ArtifactType = "archive"
		}
		if w.ArtifactFormat == "" {
			w.ArtifactFormat = "zip"
		}
		arts = append(arts, w)
	}
	return arts
}

// jobCaches are the job's caches with GitLab's defaults (key "default",
// policy pull-push, when on_success); every key and fallback key carries
// sfx, the suffix that keeps protected refs' caches apart.
func jobCaches(spec JobSpec, sfx string) []wireCache {
	caches := []wireCache{}
	for _, c := range spec.Cache {
		fb := []string{}
		for _, k := range c.FallbackKeys {
			fb = append(fb, k+sfx)
		}
		key := c.Key
		if key == "" {
			key = "default"
		}
		w := wireCache{Key: key + sfx, Untracked: c.Untracked, Paths: nonNil(c.Paths), Policy: c.Policy, When: c.When, FallbackKeys: fb}
		if w.Policy == "" {
			w.Policy = "pull-push"
		}
		if w.When == "" {
			w.When = "on_success"
		}
		caches = append(caches, w)
	}
	return caches
}

// jobDependenciesLocked lists the jobs whose artifacts j downloads, each
// with the token to download them with: j's own, or with
// LegacyDependencyTokens the dependency's. s.mu must be held.
func (s *Server) jobDependenciesLocked(j *job) []wireDep {
	deps := []wireDep{}
	for _, d := range s.dependenciesLocked(j) {
		w := wireDep{ID: d.id, Name: d.spec.Name, Token: j.token}
		if s.opts.LegacyDependencyTokens {
			w.Token = d.token
		}
		if a := d.archive(); a != nil {
			w.ArtifactsFile = &wireArtFileID{Filename: a.Filename, Size: int64(len(a.Data))}
		}
		deps = append(deps, w)
	}
	return deps
}

// overlayResponse returns raw with what ties a job to this fake taken from
// own: id, token, git_info, and job_info's id, project_id, project_name and
// project_full_path.
func overlayResponse(raw json.RawMessage, own wireJob) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("gitlabfake: JobSpec.Response: %w", err)
	}
	set := func(into map[string]json.RawMessage, key string, v any) error {
		b, err := json.Marshal(v)
		into[key] = b
		return err
	}
	info := map[string]json.RawMessage{}
	if b, ok := m["job_info"]; ok {
		if err := json.Unmarshal(b, &info); err != nil {
			return nil, fmt.Errorf("gitlabfake: JobSpec.Response job_info: %w", err)
		}
	}
	for _, err := range []error{
		set(m, "id", own.ID), set(m, "token", own.Token), set(m, "git_info", own.GitInfo),
		set(info, "id", own.JobInfo.ID), set(info, "project_id", own.JobInfo.ProjectID),
		set(info, "project_name", own.JobInfo.ProjectName), set(info, "project_full_path", own.JobInfo.ProjectFullPath),
	} {
		if err != nil {
			return nil, err
		}
	}
	if err := set(m, "job_info", info); err != nil {
		return nil, err
	}
	return json.Marshal(m)
}

const zeroSHA = "0000000000000000000000000000000000000000"

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
