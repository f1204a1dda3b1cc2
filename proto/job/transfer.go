package job

// Artifact is one archive the node uploads to GitLab (SPEC-15, XFER-02).
type Artifact struct {
	// Name is the archive's name; empty means GitLab's default ("artifacts").
	Name string `json:"name,omitempty"`
	// Untracked: include files git does not track.
	Untracked bool `json:"untracked,omitempty"`
	// Paths are globs of files to include.
	Paths []string `json:"paths,omitempty"`
	// Exclude are globs of files to leave out.
	Exclude []string `json:"exclude,omitempty"`
	// When is "on_success", "on_failure" or "always"; the relay fills in
	// "on_success" for an empty one.
	When string `json:"when,omitempty"`
	// ArtifactType is GitLab's artifact_type, e.g. "archive", "junit".
	ArtifactType string `json:"artifact_type,omitempty"`
	// ArtifactFormat is "zip", "gzip", "raw", "zipzstd" or "tarzstd"; the
	// relay sets "zip" for an empty one (SPEC-01).
	ArtifactFormat string `json:"artifact_format,omitempty"`
	// ExpireIn is GitLab's expire_in, e.g. "1 week"; empty means the
	// project's default. Passed to GitLab verbatim.
	ExpireIn string `json:"expire_in,omitempty"`
}

// Cache is one of the job's caches (SPEC-16, XFER-07).
type Cache struct {
	// Key is the cache key, expanded and sanitised by the relay.
	Key string `json:"key"`
	// Untracked: include files git does not track.
	Untracked bool `json:"untracked,omitempty"`
	// Policy is "pull-push", "pull" or "push"; empty means pull-push.
	Policy string `json:"policy,omitempty"`
	// Paths are globs of files to cache.
	Paths []string `json:"paths,omitempty"`
	// When is "on_success", "on_failure" or "always"; empty means on_success.
	When string `json:"when,omitempty"`
	// FallbackKeys are keys tried in order when Key has no cache, expanded
	// and sanitised like Key.
	FallbackKeys []string `json:"fallback_keys,omitempty"`
}

// RegistryCredential is a registry login GitLab gave for the job's images
// (SPEC-17, AUTH-05).
type RegistryCredential struct {
	// URL is the registry, e.g. "registry.gitlab.example.com".
	URL string `json:"url"`
	// Username to log in with.
	Username string `json:"username"`
	// Password to log in with. Secret.
	Password string `json:"password"`
}

// Dependency is a job whose artifacts this job downloads (SPEC-18, XFER-06).
type Dependency struct {
	// ID is the dependency's GitLab job ID.
	ID int64 `json:"id"`
	// Token is sent as JOB-TOKEN to download its artifacts (AUTH-04). Secret.
	Token string `json:"token"`
	// Name is the dependency job's name.
	Name string `json:"name,omitempty"`
	// ArtifactsFile describes its artifacts; nil means it has none to
	// download.
	ArtifactsFile *ArtifactsFile `json:"artifacts_file,omitempty"`
}

// ArtifactsFile describes a dependency's artifacts archive.
type ArtifactsFile struct {
	// Filename is the archive's file name, e.g. "binaries.zip".
	Filename string `json:"filename"`
	// Size is the archive's size in bytes.
	Size int64 `json:"size"`
}
