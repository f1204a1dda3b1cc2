package microvm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	osexec "os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vk-ci/vk/internal/procstat"
	"github.com/vk-ci/vk/node/exec"
	"github.com/vk-ci/vk/node/exec/imageuser"
	"github.com/vk-ci/vk/node/exec/oci/imagestore"
	"github.com/vk-ci/vk/node/exec/vmproto"
	"github.com/vk-ci/vk/node/regproxy"
	"github.com/vk-ci/vk/proto/job"
)

// Accelerators of [Config.Accel].
const (
	AccelKVM = "kvm"
	AccelTCG = "tcg"
)

// Defaults.
const (
	DefaultQEMU    = "qemu-system-x86_64"
	DefaultBusybox = "/bin/busybox"
	DefaultMemMiB  = 512
	// DefaultDiskMiB is [Config.DiskMiB]'s default.
	DefaultDiskMiB = 4096
	// GuestBuildsDir is CI_BUILDS_DIR in the guest.
	GuestBuildsDir = "/builds"
	// GuestTempDir is the job's script directory in the guest.
	GuestTempDir = "/tmp"
)

// ErrUnavailable: QEMU, the guest kernel or the agent is missing here.
var ErrUnavailable = errors.New("microvm: unavailable")

// Config configures an [Executor].
type Config struct {
	// Root holds each job's directory (the agent socket, the console log).
	// Required.
	Root string
	// Agent is the static vk-agent binary (cmd/vk-agent, CGO_ENABLED=0).
	// Required.
	Agent string
	// QEMU is the QEMU binary; "" means qemu-system-x86_64 from PATH
	// (Debian: qemu-system-x86).
	QEMU string
	// Kernel is the guest kernel; "" means the newest /boot/vmlinuz-*
	// (Debian: linux-image-amd64). Its virtio modules come from
	// /lib/modules/<version>.
	Kernel string
	// Busybox is a static busybox for the guest's shell and tools; ""
	// means /bin/busybox (Debian: busybox-static).
	Busybox string
	// Accel is kvm (default) or tcg (emulation: slow, but boots
	// anywhere).
	Accel string
	// BootTimeout bounds boot to a ready agent; 0 means 10 s under kvm,
	// 90 s under tcg.
	BootTimeout time.Duration
	// Images is the node's image store, for jobs that name an image
	// ([Executor.For]); nil means such jobs fail configuration.
	Images *imagestore.Store
	// DiskMiB is the free space a job gets on its image's disk, for its
	// build tree and whatever it installs; 0 means [DefaultDiskMiB].
	DiskMiB int64
	// ServiceWait bounds the wait for a service's ports; 0 means
	// [DefaultServiceWait], a negative value no health check at all (the
	// services boot and the job goes on at once, as gitlab-runner's
	// wait_for_services_timeout = -1). ServiceGrace is the watch for an
	// early exit of a service without ports; 0 means
	// [DefaultServiceGrace].
	ServiceWait, ServiceGrace time.Duration
	// ServiceMemMiB is each service VM's memory; 0 means
	// [DefaultServiceMemMiB]. ServiceCPUs is its vCPUs; 0 means
	// [DefaultServiceCPUs].
	ServiceMemMiB int64
	ServiceCPUs   int
	// Log receives diagnostics; nil discards them.
	Log *slog.Logger
}

// Executor boots one microVM per job. Safe for concurrent use.
type Executor struct {
	cfg         Config
	qemu        string
	initrd      string
	modules     []string
	rootModules []string // loaded only when an image's disk is the root
	netModules  []string // loaded only when the guest is on a job's network
	log         *slog.Logger
	disks       diskCache
	mkfs        string // mkfs.ext4, with an image store
	qemuImg     string // qemu-img, with an image store
}

// Available reports why the backend cannot run here, naming the package
// that is missing, or nil.
func Available(qemu, kernel string) error {
	if qemu == "" {
		qemu = DefaultQEMU
	}
	if _, err := osexec.LookPath(qemu); err != nil {
		return fmt.Errorf("%w: %v (apt-get install qemu-system-x86)", ErrUnavailable, err)
	}
	if kernel == "" {
		kernel = newestKernel()
	}
	if _, err := os.Stat(kernel); kernel == "" || err != nil {
		return fmt.Errorf("%w: no guest kernel /boot/vmlinuz-* (apt-get install linux-image-amd64)", ErrUnavailable)
	}
	return nil
}

// AvailableImages reports why images cannot become guest roots here
// (mkfs.ext4 or qemu-img missing, naming the package), or nil.
func AvailableImages() error {
	if _, err := lookSbin("mkfs.ext4"); err != nil {
		return fmt.Errorf("%w: images as root file systems need mkfs.ext4 (apt-get install e2fsprogs): %v", ErrUnavailable, err)
	}
	if _, err := osexec.LookPath("qemu-img"); err != nil {
		return fmt.Errorf("%w: images as root file systems need qemu-img (apt-get install qemu-utils): %v", ErrUnavailable, err)
	}
	return nil
}

// lookSbin finds name in PATH or, for a node whose PATH lacks them, in
// /usr/sbin and /sbin.
func lookSbin(name string) (string, error) {
	p, err := osexec.LookPath(name)
	if err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin"} {
		if q, err2 := osexec.LookPath(filepath.Join(d, name)); err2 == nil {
			return q, nil
		}
	}
	return "", err
}

// kernelModules are the modules of kernel version ver named relative to
// its drivers directory, in order, leaving out those absent (built into
// the kernel).
func kernelModules(ver string, names ...string) []string {
	var out []string
	for _, m := range names {
		p := filepath.Join("/lib/modules", ver, "kernel/drivers", m)
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

func newestKernel() string {
	ks, _ := filepath.Glob("/boot/vmlinuz-*")
	if len(ks) == 0 {
		return ""
	}
	sort.Strings(ks)
	return ks[len(ks)-1]
}

// New checks the host and writes the guest's initramfs (agent, busybox,
// virtio modules) once, shared by every job.
func New(cfg Config) (*Executor, error) {
	if cfg.Root == "" || cfg.Agent == "" {
		return nil, fmt.Errorf("%w: Root and Agent are required", exec.ErrConfiguration)
	}
	if cfg.QEMU == "" {
		cfg.QEMU = DefaultQEMU
	}
	if cfg.Kernel == "" {
		cfg.Kernel = newestKernel()
	}
	if cfg.Busybox == "" {
		cfg.Busybox = DefaultBusybox
	}
	switch cfg.Accel {
	case "":
		cfg.Accel = AccelKVM
	case AccelKVM, AccelTCG:
	default:
		return nil, fmt.Errorf("%w: accel %q: want kvm or tcg", exec.ErrConfiguration, cfg.Accel)
	}
	if cfg.BootTimeout == 0 {
		cfg.BootTimeout = 10 * time.Second
		if cfg.Accel == AccelTCG {
			cfg.BootTimeout = 90 * time.Second
		}
	}
	if err := Available(cfg.QEMU, cfg.Kernel); err != nil {
		return nil, err
	}
	qemu, _ := osexec.LookPath(cfg.QEMU)
	var mkfs, qemuImg string
	if cfg.Images != nil {
		if err := AvailableImages(); err != nil {
			return nil, err
		}
		mkfs, _ = lookSbin("mkfs.ext4")
		qemuImg, _ = osexec.LookPath("qemu-img")
	}
	if cfg.DiskMiB <= 0 {
		cfg.DiskMiB = DefaultDiskMiB
	}
	if cfg.ServiceWait == 0 {
		cfg.ServiceWait = DefaultServiceWait
	}
	if cfg.ServiceGrace <= 0 {
		cfg.ServiceGrace = DefaultServiceGrace
	}
	if cfg.ServiceMemMiB <= 0 {
		cfg.ServiceMemMiB = DefaultServiceMemMiB
	}
	if cfg.ServiceCPUs <= 0 {
		cfg.ServiceCPUs = DefaultServiceCPUs
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Executor{cfg: cfg, qemu: qemu, log: log, mkfs: mkfs, qemuImg: qemuImg}
	ver := strings.TrimPrefix(filepath.Base(cfg.Kernel), "vmlinuz-")
	// The agent's port: virtio-mmio and virtio-console.
	e.modules = kernelModules(ver, "virtio/virtio_ring.ko", "virtio/virtio.ko", "virtio/virtio_mmio.ko", "char/virtio_console.ko")
	// The image's disk: virtio-blk and ext4 with what it needs (crc16,
	// mbcache, jbd2 and the crc32c its checksums use).
	e.rootModules = kernelModules(ver, "block/virtio_blk.ko", "../lib/crc16.ko", "../fs/mbcache.ko", "../fs/jbd2/jbd2.ko", "../crypto/crc32c_generic.ko", "../fs/ext4/ext4.ko")
	// The job's network: virtio-net and what it needs.
	e.netModules = kernelModules(ver, "../net/core/failover.ko", "net/net_failover.ko", "net/virtio_net.ko")
	if err := os.MkdirAll(cfg.Root, 0o711); err != nil {
		return nil, fmt.Errorf("%w: %w", exec.ErrConfiguration, err)
	}
	// What a previous executor on this root left — a node killed with
	// its VMs running — goes first.
	if err := Sweep(cfg.Root, log); err != nil {
		log.Warn("microvm leftovers", "err", err)
	}
	e.initrd = filepath.Join(cfg.Root, "initrd.cpio")
	f, err := os.Create(e.initrd + ".tmp")
	if err != nil {
		return nil, err
	}
	err = writeInitramfs(f, initramfsSpec{agent: cfg.Agent, busybox: cfg.Busybox, modules: e.modules, rootModules: e.rootModules, netModules: e.netModules})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(e.initrd+".tmp", e.initrd)
	}
	if err != nil {
		os.Remove(e.initrd + ".tmp")
		return nil, fmt.Errorf("%w: initramfs: %w", ErrUnavailable, err)
	}
	return e, nil
}

// Prepare boots the job's VM with the initramfs as its root (busybox's
// tools) and waits for its agent. The guest is sized by req.Size (0 means
// 1 CPU and [DefaultMemMiB]).
func (e *Executor) Prepare(ctx context.Context, req exec.PrepareRequest) (exec.Job, error) {
	j, err := e.prepare(ctx, req, Spec{})
	if err != nil {
		return nil, err
	}
	return j, nil
}

func (e *Executor) prepare(ctx context.Context, req exec.PrepareRequest, spec Spec) (*Job, error) {
	if !idRe.MatchString(req.ID) {
		return nil, fmt.Errorf("%w: invalid job id %q", exec.ErrPrepare, req.ID)
	}
	dir := filepath.Join(e.cfg.Root, req.ID)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: %w", exec.ErrPrepare, err)
	}
	j := e.newJob(req.ID, dir, req.Size)
	if regproxy.Enabled(spec.NetMode) {
		if err := e.startForwarder(j, spec); err != nil {
			_ = j.Cleanup(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("%w: %w", exec.ErrPrepare, err)
		}
	}
	if len(spec.Services) > 0 {
		// The services' VMs boot while the job's does.
		var err error
		if j.svcs, err = e.startServices(ctx, j, spec); err != nil {
			_ = j.Cleanup(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("%w: %w", exec.ErrPrepare, err)
		}
	}
	if err := e.bootImage(ctx, j, spec.Image, spec.Credentials); err != nil {
		_ = j.Cleanup(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("%w: %w", exec.ErrPrepare, err)
	}
	if err := j.ownBuilds(ctx); err != nil {
		_ = j.Cleanup(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("%w: the job tree for the image's user: %w", exec.ErrPrepare, err)
	}
	if j.svcs != nil {
		if err := j.svcs.ready(ctx, j); err != nil {
			_ = j.Cleanup(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("%w: %w", exec.ErrPrepare, err)
		}
	}
	return j, nil
}

// newJob is a VM not yet booted in dir, which exists.
func (e *Executor) newJob(id, dir string, size exec.Size) *Job {
	return &Job{e: e, id: id, dir: dir, size: size, start: time.Now(), exited: make(chan struct{}),
		env: []string{"PATH=/bin:/sbin:/usr/bin", "HOME=/root"}, shell: []string{"/bin/sh"}}
}

// bootImage boots j from img's disk, or from the initramfs when img
// names no image.
func (e *Executor) bootImage(ctx context.Context, j *Job, img job.Image, creds []job.RegistryCredential) error {
	var disk string
	if strings.TrimSpace(img.Name) != "" {
		var err error
		if disk, err = e.imageRoot(ctx, j, Spec{Image: img, Credentials: creds}); err != nil {
			return err
		}
	}
	return e.boot(ctx, j, disk)
}

// Job is one job's VM.
type Job struct {
	e        *Executor
	id       string
	dir      string
	cmd      *osexec.Cmd
	client   *vmproto.Client
	size     exec.Size
	start    time.Time
	boot     Boot
	exited   chan struct{}     // closed when QEMU exited
	env      []string          // the scripts' base environment (the image's)
	shell    []string          // the scripts' shell: the image's bash, else sh
	entry    []string          // the image's entrypoint, before every script's shell
	user     imageuser.User    // the scripts' identity, owner of the job tree
	image    *imagestore.Image // the job's image, held until Cleanup; nil without
	net      *vmNet            // the VM's place on the job's network; nil without services
	svcs     *services         // the job's service VMs and their network; nil without
	warnings []string          // for the trace, from Prepare
	fwd      *forwarder        // what the node forwards under net.mode "switch"; nil otherwise
	regEnv   []string          // the steps' registry variables (switch only)

	mu        sync.Mutex
	proc      *vmproto.Proc
	signalled bool
	cleaned   bool
	end       time.Time
	cpu       time.Duration
	peak      int64
}

// Boot returns the job's start breakdown.
func (j *Job) Boot() Boot { return j.boot }

// PID is QEMU's process ID.
func (j *Job) PID() int { return j.cmd.Process.Pid }

// BuildsDir is CI_BUILDS_DIR in the guest.
func (j *Job) BuildsDir() string { return GuestBuildsDir }

// TempDir is the scripts' directory in the guest.
func (j *Job) TempDir() string { return GuestTempDir }

// HostPath names a host directory under the job's: the guest's files
// are not shared with the host (they move through the agent's archive
// and extract), so what the node writes there does not reach the guest.
func (j *Job) HostPath(guestPath string) string {
	return filepath.Join(j.dir, "host", filepath.Clean("/"+guestPath))
}

// Adopt does nothing: what the node writes under HostPath does not reach
// the guest, and what it pushes into the guest goes to the job's user.
func (j *Job) Adopt(string) error { return nil }

// agentPath is the agent's own binary in the guest: its copy in the
// image's root, else the initramfs's init.
func (j *Job) agentPath() string {
	if j.image != nil {
		return "/run/vk/vk-agent"
	}
	return "/init"
}

// Client is the connection to the guest's agent (archive, extract).
func (j *Job) Client() *vmproto.Client { return j.client }

// Run runs the script in the guest: under the image's shell (busybox's
// sh without an image), through the image's entrypoint, as the image's
// user.
func (j *Job) Run(ctx context.Context, s exec.Script, stdout, stderr io.Writer) (exec.RunResult, error) {
	j.mu.Lock()
	if j.cleaned {
		j.mu.Unlock()
		return exec.RunResult{}, exec.ErrCleanedUp
	}
	env := append(append(append([]string(nil), j.env...), j.regEnv...), s.Env...)
	started := time.Now()
	p, err := j.client.Start(vmproto.Run{Script: s.Body, Shell: j.shell, Env: env, Dir: GuestBuildsDir,
		Entrypoint: j.entry, UID: j.user.UID, GID: j.user.GID, Groups: j.user.Groups}, stdout, stderr)
	if err != nil {
		j.mu.Unlock()
		return exec.RunResult{}, fmt.Errorf("%w: %w", exec.ErrStart, err)
	}
	j.proc, j.signalled = p, false
	j.mu.Unlock()
	ex, err := p.Wait(ctx)
	j.mu.Lock()
	j.proc = nil
	j.mu.Unlock()
	if err != nil {
		return exec.RunResult{}, fmt.Errorf("%w: the guest's agent went away: %w", exec.ErrStart, err)
	}
	if ex.Error != "" {
		return exec.RunResult{}, fmt.Errorf("%w: %s", exec.ErrStart, ex.Error)
	}
	return exec.RunResult{ExitCode: ex.Code, Signal: ex.Signal, OOMKilled: ex.OOMKilled, Wall: time.Since(started)}, nil
}

// Cancel signals the running script's process group in the guest.
func (j *Job) Cancel(mode exec.CancelMode) {
	sig := syscall.SIGTERM
	if mode == exec.Immediate {
		sig = syscall.SIGKILL
	}
	j.mu.Lock()
	p := j.proc
	j.signalled = p != nil
	j.mu.Unlock()
	if p != nil {
		_ = p.Signal(sig)
	}
}

// Usage is the VM's: QEMU's CPU time (the guest's vCPUs run in it) and
// its peak resident memory, read from /proc while it runs, with the
// services' VMs' added.
func (j *Job) Usage() exec.Usage {
	j.mu.Lock()
	defer j.mu.Unlock()
	u := exec.Usage{Size: j.size}
	if j.svcs != nil {
		// The services' VMs are the job's: their CPU adds up, and so do
		// their peaks (a bound: the peaks need not coincide).
		for _, sv := range j.svcs.list {
			su := sv.vm.Usage()
			u.CPU += su.CPU
			u.PeakMemBytes += su.PeakMemBytes
		}
	}
	if j.cleaned {
		u.Wall, u.CPU, u.PeakMemBytes = j.end.Sub(j.start), u.CPU+j.cpu, u.PeakMemBytes+j.peak
		return u
	}
	u.Wall = time.Since(j.start)
	if j.cmd != nil {
		if pu, err := procstat.Read(j.cmd.Process.Pid); err == nil {
			u.CPU, u.PeakMemBytes = u.CPU+pu.CPU, u.PeakMemBytes+pu.MaxRSS
		}
	}
	return u
}

// Cleanup closes the agent's connection (the guest powers off), waits
// for QEMU to exit — killing it after 5 s — and removes the job's
// directory with its socket and logs; the services' VMs go the same way,
// at the same time, and then their network. Safe to call more than once.
func (j *Job) Cleanup(ctx context.Context) error {
	j.mu.Lock()
	if j.cleaned {
		j.mu.Unlock()
		return nil
	}
	j.cleaned = true
	if j.cmd != nil {
		if u, err := procstat.Read(j.cmd.Process.Pid); err == nil {
			j.cpu, j.peak = u.CPU, u.MaxRSS
		}
	}
	j.mu.Unlock()
	svcsDone := make(chan error, 1)
	if j.svcs != nil {
		go func() { svcsDone <- j.svcs.cleanup(ctx) }() // beside the job's VM
	} else {
		svcsDone <- nil
	}
	if j.client != nil {
		j.client.Close()
	}
	if j.cmd != nil {
		t := time.NewTimer(5 * time.Second)
		select {
		case <-j.exited:
		case <-t.C:
			_ = syscall.Kill(-j.cmd.Process.Pid, syscall.SIGKILL)
			<-j.exited
		case <-ctx.Done():
			_ = syscall.Kill(-j.cmd.Process.Pid, syscall.SIGKILL)
			<-j.exited
		}
		t.Stop()
	}
	j.mu.Lock()
	j.end = time.Now()
	j.mu.Unlock()
	serr := <-svcsDone
	if j.fwd != nil {
		j.fwd.close()
	}
	if j.image != nil {
		j.image.Release()
	}
	if err := os.RemoveAll(j.dir); err != nil {
		return errors.Join(serr, fmt.Errorf("microvm: cleanup %s: %w", j.id, err))
	}
	return serr
}
