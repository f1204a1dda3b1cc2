package demo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/vk-ci/vk/internal/ocitest"
	"github.com/vk-ci/vk/internal/testfleet"
	"github.com/vk-ci/vk/node"
	"github.com/vk-ci/vk/node/exec/microvm"
)

// ErrNoMicroVM is returned by [Run] with [Options.MicroVM] when this host
// cannot run the demo's jobs in microVMs; the error says why in words.
var ErrNoMicroVM = errors.New("demo: --microvm cannot run on this host")

// MicroVMPackages is the apt-get line that installs what --microvm needs
// besides a KVM that boots a guest and vk-agent.
const MicroVMPackages = "apt-get install -y qemu-system-x86 qemu-utils linux-image-amd64 e2fsprogs busybox-static docker-registry"

// microvmProbe is how [MicroVMAvailable] looks at the host; tests replace
// its parts.
type microvmProbe struct {
	available func() error           // QEMU and a guest kernel
	agent     func() (string, error) // the static vk-agent
	kvm       func() error           // a probe guest boots under KVM
	stat      func(path string) error
}

func realMicroVMProbe(ctx context.Context) microvmProbe {
	p := microvmProbe{
		available: func() error { return microvm.Available("", "") },
		agent:     findAgent,
		stat:      func(p string) error { _, err := os.Stat(p); return err },
	}
	p.kvm = func() error {
		agent, err := findAgent()
		if err != nil {
			return err
		}
		root, err := os.MkdirTemp("", "vk-demo-kvm-probe-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(root)
		return microvm.ProbeKVM(ctx, microvm.Config{Root: root, Agent: agent}, 0)
	}
	return p
}

// findAgent is vk-agent beside the running binary, else on PATH (as the
// node's [executor.microvm] agent default).
func findAgent() (string, error) {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "vk-agent")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return exec.LookPath("vk-agent")
}

// MicroVMAvailable reports whether `vk demo --microvm` can run here: QEMU
// and a guest kernel, vk-agent beside vk (or on PATH), busybox-static and
// docker-registry for the demo image, and a KVM that boots a stock guest,
// checked by booting one (5 s). The demo does not fall back to emulation
// (TCG): a job would take tens of seconds to start, which shows nothing
// of the backend. It returns the agent's path, or an error wrapping
// [ErrNoMicroVM] that says plainly what is missing.
func MicroVMAvailable(ctx context.Context) (string, error) {
	return checkMicroVM(realMicroVMProbe(ctx))
}

func checkMicroVM(p microvmProbe) (string, error) {
	var missing []string
	if err := p.available(); err != nil {
		missing = append(missing, err.Error())
	}
	agent, err := p.agent()
	if err != nil {
		missing = append(missing, "vk-agent: not beside the vk binary nor on PATH (CGO_ENABLED=0 go build ./cmd/vk-agent)")
	}
	if err := p.stat(ocitest.Busybox); err != nil {
		missing = append(missing, fmt.Sprintf("busybox-static: %s is missing (the demo image is built from it)", ocitest.Busybox))
	}
	if err := p.stat(testfleet.RegistryBinary); err != nil {
		missing = append(missing, fmt.Sprintf("docker-registry: %s is missing (the registry the nodes pull the image from)", testfleet.RegistryBinary))
	}
	parts := len(missing)
	if len(missing) == 0 {
		if err := p.kvm(); err != nil {
			missing = append(missing, "KVM: this host's /dev/kvm does not boot a stock guest kernel ("+err.Error()+
				"); --microvm needs KVM on bare metal or under nested VT-x/AMD-V. The microvm backend itself runs here under emulation "+
				"([executor.microvm] accel = \"tcg\"), tens of seconds per job start, too slow for this demo")
		}
	}
	if len(missing) == 0 {
		return agent, nil
	}
	var b strings.Builder
	for _, m := range missing {
		b.WriteString("\n  - " + m)
	}
	if parts > 0 {
		b.WriteString("\n  packages: " + MicroVMPackages)
	}
	return "", fmt.Errorf("%w:%s", ErrNoMicroVM, b.String())
}

// microvmNodes makes every node of fo run its jobs in microVMs with agent.
func microvmNodes(fo *testfleet.Options, agent string) {
	for i := range fo.Nodes {
		fo.Nodes[i].Executor = node.BackendMicroVM
	}
	prev := fo.Node
	fo.Node = func(i int, c *node.Config) {
		if prev != nil {
			prev(i, c)
		}
		c.Executor.MicroVM.Agent = agent
	}
}

// inImage makes every sample job that names no image run in image: the
// demo's busybox + bash image, whose bash the sample's scripts need (a
// guest without an image has busybox sh only).
func inImage(ts []SampleTenant, image string) {
	for i := range ts {
		for k := range ts[i].Pipeline.Jobs {
			if ts[i].Pipeline.Jobs[k].Image.Name == "" {
				ts[i].Pipeline.Jobs[k].Image.Name = image
			}
		}
	}
}
