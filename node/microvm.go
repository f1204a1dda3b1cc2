package node

import (
	"context"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/node/exec"
	"github.com/vk-ci/vk/node/exec/microvm"
	"github.com/vk-ci/vk/node/exec/oci/imagestore"
	"github.com/vk-ci/vk/node/regproxy"
	"github.com/vk-ci/vk/proto/dispatch"
	"github.com/vk-ci/vk/proto/job"
)

// MicroVMConfig is [executor.microvm]: the microvm backend
// (node/exec/microvm), used with [executor] backend = "microvm".
type MicroVMConfig struct {
	// Accel is kvm (the default) or tcg. Under kvm the node boots a probe
	// guest at start and refuses to start when it is not ready within 5 s
	// (a /dev/kvm that cannot boot a stock guest, such as nested PVM);
	// tcg emulates the guest's CPU: it boots anywhere, some ten times
	// slower, and only with backend microvm (auto refuses it: it chooses
	// microVMs only where the KVM probe boots).
	Accel string `toml:"accel"`
	// QEMU is the QEMU binary; "" means qemu-system-x86_64 from PATH.
	QEMU string `toml:"qemu"`
	// Kernel is the guest kernel; "" means the newest /boot/vmlinuz-*.
	Kernel string `toml:"kernel"`
	// Agent is the static vk-agent binary put into every guest; "" means
	// vk-agent beside the running vk binary, else from PATH.
	Agent string `toml:"agent"`
	// Busybox is the static busybox of a guest without an image; "" means
	// /bin/busybox.
	Busybox string `toml:"busybox"`
	// BootTimeoutSecs bounds a guest's boot to a ready agent; 0 means
	// 10 s under kvm, 90 s under tcg.
	BootTimeoutSecs int `toml:"boot_timeout_secs"`
	// DiskMiB is the free space a job gets on its image's disk; 0 means
	// 4096.
	DiskMiB int64 `toml:"disk_mib"`
	// NetMode is every job's net.mode: "none" (the default) or "switch",
	// which gives the job's VM a network whose only way out is the job's
	// guest registry proxy at registry.vk (vmnet.go, XFER-18..23).
	NetMode string `toml:"net_mode"`
	// NetModes are the modes a job may ask for instead with its variable
	// VK_NET_MODE ([NetModeVar]); unset, only NetMode: a job cannot
	// choose. A job asking for one not listed fails configuration.
	NetModes []string `toml:"net_modes"`
	// ServiceMemMiB is each service VM's memory; 0 means 256
	// (microvm.DefaultServiceMemMiB), else at least [minServiceMemMiB].
	ServiceMemMiB int64 `toml:"service_mem_mib"`
	// ServiceCPUs is each service VM's vCPUs; 0 means 1, at most
	// [maxServiceCPUs].
	ServiceCPUs int `toml:"service_cpus"`
	// WaitForServicesTimeout is gitlab-runner's [runners.docker]
	// wait_for_services_timeout: how many seconds Prepare waits for the
	// services' ports; 0 means 30, -1 no wait (no health check).
	WaitForServicesTimeout int `toml:"wait_for_services_timeout"`
}

// Bounds of the service VMs' keys. Memory, measured with Debian's 6.1
// guest kernel and a busybox image (go test ./node/exec/microvm -run
// TestServiceMemFloor -microvm.memfloor, docs/node.md): 96 MiB and less
// do not boot (the kernel panics unpacking the initramfs), 112 MiB boots
// with about 10 MiB left for the service, 128 MiB with about 28 MiB. So
// 128 is the least a service can use. QEMU's microvm machine is sized
// for a handful of vCPUs.
const (
	minServiceMemMiB = 128
	maxServiceCPUs   = 64
)

func (m MicroVMConfig) problems() []string {
	var out []string
	switch m.Accel {
	case "", microvm.AccelKVM, microvm.AccelTCG:
	default:
		out = append(out, fmt.Sprintf("accel %q: want kvm or tcg", m.Accel))
	}
	switch m.NetMode {
	case "", NetModeNone, NetModeSwitch:
	default:
		out = append(out, fmt.Sprintf("net_mode %q: want none or switch", m.NetMode))
	}
	for _, nm := range m.NetModes {
		if nm != NetModeNone && nm != NetModeSwitch {
			out = append(out, fmt.Sprintf("net_modes: %q: want none or switch", nm))
		}
	}
	if len(m.NetModes) > 0 && !slices.Contains(m.NetModes, m.netMode()) {
		out = append(out, fmt.Sprintf("net_modes %q lacks net_mode %q, the mode of a job that asks for none", m.NetModes, m.netMode()))
	}
	if m.BootTimeoutSecs < 0 || m.DiskMiB < 0 {
		out = append(out, "boot_timeout_secs and disk_mib must not be negative")
	}
	return append(out, m.serviceProblems()...)
}

// serviceProblems checks the service VMs' keys.
func (m MicroVMConfig) serviceProblems() []string {
	var out []string
	if m.ServiceMemMiB != 0 && m.ServiceMemMiB < minServiceMemMiB {
		out = append(out, fmt.Sprintf("service_mem_mib %d: want 0 (256) or at least %d", m.ServiceMemMiB, minServiceMemMiB))
	}
	if m.ServiceCPUs < 0 || m.ServiceCPUs > maxServiceCPUs {
		out = append(out, fmt.Sprintf("service_cpus %d: want 0 (1) to %d", m.ServiceCPUs, maxServiceCPUs))
	}
	if m.WaitForServicesTimeout < -1 {
		out = append(out, fmt.Sprintf("wait_for_services_timeout %d: want seconds, 0 (30) or -1 (no wait)", m.WaitForServicesTimeout))
	}
	return out
}

// serviceWait is [MicroVMConfig.WaitForServicesTimeout] as the
// executor's ServiceWait: 0 its default, negative no wait.
func (m MicroVMConfig) serviceWait() time.Duration {
	if m.WaitForServicesTimeout < 0 {
		return -1
	}
	return time.Duration(m.WaitForServicesTimeout) * time.Second
}

// agentBinary is [MicroVMConfig.Agent] or its default.
func (m MicroVMConfig) agentBinary() (string, error) {
	if m.Agent != "" {
		return m.Agent, nil
	}
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "vk-agent")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := osexec.LookPath("vk-agent")
	if err != nil {
		return "", fmt.Errorf("no vk-agent beside the vk binary or in PATH (build it with CGO_ENABLED=0 go build ./cmd/vk-agent, or set [executor.microvm] agent)")
	}
	return p, nil
}

// newMicroVM builds the microvm backend into b: every job runs in its
// own guest, booted from its image's disk when it names one (the image
// store is the oci backend's, under <state_dir>/images), else from the
// initramfs. Under kvm a probe guest must boot first.
func (a *Agent) newMicroVM(b *backends) error {
	mc, err := a.microvmConfig(b)
	if err == nil && (mc.Accel == "" || mc.Accel == microvm.AccelKVM) {
		err = a.probeKVM(mc)
		if err != nil {
			err = fmt.Errorf("%w; set [executor.microvm] accel = \"tcg\" to emulate (slow)", err)
		}
	}
	if err == nil {
		err = a.startMicroVM(b, mc)
	}
	if err != nil {
		return fmt.Errorf("node: [executor] backend = \"microvm\": %w", err)
	}
	return nil
}

// autoMicroVM is backend auto's first choice: the microvm backend, under
// KVM only, where QEMU, a guest kernel and vk-agent are here and a probe
// guest boots. It returns why not otherwise; b is then unchanged.
func (a *Agent) autoMicroVM(b *backends) error {
	m := a.cfg.Executor.MicroVM
	if err := microvm.Available(m.QEMU, m.Kernel); err != nil {
		return err
	}
	mc, err := a.microvmConfig(b)
	if err != nil {
		return err
	}
	mc.Accel = microvm.AccelKVM // auto never emulates
	if err := a.probeKVM(mc); err != nil {
		return err
	}
	if err := a.startMicroVM(b, mc); err != nil {
		b.images = nil
		return err
	}
	return nil
}

// probeKVM boots a probe guest under KVM ([microvm.ProbeKVM], 5 s), or
// asks the test's stand-in.
func (a *Agent) probeKVM(mc microvm.Config) error {
	if a.opts.probeKVM != nil {
		return a.opts.probeKVM(mc)
	}
	return microvm.ProbeKVM(context.Background(), mc, 0)
}

// microvmConfig is the microvm executor's configuration from
// [executor.microvm], with the builds directory made and the image store
// opened.
func (a *Agent) microvmConfig(b *backends) (microvm.Config, error) {
	cfg := a.cfg
	m := cfg.Executor.MicroVM
	agent, err := m.agentBinary()
	if err != nil {
		return microvm.Config{}, err
	}
	// The builds directory holds what the host-side transfers need whole
	// (a downloaded zip, a cache layer, XFER-25), as for the other
	// backends; the jobs' trees live in their guests.
	if err := os.MkdirAll(cfg.buildsDir(), 0o755); err != nil {
		return microvm.Config{}, fmt.Errorf("builds dir: %w", err)
	}
	store, err := imagestore.New(imagestore.Config{
		Root: filepath.Join(cfg.Node.StateDir, "images"), Rules: cfg.imageRules(),
		DefaultPullPolicy: cfg.Executor.Images.PullPolicy,
		IdleAfter:         cfg.imageIdle(),
		Clock:             a.opts.Clock, Log: a.log,
	})
	if err != nil {
		return microvm.Config{}, err
	}
	return microvm.Config{
		Root: b.microvmRoot, Agent: agent, QEMU: m.QEMU, Kernel: m.Kernel, Busybox: m.Busybox,
		Accel: m.Accel, BootTimeout: time.Duration(m.BootTimeoutSecs) * time.Second,
		Images: store, DiskMiB: m.DiskMiB, Log: a.log,
		ServiceMemMiB: m.ServiceMemMiB, ServiceCPUs: m.ServiceCPUs, ServiceWait: m.serviceWait(),
	}, nil
}

// startMicroVM makes the executor of mc the one that runs every job.
func (a *Agent) startMicroVM(b *backends, mc microvm.Config) error {
	ex, err := microvm.New(mc)
	if err != nil {
		return err
	}
	b.microvm, b.images = ex, mc.Images
	a.wireVMNet(b)
	return nil
}

// chooseMicroVM is the microvm backend's executor for j (of start s, nil
// when unknown, received at received).
func (b *backends) chooseMicroVM(j *job.CiJob, s *dispatch.Start, received time.Time) (exec.Executor, string, []string) {
	if _, err := b.jobNetMode(j); err != nil {
		return refuseExecutor{err}, BackendMicroVM, nil
	}
	return b.microvm.For(b.microvmSpec(j, s, received)), BackendMicroVM, nil
}

// microvmSpec is what the microvm backend runs j (of start s, received
// at received) with: its image (or the node's default image) as the
// guest's root, else the initramfs; its services as VMs beside it; and
// under net_mode "switch" the job's guest registry proxy and its steps'
// namespaces (XFER-23).
func (b *backends) microvmSpec(j *job.CiJob, s *dispatch.Start, received time.Time) microvm.Spec {
	var spec microvm.Spec
	if j.Image != nil {
		spec.Image = *j.Image
	}
	if jobImage(j) == "" {
		spec.Image.Name = b.defaultImage
	}
	spec.Credentials = j.RegistryCredentials
	// Each service its own VM beside the job's, with the job's variables
	// before its own, as the oci backend passes them.
	spec.Services = j.Services
	for _, v := range j.Variables {
		if !v.File {
			spec.ServiceEnv = append(spec.ServiceEnv, v.Key+"="+v.Value)
		}
	}
	spec.NetMode, _ = b.jobNetMode(j) // chooseMicroVM refused a job asking for a mode not allowed
	if regproxy.Enabled(spec.NetMode) && b.registry != nil {
		r := b.registry(s, received)
		spec.Registry, spec.RegistryNamespaces = r.proxy, r.namespaces
	}
	return spec
}

// sweepMicroVMRoot removes what microVM jobs of an earlier run left under
// root (a node that chose microvm before its KVM stopped booting guests):
// the executor that would sweep at start is not built.
func (a *Agent) sweepMicroVMRoot(root string) {
	if _, err := os.Stat(root); err != nil {
		return
	}
	if err := microvm.Sweep(root, a.log); err != nil {
		a.log.Warn("microvm leftovers", logkey.Err, err)
	}
}
