package oci

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	osexec "os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/node/exec"
	"github.com/vk-ci/vk/node/exec/oci/imagestore"
	"github.com/vk-ci/vk/node/internal/cgroupv1"
	"github.com/vk-ci/vk/proto/job"
)

// Errors. Prepare's errors also wrap [exec.ErrPrepare]; the stage runner
// must test for [ErrImagePull] and [ErrConfig] first.
var (
	// ErrImagePull: the job's image or a service's image could not be
	// pulled, or is absent under pull_policy never. The stage runner fails
	// the job image_pull (FAIL-04). The same sentinel as
	// [imagestore.ErrPull].
	ErrImagePull = imagestore.ErrPull
	// ErrConfig: the job cannot run on this node as configured (no image
	// on a node that requires one, an image on a node without the
	// container backend, an unknown image user). The stage runner fails
	// the job `configuration`.
	ErrConfig = exec.ErrConfiguration
	// ErrUnavailable: runc, root or cgroup v1 is missing on this host.
	ErrUnavailable = errors.New("oci: container runtime unavailable")
)

// Defaults.
const (
	// DefaultRunc is the runc binary, looked up in PATH.
	DefaultRunc = "runc"
	// RuntimeRunc and RuntimeRunsc are the runtimes of [Config.Runtime]:
	// runc shares the host kernel; runsc (gVisor) runs the containers
	// on gVisor's user-space kernel, its ptrace platform by default.
	RuntimeRunc  = "runc"
	RuntimeRunsc = "runsc"
	// DefaultRunscPlatform is the gVisor platform: ptrace needs no
	// virtualisation, so it works on any host (KVM, where it works, is
	// faster).
	DefaultRunscPlatform = "ptrace"
	// DefaultCgroupRoot is where the cgroup v1 controllers are mounted.
	DefaultCgroupRoot = cgroupv1.DefaultRoot
	// DefaultCgroupParent holds the jobs' cgroups under each controller
	// (the process backend uses "vk"; the two never share a directory).
	DefaultCgroupParent = "vk-oci"
	// DefaultPidsMax caps a job's processes, services included.
	DefaultPidsMax = 4096
	// DefaultGuestBuildsDir is CI_BUILDS_DIR inside the container, as
	// gitlab-runner's Docker executor has it.
	DefaultGuestBuildsDir = "/builds"
	// DefaultGuestCacheDir is where Config.CacheDir is mounted.
	DefaultGuestCacheDir = "/cache"
	// GuestTempDir is the job's private script directory in the container.
	GuestTempDir = "/.vk/tmp"
	// DefaultServiceWait bounds how long Prepare waits for services'
	// ports to accept connections (gitlab-runner's
	// wait_for_services_timeout is 30 s).
	DefaultServiceWait = 30 * time.Second
	// DefaultServiceGrace is how long Prepare watches a service without
	// ports for an early exit.
	DefaultServiceGrace = 500 * time.Millisecond
	// DefaultDrainWait bounds the wait for a script's pipes to close once
	// its processes are gone.
	DefaultDrainWait = 5 * time.Second
	// serviceLogLines is how many of a failed service's last output lines
	// its warning quotes.
	serviceLogLines = 20
)

// Config configures an [Executor]. Root and Images are required.
type Config struct {
	// Root holds the jobs' directories (rootfs overlays, bundles, builds,
	// scripts). Required.
	Root string
	// Images is the node's image store. Required.
	Images *imagestore.Store
	// Runtime is the OCI runtime: [RuntimeRunc] ("" too) or
	// [RuntimeRunsc].
	Runtime string
	// Runc is the runtime's binary; "" means "runc" (or "runsc") from
	// PATH.
	Runc string
	// RunscPlatform is gVisor's --platform under runsc; "" means
	// [DefaultRunscPlatform].
	RunscPlatform string
	// RuncRoot is runc's state directory (runc --root); "" means
	// Root/.runc. vk's containers live only there.
	RuncRoot string
	// CgroupRoot is where the cgroup v1 controllers are mounted; "" means
	// [DefaultCgroupRoot].
	CgroupRoot string
	// CgroupParent is the directory, under each controller, holding the
	// jobs' cgroups; "" means [DefaultCgroupParent]. Removed when the last
	// job leaves it.
	CgroupParent string
	// PidsMax caps a job's processes (with its services); 0 means
	// [DefaultPidsMax], negative no cap.
	PidsMax int
	// GuestBuildsDir is CI_BUILDS_DIR inside the container; "" means
	// [DefaultGuestBuildsDir].
	GuestBuildsDir string
	// CacheDir, when set, is a host directory shared by jobs and mounted
	// at [DefaultGuestCacheDir].
	CacheDir string
	// NoOverlay makes each job's rootfs a copy of the image instead of an
	// overlay (for filesystems overlayfs cannot sit on).
	NoOverlay bool
	// ServiceWait bounds the wait for services' ports; 0 means
	// [DefaultServiceWait]. ServiceGrace is the watch for early exit of a
	// service without ports; 0 means [DefaultServiceGrace].
	ServiceWait, ServiceGrace time.Duration
	// Clock measures wall time and the service waits; nil means real time.
	Clock clock.Clock
	// Log receives the executor's own diagnostics; nil discards them.
	Log *slog.Logger
}

// Executor is the container backend. It is safe for concurrent use. It
// does not implement [exec.Executor] itself — a job's image comes with the
// job — [Executor.For] binds one job's images and returns one.
type Executor struct {
	cfg  Config
	runc string
	clk  clock.Clock
	log  *slog.Logger
	cgMu sync.Mutex // see jobCgroup.mu
}

// Available reports why the container backend cannot run here, or nil:
// it needs root, cgroup v1 controllers under cgroupRoot ("" the default)
// and the runc binary ("" from PATH).
func Available(runc, cgroupRoot string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: not running as root", ErrUnavailable)
	}
	if cgroupRoot == "" {
		cgroupRoot = DefaultCgroupRoot
	}
	if !cgroupv1.Available(cgroupRoot) {
		return fmt.Errorf("%w: no cgroup v1 memory controller under %s", ErrUnavailable, cgroupRoot)
	}
	if runc == "" {
		runc = DefaultRunc
	}
	if _, err := osexec.LookPath(runc); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}

// New checks the host (see [Available]) and the configuration.
func New(cfg Config) (*Executor, error) {
	if cfg.Root == "" || cfg.Images == nil {
		return nil, fmt.Errorf("%w: Root and Images are required", ErrConfig)
	}
	switch cfg.Runtime {
	case "", RuntimeRunc:
		cfg.Runtime = RuntimeRunc
	case RuntimeRunsc:
		if cfg.RunscPlatform == "" {
			cfg.RunscPlatform = DefaultRunscPlatform
		}
	default:
		return nil, fmt.Errorf("%w: runtime %q: want runc or runsc", ErrConfig, cfg.Runtime)
	}
	if cfg.Runc == "" {
		cfg.Runc = cfg.Runtime
	}
	if err := Available(cfg.Runc, cfg.CgroupRoot); err != nil {
		return nil, err
	}
	runc, _ := osexec.LookPath(cfg.Runc)
	if cfg.RuncRoot == "" {
		cfg.RuncRoot = filepath.Join(cfg.Root, ".runc")
	}
	if cfg.CgroupRoot == "" {
		cfg.CgroupRoot = DefaultCgroupRoot
	}
	if cfg.CgroupParent == "" {
		cfg.CgroupParent = DefaultCgroupParent
	}
	if cfg.PidsMax == 0 {
		cfg.PidsMax = DefaultPidsMax
	}
	if cfg.GuestBuildsDir == "" {
		cfg.GuestBuildsDir = DefaultGuestBuildsDir
	}
	if cfg.ServiceWait == 0 {
		cfg.ServiceWait = DefaultServiceWait
	}
	if cfg.ServiceGrace == 0 {
		cfg.ServiceGrace = DefaultServiceGrace
	}
	for _, d := range []string{cfg.Root, cfg.RuncRoot} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Executor{cfg: cfg, runc: runc, clk: clock.Or(cfg.Clock), log: log}, nil
}

// Spec is what a job asks of the container backend.
type Spec struct {
	// Image is the job image (SPEC-13, SPEC-14). Name is required;
	// Entrypoint overrides the image's ([""] or an empty string clears
	// it); User overrides the image's USER; Platform selects the image;
	// PullPolicy and Command apply as to services (Command is not used for
	// the job container, whose command is the node's keeper shell).
	Image job.Image
	// Services are the job's services (SPEC-13), each a sibling container
	// sharing the job's network namespace.
	Services []job.Image
	// Credentials are the job's registry credentials (SPEC-17), used only
	// to pull these images (AUTH-05).
	Credentials []job.RegistryCredential
	// ServiceEnv is the environment every service gets before its own
	// variables (gitlab-runner passes the job's variables to services),
	// KEY=VALUE.
	ServiceEnv []string
}

// For returns an [exec.Executor] whose Prepare runs spec's job; the
// returned executor may prepare more than one job (retries).
func (e *Executor) For(spec Spec) exec.Executor { return bound{e, spec} }

type bound struct {
	e    *Executor
	spec Spec
}

func (b bound) Prepare(ctx context.Context, req exec.PrepareRequest) (exec.Job, error) {
	j, err := b.e.Prepare(ctx, req, b.spec)
	if err != nil {
		return nil, err
	}
	return j, nil
}

var validID = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,100}$`)

// Prepare pulls the job's and its services' images, builds their root
// filesystems, the job's cgroup carrying req.Size, starts the job
// container (a keeper shell as its main process, so that each script is a
// `runc exec`) and the services, and waits for the services to listen.
// Failures wrap [exec.ErrPrepare] and, for images, [ErrImagePull]; an
// unknown user wraps [ErrConfig]. On error nothing is left behind.
func (e *Executor) Prepare(ctx context.Context, req exec.PrepareRequest, spec Spec) (*Job, error) {
	if !validID.MatchString(req.ID) || req.ID == "." || req.ID == ".." {
		return nil, fmt.Errorf("%w: invalid job id %q", exec.ErrPrepare, req.ID)
	}
	if strings.TrimSpace(spec.Image.Name) == "" {
		return nil, fmt.Errorf("%w: %w: no image", exec.ErrPrepare, ErrConfig)
	}
	j := &Job{
		e:     e,
		id:    req.ID,
		size:  req.Size,
		start: e.clk.Now(),
		dir:   filepath.Join(e.cfg.Root, req.ID),
		log:   e.log.With(logkey.JobID, req.ID),
		cg:    newJobCgroup(e.cfg.CgroupRoot, e.cfg.CgroupParent, req.ID, &e.cgMu),
	}
	if err := os.Mkdir(j.dir, 0o711); err != nil {
		return nil, fmt.Errorf("%w: %w", exec.ErrPrepare, err)
	}
	if err := j.prepare(ctx, spec); err != nil {
		if cerr := j.Cleanup(context.WithoutCancel(ctx)); cerr != nil {
			j.log.Warn("cleanup after failed prepare", slog.Any(logkey.Err, cerr))
		}
		return nil, fmt.Errorf("%w: %w", exec.ErrPrepare, err)
	}
	return j, nil
}

func creds(in []job.RegistryCredential) []imagestore.Credential {
	out := make([]imagestore.Credential, 0, len(in))
	for _, c := range in {
		out = append(out, imagestore.Credential{Host: c.URL, Username: c.Username, Password: c.Password})
	}
	return out
}

// clearEmpty turns [""] (a cleared entrypoint, as GitLab sends it) into
// nil.
func clearEmpty(s []string) []string {
	if len(s) == 1 && s[0] == "" {
		return nil
	}
	return s
}

// containerEnv is the image's environment with PATH and HOME filled in
// when it lacks them.
func containerEnv(img []string, home string) []string {
	env := append([]string(nil), img...)
	has := func(k string) bool {
		for _, kv := range env {
			if strings.HasPrefix(kv, k+"=") {
				return true
			}
		}
		return false
	}
	if !has("PATH") {
		env = append(env, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	}
	if !has("HOME") {
		env = append(env, "HOME="+home)
	}
	return env
}

// hostname is the container's host name: the job ID, cut to 63 bytes.
func hostname(id string) string {
	h := strings.ReplaceAll(id, "_", "-")
	if len(h) > 63 {
		h = h[:63]
	}
	return h
}

// splitAliases reads GitLab's alias string: several aliases may be
// separated by commas or spaces.
func splitAliases(a string) []string {
	return strings.Fields(strings.ReplaceAll(a, ",", " "))
}

// ServiceHostnames returns the names a service is reached by: its first
// alias (DECISIONS 8) and, as gitlab-runner's Docker executor does, its
// image name without tag with "/" made "__" and "-"; dropped are the
// aliases beyond the first.
func ServiceHostnames(s job.Image) (names, dropped []string) {
	aliases := splitAliases(s.Alias)
	if len(aliases) > 0 {
		names = append(names, aliases[0])
		dropped = aliases[1:]
	}
	n := s.Name
	if i := strings.Index(n, "@"); i >= 0 {
		n = n[:i]
	}
	if i := strings.LastIndex(n, ":"); i > strings.LastIndex(n, "/") {
		n = n[:i]
	}
	for _, h := range []string{strings.ReplaceAll(n, "/", "__"), strings.ReplaceAll(n, "/", "-")} {
		if validHost(h) && !contains(names, h) {
			names = append(names, h)
		}
	}
	if len(names) == 0 {
		names = []string{"service"}
	}
	return names, dropped
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

var hostRe = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9_.-]{0,252})$`)

func validHost(h string) bool { return hostRe.MatchString(h) }

// startJobContainer runs the job container detached and records its
// main process's PID.
func (j *Job) startJobContainer(cs containerSpec) error {
	bundle := filepath.Join(j.dir, "job")
	if err := writeBundle(bundle, cs); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(j.dir, "job-init.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	keepR, keepW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer keepR.Close()
	cid := j.id
	pidFile := filepath.Join(j.dir, "job.pid")
	cmd := j.e.runcCmd("run", "--detach", "--bundle", bundle, "--pid-file", pidFile, cid)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = keepR, logf, logf
	j.containers = append(j.containers, cid)
	if err := cmd.Run(); err != nil {
		keepW.Close()
		return fmt.Errorf("runc run %s: %w: %s", cid, err, tail(filepath.Join(j.dir, "job-init.log"), 5))
	}
	j.keep = keepW
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("runc pid file: %w", err)
	}
	j.initPID = pid
	return nil
}

func (e *Executor) runcCmd(args ...string) *osexec.Cmd {
	global := []string{"--root", e.cfg.RuncRoot}
	if e.gvisor() {
		// The job's network is gVisor's own loopback only, as the
		// runc containers have only lo.
		global = append(global, "--platform="+e.cfg.RunscPlatform, "--network=none")
	}
	return osexec.Command(e.runc, append(global, args...)...)
}

// gvisor reports whether the containers run under runsc, whose processes
// are not host processes: they are listed and signalled through runsc.
func (e *Executor) gvisor() bool { return e.cfg.Runtime == RuntimeRunsc }

// tail returns the last n lines of a file, for error messages.
func tail(p string, n int) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
