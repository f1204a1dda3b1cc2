package node

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	osexec "os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/vk-ci/vk/internal/conffile"
	"github.com/vk-ci/vk/node/exec/oci"
	"github.com/vk-ci/vk/proto/client"
)

// ConfigVersion is the only node.toml `version` this build reads.
const ConfigVersion = 1

// Defaults (docs/node.md, docs/defaults.md).
const (
	// DefaultStateDir holds the node key, hub URL, CA and ID from `vk node
	// join`, the journal and the output spools.
	DefaultStateDir = "/var/lib/vk/node"
	// DefaultImageCacheIdleSecs is how long an unused image stays cached
	// (PLACE-15, DECISIONS 10).
	DefaultImageCacheIdleSecs = 1800
	// DefaultShutdownTimeoutSecs is how long `vk node run` lets running
	// jobs finish after SIGTERM before interrupting them.
	DefaultShutdownTimeoutSecs = 3600
	// DefaultReserveMem is kept back for the host when memory is
	// detected.
	DefaultReserveMem = client.Size(1 << 30)
	// DefaultReserveDisk is kept back for the host when disk is detected.
	DefaultReserveDisk = client.Size(5 << 30)
	// DefaultSpoolLimit is how many output bytes a job may produce beyond
	// the hub's last ack before its writes block: 64 MiB, so a job keeps
	// running through a hub outage (FAIL-18) while at most 4 MiB is ever
	// in flight (NODE-11).
	DefaultSpoolLimit = client.Size(64 << 20)
)

// Runner values of [NodeSection.Runner] (PLACE-10).
const (
	// RunnerUnset detects: none unless a gitlab-runner unit or binary is
	// present.
	RunnerUnset = ""
	// RunnerNone: the host takes placed jobs only.
	RunnerNone = "none"
	// RunnerLocal: the host runs its own gitlab-runner with the vk
	// executor; the node refuses new offers with runner (PLACE-08).
	RunnerLocal = "local"
)

// Executor backends of [ExecutorConfig.Backend].
const (
	// BackendProcess runs jobs under bash in per-job directories.
	BackendProcess = "process"
	// BackendOCI runs every job in its image (or [ExecutorConfig.DefaultImage])
	// with runc (node/exec/oci); a job without either fails
	// configuration. The node refuses to start when runc, root or cgroup
	// v1 is missing.
	BackendOCI = "oci"
	// BackendAuto runs every job as [BackendMicroVM] does where a probe
	// guest boots under KVM at start (QEMU, a guest kernel and vk-agent
	// present; never under emulation). Elsewhere it runs a job in a
	// container when it names an image (or the node has a default image)
	// and the container backend is available here (oci.Available), else
	// an imageless job in the process backend; a job naming an image
	// fails configuration without a container backend unless
	// [ExecutorConfig.ImageFallback] is "host".
	BackendAuto = "auto"
	// BackendMicroVM runs every job in its own QEMU microVM
	// (node/exec/microvm, [MicroVMConfig]); the node refuses to start
	// when QEMU, the guest kernel or vk-agent is missing.
	BackendMicroVM = "microvm"
)

// Values of [ExecutorConfig.ImageFallback].
const (
	// ImageFallbackFail fails an image job configuration when auto has no
	// container backend (the default).
	ImageFallbackFail = "fail"
	// ImageFallbackHost runs it on the host, its image ignored.
	ImageFallbackHost = "host"
)

// Guest credential modes of [RegistryConfig.GuestCredential] (XFER-15).
const (
	// GuestCredentialNode: caches use the node's own credential.
	GuestCredentialNode = "node"
	// GuestCredentialJob: jobs without a cache repository run without
	// caches.
	GuestCredentialJob = "job"
)

// ErrConfig wraps every problem [Config.Validate] finds.
var ErrConfig = errors.New("node: invalid config")

// Config is node.toml (STYLE C13): defaults from [DefaultConfig], then the
// file, then flags. One tag set; unknown keys are errors.
type Config struct {
	// Version must be [ConfigVersion].
	Version int `toml:"version"`
	// Node is the [node] table.
	Node NodeSection `toml:"node"`
	// Resources is what the node offers to placed work; zero fields are
	// detected from the host minus the reserve.
	Resources ResourcesConfig `toml:"resources"`
	// Executor is the [executor] table.
	Executor ExecutorConfig `toml:"executor"`
	// Registry is the node's OCI registry for caches (XFER-*).
	Registry RegistryConfig `toml:"registry"`
	// Output tunes the per-job output spool.
	Output OutputConfig `toml:"output"`
}

// NodeSection is [node].
type NodeSection struct {
	// Name is shown in traces and the UI; "" means the host name.
	Name string `toml:"name"`
	// Hub is the hub's base URL (https://host:port); "" means the URL
	// stored in the state dir by `vk node join`.
	Hub string `toml:"hub"`
	// Hubs are further hub instances' base URLs (https://host:port) on
	// the same database: the node holds a session to hub and to each of
	// these and follows the leader (docs/ha.md).
	Hubs []string `toml:"hubs"`
	// StateDir holds key, CA, ID, journal and spools; "" means
	// DefaultStateDir.
	StateDir string `toml:"state_dir"`
	// Labels are reported in the inventory (PLACE-02).
	Labels []string `toml:"labels"`
	// Pools is a hint shown until the hub's settings name the pools.
	Pools []string `toml:"pools"`
	// Runner is "none", "local" or unset (PLACE-10).
	Runner string `toml:"runner"`
	// ImageCacheIdleSecs: an image unused this long leaves the cache
	// (PLACE-15); 0 means the default 1800.
	ImageCacheIdleSecs int `toml:"image_cache_idle_secs"`
	// ShutdownTimeoutSecs: after SIGTERM running jobs get this long to
	// finish before they are interrupted (FAIL-08).
	ShutdownTimeoutSecs int `toml:"shutdown_timeout_secs"`
	// MetricsListen is a loopback host:port serving /metrics; "" means no
	// listener.
	MetricsListen string `toml:"metrics_listen"`
}

// ResourcesConfig is [resources]. Zero Mem, Disk or CPUs are detected:
// MemTotal from /proc/meminfo minus ReserveMem, the builds dir's file
// system size minus ReserveDisk, the host's CPUs minus ReserveCPUs.
type ResourcesConfig struct {
	// Mem is the memory jobs may use in total; 0 detects it.
	Mem client.Size `toml:"mem"`
	// Disk is the scratch disk jobs may use in total; 0 detects it.
	Disk client.Size `toml:"disk"`
	// CPUs is the number of CPUs jobs may use in total; 0 detects it.
	CPUs int `toml:"cpus"`
	// ReserveMem is kept back from detected memory for the host.
	ReserveMem client.Size `toml:"reserve_mem"`
	// ReserveDisk is kept back from the detected disk for the host.
	ReserveDisk client.Size `toml:"reserve_disk"`
	// ReserveCPUs is kept back from the detected CPUs for the host.
	ReserveCPUs int `toml:"reserve_cpus"`
}

// ExecutorConfig is [executor].
type ExecutorConfig struct {
	// Backend is process (default: every job under bash on the host, its
	// image ignored with a warning), oci (every job in a container) or
	// auto (a container when the job has an image and runc and cgroup v1
	// are available, else process).
	Backend string `toml:"backend"`
	// DefaultImage is the image of a job that names none, for the oci and
	// auto backends; "" means such a job runs in the process backend
	// (auto) or fails configuration (oci).
	DefaultImage string `toml:"default_image"`
	// RequireImage makes a job without an image (its own or DefaultImage)
	// fail configuration (FAIL-05) instead of running in the process
	// backend (auto).
	RequireImage bool `toml:"require_image"`
	// Runc is the runtime binary of the oci backend; "" means runc (or,
	// with [OCIConfig.Runtime] runsc, runsc) from PATH.
	Runc string `toml:"runc"`
	// OCI is [executor.oci]: the oci backend's runtime.
	OCI OCIConfig `toml:"oci"`
	// MicroVM is [executor.microvm]: the microvm backend's QEMU, guest
	// kernel and accelerator.
	MicroVM MicroVMConfig `toml:"microvm"`
	// Images is [executor.images]: how the oci backend finds and keeps
	// images.
	Images ImagesConfig `toml:"images"`
	// BuildsDir is where jobs' directories are made; "" means
	// <state_dir>/builds.
	BuildsDir string `toml:"builds_dir"`
	// User runs job scripts of the process backend as "uid:gid"; "" means
	// the node's own user. When that is root (the shipped systemd unit
	// runs the node as root), the node refuses to start unless
	// AllowRootJobs is set: a job script as root owns the host.
	User string `toml:"user"`
	// AllowRootJobs lets the process backend run job scripts as root.
	// Default false.
	AllowRootJobs bool `toml:"allow_root_jobs"`
	// ImageFallback is what backend auto does with a job that names an
	// image when the container backend is unavailable here: "" or "fail"
	// (the default) fails it configuration with a trace line saying what
	// to install; "host" runs it on the host, its image ignored, with a
	// warning.
	ImageFallback string `toml:"image_fallback"`
	// CgroupParent is the cgroup jobs' cgroups are made under; "" means the
	// backend's default.
	CgroupParent string `toml:"cgroup_parent"`
	// Cgroups confines jobs with cgroups where the host has them.
	Cgroups bool `toml:"cgroups"`
	// Schedule is [executor.schedule].
	Schedule ScheduleConfig `toml:"schedule"`
}

// OCIConfig is [executor.oci].
type OCIConfig struct {
	// Runtime is runc (default: containers share the host's kernel) or
	// runsc (gVisor: each job's container on gVisor's user-space
	// kernel; no services yet).
	Runtime string `toml:"runtime"`
	// Platform is gVisor's platform under runsc; "" means ptrace, which
	// needs no virtualisation.
	Platform string `toml:"platform"`
}

// ociRuntimeBinary is the oci backend's runtime binary: [executor] runc,
// else the runtime's own name.
func (c Config) ociRuntimeBinary() string {
	if c.Executor.Runc != "" {
		return c.Executor.Runc
	}
	if c.Executor.OCI.Runtime == oci.RuntimeRunsc {
		return oci.RuntimeRunsc
	}
	return oci.DefaultRunc
}

// ImagesConfig is [executor.images] (node/exec/oci/imagestore). The
// image cache lives in <state_dir>/images; an image unused for
// [NodeSection.ImageCacheIdleSecs] is removed (PLACE-15).
type ImagesConfig struct {
	// Registry is the registry host[:port] for image names that do not
	// name one (e.g. "ruby:3.3"); "" means Docker Hub.
	Registry string `toml:"registry"`
	// Prefix is put before names that do not name a registry, e.g.
	// "dockerhub-proxy"; "" means none.
	Prefix string `toml:"prefix"`
	// Mirrors maps a registry host[:port] to mirrors tried first, in
	// order.
	Mirrors map[string][]string `toml:"mirrors"`
	// PlainHTTP lists registry hosts[:port] spoken to over plain HTTP.
	// The [registry] host is added when [RegistryConfig.PlainHTTP] is set
	// or its URL is http.
	PlainHTTP []string `toml:"plain_http"`
	// PullPolicy is the pull policy of a job that gives none: always,
	// if-not-present or never; "" means always (gitlab-runner's default).
	PullPolicy string `toml:"pull_policy"`
}

// ScheduleConfig is [executor.schedule].
type ScheduleConfig struct {
	// MaxConcurrency caps reservations plus unfinished jobs (PLACE-04,
	// PLACE-06); 0 means no limit of the node's own.
	MaxConcurrency int `toml:"max_concurrency"`
}

// RegistryConfig is [registry].
type RegistryConfig struct {
	// URL is the registry's base URL, e.g. https://registry.example.com;
	// reported to the hub (XFER-17). "" disables caches.
	URL string `toml:"url"`
	// PlainHTTP talks http to the registry (tests, local mirrors).
	PlainHTTP bool `toml:"plain_http"`
	// Username is the node's own registry user; "" means anonymous.
	Username string `toml:"username"`
	// Password is Username's password or token; never logged.
	Password Secret `toml:"password"`
	// RepositoryPrefix prefixes cache repositories.
	RepositoryPrefix string `toml:"repository_prefix"`
	// GuestCredential is "node" (default) or "job" (XFER-15).
	GuestCredential string `toml:"guest_credential"`
}

// OutputConfig is [output].
type OutputConfig struct {
	// SpoolLimit is the output bytes a job may produce past the hub's
	// last ack before it blocks; at least 4M (NODE-11).
	SpoolLimit client.Size `toml:"spool_limit"`
}

// Secret is a config string never printed in logs.
type Secret string

// LogValue redacts the secret (C13, C14).
func (s Secret) LogValue() slog.Value {
	if s == "" {
		return slog.StringValue("")
	}
	return slog.StringValue("REDACTED")
}

// DefaultConfig returns the defaults: process executor with cgroups, state
// in DefaultStateDir, resources detected, runner detected.
func DefaultConfig() Config {
	return Config{
		Version: ConfigVersion,
		Node: NodeSection{
			StateDir:            DefaultStateDir,
			ImageCacheIdleSecs:  DefaultImageCacheIdleSecs,
			ShutdownTimeoutSecs: DefaultShutdownTimeoutSecs,
		},
		Resources: ResourcesConfig{ReserveMem: DefaultReserveMem, ReserveDisk: DefaultReserveDisk},
		Executor:  ExecutorConfig{Backend: BackendProcess, Cgroups: true},
		Registry:  RegistryConfig{GuestCredential: GuestCredentialNode},
		Output:    OutputConfig{SpoolLimit: DefaultSpoolLimit},
	}
}

// LoadConfig reads node.toml at path over the defaults, strictly, and
// validates it. A missing file wraps conffile.ErrNoConfig.
func LoadConfig(path string) (Config, error) {
	cfg := DefaultConfig()
	if err := conffile.Load(path, &cfg, ConfigVersion); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

var userRe = regexp.MustCompile(`^[0-9]+:[0-9]+$`)

// Validate lists every problem of c, each wrapping ErrConfig. It is pure.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrConfig}, a...)...))
	}
	if c.Version != ConfigVersion {
		bad("version is %d, want %d", c.Version, ConfigVersion)
	}
	for _, h := range c.Node.Hubs {
		if u, err := url.Parse(h); err != nil || u.Scheme != "https" || u.Host == "" {
			bad("[node] hubs: %q: want https://host:port", h)
		}
	}
	if c.Node.Hub != "" {
		if u, err := url.Parse(c.Node.Hub); err != nil || u.Scheme != "https" || u.Host == "" {
			bad("[node] hub %q: want https://host:port", c.Node.Hub)
		}
	}
	if c.Node.StateDir == "" {
		bad("[node] state_dir is empty")
	}
	switch c.Node.Runner {
	case RunnerUnset, RunnerNone, RunnerLocal:
	default:
		bad("[node] runner %q: want \"none\", \"local\" or unset", c.Node.Runner)
	}
	if c.Node.ImageCacheIdleSecs < 0 {
		bad("[node] image_cache_idle_secs is negative")
	}
	if c.Node.ShutdownTimeoutSecs < 0 {
		bad("[node] shutdown_timeout_secs is negative")
	}
	if c.Node.MetricsListen != "" && !conffile.Loopback(c.Node.MetricsListen) {
		bad("[node] metrics_listen %q: want a loopback host:port", c.Node.MetricsListen)
	}
	for _, l := range c.Node.Labels {
		if strings.TrimSpace(l) == "" || strings.ContainsAny(l, ", \t") {
			bad("[node] labels: %q is not a label", l)
		}
	}
	r := c.Resources
	if r.Mem < 0 || r.Disk < 0 || r.CPUs < 0 || r.ReserveMem < 0 || r.ReserveDisk < 0 || r.ReserveCPUs < 0 {
		bad("[resources]: negative value")
	}
	switch c.Executor.Backend {
	case BackendProcess, BackendOCI, BackendAuto, BackendMicroVM:
	default:
		bad("[executor] backend %q: want process, oci, auto or microvm", c.Executor.Backend)
	}
	for _, p := range c.Executor.MicroVM.problems() {
		bad("[executor.microvm] %s", p)
	}
	if c.Executor.Backend == BackendAuto && c.Executor.MicroVM.Accel == "tcg" {
		bad("[executor.microvm] accel = \"tcg\" needs backend = \"microvm\": auto chooses microVMs only where a probe guest boots under KVM, and never emulates")
	}
	switch c.Executor.ImageFallback {
	case "", ImageFallbackFail, ImageFallbackHost:
	default:
		bad("[executor] image_fallback %q: want fail or host", c.Executor.ImageFallback)
	}
	switch c.Executor.OCI.Runtime {
	case "", "runc", "runsc":
	default:
		bad("[executor.oci] runtime %q: want runc or runsc", c.Executor.OCI.Runtime)
	}
	if c.Executor.OCI.Platform != "" && c.Executor.OCI.Runtime != "runsc" {
		bad("[executor.oci] platform is gVisor's: it needs runtime = \"runsc\"")
	}
	if c.Executor.User != "" && !userRe.MatchString(c.Executor.User) {
		bad("[executor] user %q: want uid:gid", c.Executor.User)
	}
	switch c.Executor.Images.PullPolicy {
	case "", "always", "if-not-present", "never":
	default:
		bad("[executor.images] pull_policy %q: want always, if-not-present or never", c.Executor.Images.PullPolicy)
	}
	for _, h := range append(append([]string{c.Executor.Images.Registry}, c.Executor.Images.PlainHTTP...), mirrorHosts(c.Executor.Images.Mirrors)...) {
		if strings.Contains(h, "/") || strings.ContainsAny(h, " \t") {
			bad("[executor.images] %q: want a registry host[:port]", h)
		}
	}
	if c.Executor.Schedule.MaxConcurrency < 0 {
		bad("[executor.schedule] max_concurrency is negative")
	}
	if c.Registry.URL != "" {
		if u, err := url.Parse(c.Registry.URL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			bad("[registry] url %q: want http(s)://host[:port]", c.Registry.URL)
		}
	}
	switch c.Registry.GuestCredential {
	case "", GuestCredentialNode, GuestCredentialJob:
	default:
		bad("[registry] guest_credential %q: want node or job", c.Registry.GuestCredential)
	}
	if c.Output.SpoolLimit != 0 && c.Output.SpoolLimit < 4<<20 {
		bad("[output] spool_limit %s: at least 4M", c.Output.SpoolLimit)
	}
	return errors.Join(errs...)
}

func mirrorHosts(m map[string][]string) []string {
	var out []string
	for k, v := range m {
		out = append(append(out, k), v...)
	}
	return out
}

// parseUser reads "uid:gid".
func parseUser(s string) (uid, gid uint32, err error) {
	a, b, _ := strings.Cut(s, ":")
	u, err1 := strconv.ParseUint(a, 10, 32)
	g, err2 := strconv.ParseUint(b, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, fmt.Errorf("%w: user %q: %w", ErrConfig, s, err)
	}
	return uint32(u), uint32(g), nil
}

// buildsDir returns the executor's root.
func (c Config) buildsDir() string {
	if c.Executor.BuildsDir != "" {
		return c.Executor.BuildsDir
	}
	return filepath.Join(c.Node.StateDir, "builds")
}

// RunnerUnits are where a gitlab-runner systemd unit is looked for
// (PLACE-10).
var RunnerUnits = []string{"/etc/systemd/system/gitlab-runner.service", "/lib/systemd/system/gitlab-runner.service"}

// DetectLocalRunner reports whether a gitlab-runner unit (one of units) or
// a gitlab-runner binary on PATH is present (PLACE-10).
func DetectLocalRunner(units []string) bool {
	for _, u := range units {
		if _, err := os.Stat(u); err == nil {
			return true
		}
	}
	_, err := osexec.LookPath("gitlab-runner")
	return err == nil
}

// localRunner resolves [NodeSection.Runner]: unset detects with detect.
func (c Config) localRunner(detect func() bool) bool {
	switch c.Node.Runner {
	case RunnerNone:
		return false
	case RunnerLocal:
		return true
	}
	return detect()
}
