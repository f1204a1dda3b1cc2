package job

// Image is the job's image or one of its services (SPEC-13, SPEC-14).
type Image struct {
	// Name is the image reference, e.g. "ruby:3.3", or a build reference
	// the node resolves under its image rules. Required.
	Name string `json:"name"`
	// Alias is the service's host name; one at most (DECISIONS 8). Empty
	// for the job image and for a service without one.
	Alias string `json:"alias,omitempty"`
	// Command overrides the image's command; empty means the image's.
	Command []string `json:"command,omitempty"`
	// Entrypoint overrides the image's entrypoint; empty means the image's.
	Entrypoint []string `json:"entrypoint,omitempty"`
	// Ports the service exposes.
	Ports []Port `json:"ports,omitempty"`
	// Variables are a service's own variables (services only).
	Variables []Variable `json:"variables,omitempty"`
	// PullPolicy lists allowed pull policies in order, e.g.
	// ["always","if-not-present"]; empty means the node's default.
	PullPolicy []string `json:"pull_policy,omitempty"`
	// Platform is executor_opts.docker.platform, e.g. "arm64/v8"; empty
	// means the node's own.
	Platform string `json:"platform,omitempty"`
	// User is executor_opts.docker.user or kubernetes.user ("uid[:gid]" or
	// a name), as a string; empty means the image's user.
	User string `json:"user,omitempty"`
}

// Port is a port an image exposes.
type Port struct {
	// Number is the port number (1..65535).
	Number int `json:"number"`
	// Protocol is "http" or "https"; empty means http.
	Protocol string `json:"protocol,omitempty"`
	// Name is an optional label.
	Name string `json:"name,omitempty"`
}
