package gitlab

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
)

// ExecutorOptions is an image's or service's executor_opts:
// {docker: {platform, user}, kubernetes: {user}}. Keys outside that set, at
// any level, do not fail decoding: they are recorded and reported by
// [ExecutorOptions.Unsupported], as gitlab-runner 19.5 records them
// (common/spec/spec.go) and then fails the job before running it. vk does
// not advertise image_executor_opts (GL-06) but honours the known keys
// (SPEC-14).
type ExecutorOptions struct {
	// Docker holds executor_opts.docker.
	Docker DockerOptions `json:"docker"`
	// Kubernetes holds executor_opts.kubernetes.
	Kubernetes KubernetesOptions `json:"kubernetes"`

	unknown []string // top-level keys other than docker and kubernetes, sorted
}

// DockerOptions is executor_opts.docker.
type DockerOptions struct {
	// Platform, e.g. "linux/arm64" or "arm64/v8".
	Platform string `json:"platform,omitempty"`
	// User to run as: a name, "uid" or "uid:gid" (GitLab may send a number).
	User StringOrInt `json:"user,omitempty"`

	unknown []string // keys other than platform and user, sorted
}

// KubernetesOptions is executor_opts.kubernetes.
type KubernetesOptions struct {
	// User to run as, "uid[:gid]" (GitLab may send a number).
	User StringOrInt `json:"user,omitempty"`

	unknown []string // keys other than user, sorted
}

// StringOrInt is a JSON string or integer, kept as its decimal string
// ("1000" for both 1000 and "1000"). It encodes as a string.
type StringOrInt string

// UnmarshalJSON accepts a string, an integer or null (as "").
func (s *StringOrInt) UnmarshalJSON(data []byte) error {
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		*s = ""
		return nil
	}
	var str string
	if err := json.Unmarshal(data, &str); err == nil {
		*s = StringOrInt(str)
		return nil
	}
	var n int64
	if err := json.Unmarshal(data, &n); err == nil {
		*s = StringOrInt(strconv.FormatInt(n, 10))
		return nil
	}
	return fmt.Errorf("gitlab: executor option is neither a string nor an integer: %s", data)
}

// supported executor_opts keys, sorted, as gitlab-runner lists them.
var (
	executorOptsSections = []string{"docker", "kubernetes"}
	dockerOptsKeys       = []string{"platform", "user"}
	kubernetesOptsKeys   = []string{"user"}
)

// UnsupportedOptionsError names executor_opts keys gitlab-runner does not
// know. Its message matches gitlab-runner's:
// `Unsupported "image" options [foo] for "docker executor"; supported options are [platform user]`.
type UnsupportedOptionsError struct {
	// Section is what the options belong to ("image").
	Section string
	// Executor is the level: "executor_opts", "docker executor" or
	// "kubernetes executor".
	Executor string
	// Unsupported are the unknown keys, sorted.
	Unsupported []string
	// Supported are the keys known at that level, sorted.
	Supported []string
}

// Error implements error.
func (e *UnsupportedOptionsError) Error() string {
	return fmt.Sprintf("Unsupported %q options %v for %q; supported options are %v",
		e.Section, e.Unsupported, e.Executor, e.Supported)
}

// unknownKeys returns the keys of the JSON object data that are not in
// known, sorted; nil for anything that is not an object.
func unknownKeys(data []byte, known []string) []string {
	var m map[string]json.RawMessage
	if json.Unmarshal(data, &m) != nil {
		return nil
	}
	var out []string
	for k := range m {
		if !slices.Contains(known, k) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func isNull(data []byte) bool { return bytes.Equal(bytes.TrimSpace(data), []byte("null")) }

// UnmarshalJSON decodes executor_opts, recording unknown keys.
func (o *ExecutorOptions) UnmarshalJSON(data []byte) error {
	*o = ExecutorOptions{}
	if isNull(data) {
		return nil
	}
	type plain ExecutorOptions
	var p plain
	if err := json.Unmarshal(data, &p); err != nil {
		return err
	}
	*o = ExecutorOptions(p)
	o.unknown = unknownKeys(data, executorOptsSections)
	return nil
}

// UnmarshalJSON decodes executor_opts.docker, recording unknown keys.
func (o *DockerOptions) UnmarshalJSON(data []byte) error {
	*o = DockerOptions{}
	if isNull(data) {
		return nil
	}
	type plain DockerOptions
	var p plain
	if err := json.Unmarshal(data, &p); err != nil {
		return err
	}
	*o = DockerOptions(p)
	o.unknown = unknownKeys(data, dockerOptsKeys)
	return nil
}

// UnmarshalJSON decodes executor_opts.kubernetes, recording unknown keys.
func (o *KubernetesOptions) UnmarshalJSON(data []byte) error {
	*o = KubernetesOptions{}
	if isNull(data) {
		return nil
	}
	type plain KubernetesOptions
	var p plain
	if err := json.Unmarshal(data, &p); err != nil {
		return err
	}
	*o = KubernetesOptions(p)
	o.unknown = unknownKeys(data, kubernetesOptsKeys)
	return nil
}

// Unsupported returns an error (joining *UnsupportedOptionsError values)
// naming every unknown key at every level, or nil when all keys are known.
func (o ExecutorOptions) Unsupported() error {
	var errs []error
	add := func(executor string, unknown, supported []string) {
		if len(unknown) > 0 {
			errs = append(errs, &UnsupportedOptionsError{
				Section: "image", Executor: executor,
				Unsupported: slices.Clone(unknown), Supported: slices.Clone(supported),
			})
		}
	}
	add("executor_opts", o.unknown, executorOptsSections)
	add("docker executor", o.Docker.unknown, dockerOptsKeys)
	add("kubernetes executor", o.Kubernetes.unknown, kubernetesOptsKeys)
	return errors.Join(errs...)
}

// User returns the user the image runs as: docker.user, else
// kubernetes.user, else "" (SPEC-14).
func (o ExecutorOptions) User() string {
	if o.Docker.User != "" {
		return string(o.Docker.User)
	}
	return string(o.Kubernetes.User)
}
