package job

// CiJob is a GitLab CI job as the node runs it (SPEC-01..25). vk-gitlab
// builds it from GitLab's job response; the hub carries it; the node runs
// it. Fields are listed in the order of the spec's translation table.
type CiJob struct {
	// Job identifies the job in GitLab (SPEC-03, SPEC-04, SPEC-25).
	Job JobInfo `json:"job"`
	// Token is the job token (GitLab response `token`, CI_JOB_TOKEN): the
	// node clones and uploads artifacts with it. Secret. Required.
	Token string `json:"token"`
	// Sources says what to check out (SPEC-03, SPEC-07, SPEC-08).
	Sources Sources `json:"sources"`
	// TimeoutSecs is the job's timeout in seconds (runner_info.timeout,
	// SPEC-09), after which the job fails `timeout`. The relay fills in
	// gitlab-runner's default (7200) when GitLab sends 0 or less, so 0 here
	// is invalid.
	TimeoutSecs int64 `json:"timeout_secs"`
	// Variables are the job's variables in GitLab's order followed by the
	// runner's own (SPEC-11); for duplicated keys the last one wins. The node
	// appends the environment's (CI_PROJECT_DIR, …) itself.
	Variables []Variable `json:"variables,omitempty"`
	// Steps are the job's script steps in order (SPEC-12): `script`,
	// `after_script`, `release` or any other name.
	Steps []Step `json:"steps,omitempty"`
	// Image is the job image (SPEC-13, SPEC-14); nil means the node's
	// default image.
	Image *Image `json:"image,omitempty"`
	// Services are the job's service containers (SPEC-13), each with one
	// alias at most (the relay splits GitLab's alias lists; DECISIONS 8).
	Services []Image `json:"services,omitempty"`
	// Artifacts are the archives to upload (SPEC-15), in GitLab's order.
	Artifacts []Artifact `json:"artifacts,omitempty"`
	// Caches are the job's caches (SPEC-16), keys already expanded and
	// sanitised by the relay.
	Caches []Cache `json:"caches,omitempty"`
	// RegistryCredentials are GitLab's credentials of type registry
	// (SPEC-17), used only to pull the job's images (AUTH-05).
	RegistryCredentials []RegistryCredential `json:"registry_credentials,omitempty"`
	// Dependencies are jobs whose artifacts this job downloads (SPEC-18).
	Dependencies []Dependency `json:"dependencies,omitempty"`
	// Trace is how the node shapes the job's output (SPEC-19, TRACE-05,
	// TRACE-08).
	Trace TraceSettings `json:"trace"`
	// Hooks are scripts run around the checkout (SPEC-21).
	Hooks []Hook `json:"hooks,omitempty"`
	// ServerURL is the runner's configured GitLab URL (SPEC-25), e.g.
	// "https://gitlab.example.com"; the node calls per-job endpoints there
	// and sets CI_SERVER_URL-derived variables from it. Required.
	ServerURL string `json:"server_url"`
	// ServerCAPEM is the PEM content of the runner's tls_ca_file (SPEC-24),
	// trusted for GitLab's TLS and written for CI_SERVER_TLS_CA_FILE. Empty
	// means the system roots and no CI_SERVER_TLS_CA_FILE. Not secret.
	ServerCAPEM string `json:"server_ca_pem,omitempty"`
	// Notices are lines the relay's translation produced for the job's
	// trace (the "Job triggered by policy" line (SPEC-23), cache key
	// warnings, dropped service aliases of DECISIONS 8). The node writes them right after its header,
	// so the trace stays the node's output byte for byte (TRACE-06) and no
	// offset shifts between the hub and GitLab. Empty means none.
	Notices []Notice `json:"notices,omitempty"`
}

// Notice is one line the node writes into the trace on the relay's behalf.
type Notice struct {
	// Level styles the line as gitlab-runner's logger does: "info"
	// (green), "warning" (yellow, "WARNING: "), "error" (red, "ERROR: ") or
	// "" (plain). Unknown levels print plain.
	Level string `json:"level,omitempty"`
	// Text is the line without styling or newline.
	Text string `json:"text"`
}

// JobInfo identifies a job in GitLab (SPEC-03, SPEC-04, SPEC-25). IDs are
// GitLab's; 0 means GitLab did not send it.
type JobInfo struct {
	// ID is GitLab's job ID (response `id`). Required.
	ID int64 `json:"id"`
	// Name is the job's name in .gitlab-ci.yml (job_info.name).
	Name string `json:"name,omitempty"`
	// Stage is the pipeline stage's name (job_info.stage).
	Stage string `json:"stage,omitempty"`
	// PipelineID is job_info.pipeline_id.
	PipelineID int64 `json:"pipeline_id,omitempty"`
	// ProjectID is job_info.project_id. Required: the hub answers 400 for
	// a job without a project (API-46).
	ProjectID int64 `json:"project_id"`
	// ProjectName is job_info.project_name.
	ProjectName string `json:"project_name,omitempty"`
	// ProjectPath is job_info.project_full_path, e.g. "acme/web".
	ProjectPath string `json:"project_path,omitempty"`
	// NamespaceID is job_info.namespace_id.
	NamespaceID int64 `json:"namespace_id,omitempty"`
	// RootNamespaceID is job_info.root_namespace_id.
	RootNamespaceID int64 `json:"root_namespace_id,omitempty"`
	// UserID is job_info.user_id, the user who triggered the job.
	UserID int64 `json:"user_id,omitempty"`
	// RunnerID is the runner's ID as /runners/verify returned it (SPEC-25).
	RunnerID int64 `json:"runner_id,omitempty"`
}

// Sources says what the node checks out (SPEC-03, SPEC-07, SPEC-08).
type Sources struct {
	// RepoURL is git_info.repo_url with any credentials stripped (SPEC-07);
	// the node supplies the job token through a credential helper
	// (STAGE-03). Required.
	RepoURL string `json:"repo_url"`
	// RepoObjectFormat is "sha1" or "sha256"; empty means sha1.
	RepoObjectFormat string `json:"repo_object_format,omitempty"`
	// Ref is the branch or tag name (git_info.ref).
	Ref string `json:"ref,omitempty"`
	// SHA is the commit to check out (git_info.sha).
	SHA string `json:"sha,omitempty"`
	// BeforeSHA is the previous head of the ref (git_info.before_sha).
	BeforeSHA string `json:"before_sha,omitempty"`
	// RefType is "branch" or "tag" (git_info.ref_type).
	RefType string `json:"ref_type,omitempty"`
	// Refspecs are what to fetch, e.g.
	// "+refs/heads/main:refs/remotes/origin/main"; empty means the node's
	// default for Ref.
	Refspecs []string `json:"refspecs,omitempty"`
	// Depth is the shallow-clone depth; 0 means a full clone.
	Depth int `json:"depth,omitempty"`
	// Protected says whether the ref is protected; nil means GitLab did not
	// say (treated as unprotected for cache separation, XFER-08).
	Protected *bool `json:"protected,omitempty"`
	// AllowFetch is the response's allow_git_fetch: the project allows the
	// fetch strategy (SPEC-03).
	AllowFetch bool `json:"allow_fetch,omitempty"`
	// CorrelationID is the X-Request-Id of the job request that delivered
	// the job, as GitLab answered it (else as the relay sent it). Unless
	// FF_USE_GITALY_CORRELATION_ID is off, get_sources sends it to Gitaly
	// as X-Gitaly-Correlation-ID and prints it, as gitlab-runner does;
	// empty means none.
	CorrelationID string `json:"correlation_id,omitempty"`
}
