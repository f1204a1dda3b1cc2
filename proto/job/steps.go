package job

// Step is one script step of a job (SPEC-12).
type Step struct {
	// Name is "script", "after_script", "release" or another name; the
	// node's stage for it is step_<lower(name)>. Required.
	Name string `json:"name"`
	// Script holds the step's command lines in order.
	Script []string `json:"script,omitempty"`
	// TimeoutSecs is the step's timeout in seconds as GitLab sent it; 0
	// means unset (the job's TimeoutSecs bounds the whole job). Carried for
	// fidelity: like gitlab-runner, the node does not consult it.
	TimeoutSecs int64 `json:"timeout_secs,omitempty"`
	// When is "on_success", "on_failure" or "always"; the relay fills in
	// "on_success" for an empty one.
	When string `json:"when,omitempty"`
	// AllowFailure as GitLab sent it (GitLab, not the node, applies it).
	AllowFailure bool `json:"allow_failure,omitempty"`
}

// Step names GitLab uses.
const (
	StepScript      = "script"
	StepAfterScript = "after_script"
	StepRelease     = "release"
)

// Hook is a script run around the checkout (SPEC-21).
type Hook struct {
	// Name is HookPreGetSources or HookPostGetSources; others are ignored by
	// the node.
	Name string `json:"name"`
	// Script holds the hook's command lines in order.
	Script []string `json:"script,omitempty"`
}

// Hook names.
const (
	HookPreGetSources  = "pre_get_sources_script"
	HookPostGetSources = "post_get_sources_script"
)
