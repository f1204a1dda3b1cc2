package demo

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/node"
)

// `vk demo --microvm` where KVM cannot boot a guest (as on this project's
// own machines, nested PVM) says so plainly, at once, before creating
// anything; with every part present it asks for the KVM probe and no
// more.
func TestDemoMicroVMSaysWhyNot(t *testing.T) {
	present := microvmProbe{
		available: func() error { return nil },
		agent:     func() (string, error) { return "/usr/bin/vk-agent", nil },
		kvm:       func() error { return errors.New("microvm: unavailable: a probe guest did not boot under KVM") },
		stat:      func(string) error { return nil },
	}
	_, err := checkMicroVM(present)
	for _, want := range []string{"does not boot a stock guest kernel", "a probe guest did not boot", "bare metal", "accel = \"tcg\""} {
		if !errors.Is(err, ErrNoMicroVM) || !strings.Contains(err.Error(), want) {
			t.Errorf("no KVM: %v; want ErrNoMicroVM saying %q", err, want)
		}
	}
	probed := false
	missing := present
	missing.agent = func() (string, error) { return "", os.ErrNotExist }
	missing.kvm = func() error { probed = true; return nil }
	if _, err := checkMicroVM(missing); !errors.Is(err, ErrNoMicroVM) || !strings.Contains(err.Error(), "vk-agent") || probed {
		t.Errorf("no vk-agent: %v (probe booted: %v); want ErrNoMicroVM naming vk-agent, no probe", err, probed)
	}
	ok := present
	ok.kvm = func() error { return nil }
	if agent, err := checkMicroVM(ok); err != nil || agent != "/usr/bin/vk-agent" {
		t.Errorf("every part present: %q, %v", agent, err)
	}

	dir := t.TempDir()
	var out bytes.Buffer
	start := time.Now()
	err = Run(t.Context(), Options{Dir: dir, MicroVM: true, microvmCheck: func() (string, error) { return checkMicroVM(present) }}, &out)
	if !errors.Is(err, ErrNoMicroVM) || time.Since(start) > time.Second || out.Len() != 0 {
		t.Errorf("Run --microvm without KVM: %v after %v, printed %q", err, time.Since(start), out.String())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("Run created %v before failing", ents)
	}
	if err := Run(t.Context(), Options{Dir: dir, MicroVM: true, Containers: true}, &out); err == nil || !strings.Contains(err.Error(), "exclude") {
		t.Errorf("--microvm with --containers: %v", err)
	}
}

// With --microvm every node runs executor microvm with the agent found,
// and every sample job names the demo image (its scripts need bash).
func TestDemoMicroVMFleet(t *testing.T) {
	samples := Sample()
	fo := FleetOptions(samples, true)
	microvmNodes(&fo, "/opt/vk/vk-agent")
	for i, n := range fo.Nodes {
		var c node.Config
		fo.Node(i, &c)
		if n.Executor != node.BackendMicroVM || c.Executor.MicroVM.Agent != "/opt/vk/vk-agent" {
			t.Errorf("node %d: executor %q, agent %q", i, n.Executor, c.Executor.MicroVM.Agent)
		}
	}
	inImage(samples, "reg:5000/"+ImageRepoTag)
	for _, s := range samples {
		for _, j := range s.Pipeline.Jobs {
			if j.Image.Name != "reg:5000/"+ImageRepoTag {
				t.Errorf("%s/%s: image %q", s.Name, j.Name, j.Image.Name)
			}
		}
	}
}
