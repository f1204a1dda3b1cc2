package node

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/node/exec"
	"github.com/vk-ci/vk/node/exec/microvm"
	"github.com/vk-ci/vk/node/exec/oci"
	"github.com/vk-ci/vk/node/exec/oci/imagestore"
	"github.com/vk-ci/vk/node/exec/process"
	"github.com/vk-ci/vk/proto/dispatch"
	"github.com/vk-ci/vk/proto/job"
)

// backends are the agent's executors: the process backend (always, unless
// the node runs oci only) and the container backend with its image store
// (oci and auto, where available).
type backends struct {
	process   exec.Executor     // nil for backend "oci"
	oci       *oci.Executor     // nil when not configured or unavailable
	images    *imagestore.Store // with oci
	ociReason error             // why oci is nil under auto
	chooser   *oci.Chooser      // nil for backend "process"
	ociRoot   string            // <state_dir>/oci
	ociParent string            // the oci backend's cgroup parent
	procCg    string            // the process backend's cgroup parent; "" without cgroups
	// microvm runs every job with backend "microvm" (microvm.go); nil
	// otherwise. Its root is <state_dir>/microvm.
	microvm     *microvm.Executor
	microvmRoot string
	// microvmReason is why auto did not choose the microvm backend (nil
	// otherwise).
	microvmReason error
	// netMode is the microvm backend's net.mode for every job, and
	// registry builds a job's guest registry proxy under "switch"
	// (vmnet.go).
	netMode      string
	netModes     []string // [executor.microvm] net_modes: a job's VK_NET_MODE may name one
	registry     func(s *dispatch.Start, received time.Time) jobRegistry
	defaultImage string // [executor] default_image
	// imageOnHost: auto without a container backend runs image jobs on
	// the host (image_fallback = "host").
	imageOnHost bool
}

// ErrRootJobs: the process backend would run job scripts as root and the
// operator did not allow it.
var ErrRootJobs = errors.New("node: [executor] the process backend would run job scripts as root, and a job script as root owns this host. " +
	"Create an unprivileged user for jobs (useradd --system --user-group --no-create-home --shell /usr/sbin/nologin vk-job) " +
	"and set [executor] user = \"<uid>:<gid>\" (from id -u vk-job and id -g vk-job), " +
	"or set [executor] allow_root_jobs = true to accept the risk")

// imageIdle is image_cache_idle_secs; 0 means the default 1800 s.
func (c Config) imageIdle() time.Duration {
	if c.Node.ImageCacheIdleSecs <= 0 {
		return DefaultImageCacheIdleSecs * time.Second
	}
	return time.Duration(c.Node.ImageCacheIdleSecs) * time.Second
}

// reported is the backend the inventory names (dispatch.Report): oci when
// the container backend runs here (oci, auto with runc), else process.
func (b *backends) reported() string {
	if b.oci != nil {
		return BackendOCI
	}
	if b.microvm != nil {
		return BackendMicroVM
	}
	return BackendProcess
}

// ociCgroupParent is the oci backend's cgroup parent: <cgroup_parent>-oci
// (vk-oci by default), never the process backend's.
func (c Config) ociCgroupParent() string {
	if c.Executor.CgroupParent == "" {
		return oci.DefaultCgroupParent
	}
	return c.Executor.CgroupParent + "-oci"
}

func (c Config) processCgroupParent() string {
	if c.Executor.CgroupParent == "" {
		return process.DefaultCgroupParent
	}
	return c.Executor.CgroupParent
}

// imageRules turns [executor.images] and [registry] into the store's
// rules: the node's registry is spoken to over plain HTTP when it says so.
func (c Config) imageRules() imagestore.Rules {
	im := c.Executor.Images
	r := imagestore.Rules{Registry: im.Registry, Prefix: im.Prefix, Mirrors: im.Mirrors, PlainHTTP: append([]string(nil), im.PlainHTTP...)}
	if c.Registry.URL != "" {
		if u, err := url.Parse(c.Registry.URL); err == nil && u.Host != "" && (c.Registry.PlainHTTP || u.Scheme == "http") {
			r.PlainHTTP = append(r.PlainHTTP, u.Host)
		}
	}
	return r
}

// newBackends builds the configured executors. Backend oci fails when the
// container runtime is unavailable. Auto runs every job in a microVM
// where a probe guest boots under KVM; otherwise it chooses per job
// between the container backend and the process backend, and without a
// container runtime runs every job in the process backend (each reason
// logged once, and noted in each imaged job's trace).
func (a *Agent) newBackends() (*backends, error) {
	cfg := a.cfg
	b := &backends{ociRoot: filepath.Join(cfg.Node.StateDir, "oci"), ociParent: cfg.ociCgroupParent(),
		microvmRoot: filepath.Join(cfg.Node.StateDir, "microvm"), defaultImage: cfg.Executor.DefaultImage}
	if cfg.Executor.Backend == BackendMicroVM {
		return b, a.newMicroVM(b)
	}
	if cfg.Executor.Backend == BackendAuto {
		err := a.autoMicroVM(b)
		if err == nil {
			a.log.Info("backend auto: every job runs in its own microVM (a probe guest booted under KVM)")
			return b, nil
		}
		b.microvmReason = err
		a.log.Info("backend auto: the microvm backend is not used here; jobs run in containers or on the host", logkey.Err, err)
		a.sweepMicroVMRoot(b.microvmRoot)
	}
	if cfg.Executor.Cgroups {
		b.procCg = cfg.processCgroupParent()
	}
	if cfg.Executor.Backend != BackendOCI {
		if a.opts.Executor != nil {
			b.process = a.opts.Executor
		} else {
			ex, err := a.newProcess()
			if err != nil {
				return nil, err
			}
			b.process = ex
		}
	}
	if cfg.Executor.Backend == BackendProcess {
		return b, nil
	}
	err := oci.Available(cfg.ociRuntimeBinary(), "")
	if err == nil {
		var store *imagestore.Store
		store, err = imagestore.New(imagestore.Config{
			Root: filepath.Join(cfg.Node.StateDir, "images"), Rules: cfg.imageRules(),
			DefaultPullPolicy: cfg.Executor.Images.PullPolicy,
			IdleAfter:         cfg.imageIdle(),
			Clock:             a.opts.Clock, Log: a.log,
		})
		if err == nil {
			b.images = store
			b.oci, err = oci.New(oci.Config{
				Root: b.ociRoot, Images: store, Runc: cfg.Executor.Runc,
				Runtime: cfg.Executor.OCI.Runtime, RunscPlatform: cfg.Executor.OCI.Platform,
				CgroupParent: b.ociParent, Clock: a.opts.Clock, Log: a.log,
			})
		}
	}
	if err != nil {
		if cfg.Executor.Backend == BackendOCI {
			return nil, fmt.Errorf("node: [executor] backend = \"oci\": %w", err)
		}
		b.oci, b.images, b.ociReason = nil, nil, err
		if cfg.Executor.ImageFallback == ImageFallbackHost {
			a.log.Warn("container backend unavailable: every job runs in the process backend (image_fallback = host)", logkey.Err, err)
		} else {
			a.log.Warn("container backend unavailable: jobs naming an image fail configuration; imageless ones run in the process backend", logkey.Err, err)
		}
	}
	b.imageOnHost = cfg.Executor.ImageFallback == ImageFallbackHost
	b.chooser = &oci.Chooser{Process: b.process, OCI: b.oci, DefaultImage: cfg.Executor.DefaultImage, RequireImage: cfg.Executor.RequireImage}
	return b, nil
}

func (a *Agent) newProcess() (exec.Executor, error) {
	pc := process.Config{Root: a.cfg.buildsDir(), CgroupParent: a.cfg.processCgroupParent(),
		NoCgroups: !a.cfg.Executor.Cgroups, Clock: a.opts.Clock, Log: a.log}
	uid := uint32(os.Geteuid())
	if a.cfg.Executor.User != "" {
		u, gid, err := parseUser(a.cfg.Executor.User)
		if err != nil {
			return nil, err
		}
		uid = u
		pc.User = &process.User{UID: u, GID: gid}
	}
	if uid == 0 && !a.cfg.Executor.AllowRootJobs {
		return nil, ErrRootJobs
	}
	if err := os.MkdirAll(pc.Root, 0o755); err != nil {
		return nil, fmt.Errorf("node: builds dir: %w", err)
	}
	return process.New(pc)
}

// jobImage is the image a job names, "" for none.
func jobImage(j *job.CiJob) string {
	if j.Image != nil {
		return strings.TrimSpace(j.Image.Name)
	}
	return ""
}

// choose picks j's executor (the backend's name for the trace) and the
// warnings its trace gets. A job the node cannot run as configured gets
// an executor whose Prepare fails with the reason, so the stage runner
// ends it configuration (FAIL-05) with the reason in the trace. s is
// j's start (nil when unknown), for what the job's own registry token
// gives it, and received when the node received it, which the token's
// lifetime counts from.
func (b *backends) choose(j *job.CiJob, s *dispatch.Start, received time.Time) (exec.Executor, string, []string) {
	if b.microvm != nil {
		return b.chooseMicroVM(j, s, received)
	}
	if b.chooser == nil {
		var warns []string
		if img := jobImage(j); img != "" {
			warns = append(warns, fmt.Sprintf("the job names image %s but this node runs jobs on the host (process executor): the image is ignored", img))
		}
		if len(j.Services) > 0 {
			warns = append(warns, fmt.Sprintf("the job has %d service(s); services run only with the container executor and are ignored", len(j.Services)))
		}
		return b.process, BackendProcess, warns
	}
	if b.oci == nil && b.process != nil && !b.chooser.RequireImage {
		// auto without a container runtime: a job that asked for an
		// image is not run on the host unless the operator said so.
		if img := jobImage(j); img != "" && !b.imageOnHost {
			return refuseExecutor{fmt.Errorf("%w: the job names image %s but this node cannot run containers (%v): "+
				"install runc and enable cgroup v1 on the node (or use a node that has them), "+
				"or set [executor] image_fallback = \"host\" to run such jobs on the host", exec.ErrConfiguration, img, b.ociReason)}, BackendOCI, nil
		}
		// The host runs the rest.
		var warns []string
		if img := jobImage(j); img != "" || b.chooser.DefaultImage != "" {
			warns = append(warns, fmt.Sprintf("the container executor is unavailable on this node (%v): the job's image is ignored and it runs on the host", b.ociReason))
		}
		if len(j.Services) > 0 {
			warns = append(warns, fmt.Sprintf("the job has %d service(s); services run only with the container executor and are ignored", len(j.Services)))
		}
		return b.process, BackendProcess, warns
	}
	ex, warns, err := b.chooser.For(j)
	if err != nil {
		return refuseExecutor{err}, BackendOCI, warns
	}
	name := BackendOCI
	if ex == b.process {
		name = BackendProcess
	}
	return ex, name, warns
}

// refuseExecutor fails Prepare with err (wrapping exec.ErrConfiguration
// from the chooser), so the job ends configuration through the stage
// runner like any prepare failure.
type refuseExecutor struct{ err error }

func (r refuseExecutor) Prepare(context.Context, exec.PrepareRequest) (exec.Job, error) {
	return nil, fmt.Errorf("%w: %w", exec.ErrPrepare, r.err)
}

// imageGCEvery is how often the image cache is swept: a quarter of the
// idle time, between 10 s and 5 min.
func imageGCEvery(idle time.Duration) time.Duration {
	return min(max(idle/4, 10*time.Second), 5*time.Minute)
}

// imageGCLoop removes images idle for image_cache_idle_secs (PLACE-15,
// DECISIONS 10) until the agent stops; first is the first period's timer,
// armed by the caller.
func (a *Agent) imageGCLoop(store *imagestore.Store, every time.Duration, first clock.Timer) {
	for t := first; ; t = a.clk.NewTimer(every) {
		select {
		case <-a.runCtx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		removed, err := store.GC(a.runCtx)
		if err != nil {
			a.log.Warn("image cache gc", logkey.Err, err)
		}
		if len(removed) > 0 {
			a.log.Info("idle images removed from the cache", "images", removed)
		}
		if a.be.microvm != nil {
			a.be.microvm.RemoveDisks(removed) // the microVM disks made of them
		}
		if a.opts.imageSwept != nil {
			a.opts.imageSwept(removed)
		}
	}
}
