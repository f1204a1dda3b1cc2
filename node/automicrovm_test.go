package node

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/microvmtest"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/node/exec/microvm"
	"github.com/vk-ci/vk/proto/dispatch"
	"github.com/vk-ci/vk/proto/job"
)

// startAutoNode starts an agent with backend auto, no container runtime
// (so the fallback is the process backend on any host) and agent as
// [executor.microvm] agent, logging into logs.
func startAutoNode(t *testing.T, agent string, logs *testlog.Buffer, opts Options) (*testHub, *Agent, string) {
	t.Helper()
	h := startHub(t)
	state := t.TempDir()
	cfg := testConfig(t, state)
	cfg.Executor.Backend, cfg.Executor.Runc = BackendAuto, "/nonexistent/runc"
	cfg.Executor.MicroVM.Agent = agent
	opts.Identity = &Identity{NodeID: testNode, Key: testKey, HubURL: h.url}
	opts.TLSConfig = h.cliTLS
	a, err := Start(t.Context(), cfg, slog.New(slog.NewTextHandler(logs, nil)), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Shutdown(t.Context()) })
	waitFor[*dispatch.Held](h, 0, nil)
	return h, a, state
}

// Backend auto boots a probe guest once at start (here a stand-in for
// it): where it boots, every job runs in a microVM under KVM and the
// inventory says microvm; where it does not, the node keeps today's
// choice (the process backend on a host without runc), says why once in
// its log, and the inventory says process. The probe's config asks for
// KVM even though the operator's [executor.microvm] leaves accel unset:
// auto never emulates.
func TestAutoProbe(t *testing.T) {
	microvmtest.NeedHost(t)
	// Never booted: the probe is a stand-in, and the initramfs only
	// copies the file.
	agent := filepath.Join(t.TempDir(), "vk-agent")
	if err := os.WriteFile(agent, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	hang := fmt.Errorf("%w: a probe guest did not boot under KVM: agent not ready in 5s", microvm.ErrUnavailable)
	for _, tc := range []struct {
		name     string
		probe    error
		want     string // the inventory's executor and the job's backend
		log      string
		notInLog string
	}{
		{"boots", nil, BackendMicroVM,
			"every job runs in its own microVM", "not used here"},
		{"hangs", hang, BackendProcess,
			"the microvm backend is not used here; jobs run in containers or on the host", "every job runs in its own microVM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var probed []microvm.Config
			logs := &testlog.Buffer{}
			h, a, state := startAutoNode(t, agent, logs, Options{probeKVM: func(c microvm.Config) error {
				probed = append(probed, c)
				return tc.probe
			}})
			if len(probed) != 1 {
				t.Fatalf("the probe ran %d times at start, want once", len(probed))
			}
			if probed[0].Accel != microvm.AccelKVM || probed[0].Root != filepath.Join(state, "microvm") || probed[0].Agent != agent {
				t.Errorf("probe config %+v: want accel kvm, root <state_dir>/microvm, the configured agent", probed[0])
			}
			rep, _ := waitFor[*dispatch.Report](h, 0, nil)
			if rep.Executor != tc.want {
				t.Errorf("inventory executor = %q, want %q", rep.Executor, tc.want)
			}
			_, name, _ := a.be.choose(&job.CiJob{}, nil, time.Time{})
			if name != tc.want {
				t.Errorf("a job without an image gets the %s backend, want %s", name, tc.want)
			}
			if (a.be.microvm != nil) != (tc.probe == nil) || !errors.Is(a.be.microvmReason, tc.probe) {
				t.Errorf("microvm executor %v, reason %v; want one only where the probe booted", a.be.microvm != nil, a.be.microvmReason)
			}
			got := logs.String()
			if strings.Count(got, tc.log) != 1 || strings.Contains(got, tc.notInLog) {
				t.Errorf("log says %q %d times (want once) or says %q:\n%s", tc.log, strings.Count(got, tc.log), tc.notInLog, got)
			}
			if tc.probe != nil && !strings.Contains(got, "did not boot under KVM") {
				t.Errorf("log does not say why:\n%s", got)
			}
		})
	}
}

// Backend auto with the real probe: here, where /dev/kvm is nested PVM
// and a stock guest kernel hangs, the probe gives up after its own
// timeout (a probe that hung would hold the node's start, and this test,
// for good) and the node runs its jobs as before, with nothing of the
// probe left: no QEMU, no probe directory. Where KVM boots a guest the
// node chooses microvm instead. How long the start took is logged, not
// asserted: on a loaded host QEMU's start and stop take what they take.
func TestAutoRealProbeDecidesInTime(t *testing.T) {
	agent := microvmtest.Agent(t)
	logs := &testlog.Buffer{}
	begin := time.Now()
	h, a, state := startAutoNode(t, agent, logs, Options{})
	took := time.Since(begin)
	t.Logf("auto chose %s after %v (reason: %v)", a.be.reported(), took, a.be.microvmReason)
	if a.be.microvm == nil {
		if !errors.Is(a.be.microvmReason, microvm.ErrUnavailable) {
			t.Errorf("auto without microvm: reason %v, want microvm.ErrUnavailable", a.be.microvmReason)
		}
		spec := testSpec("echo ran-on-the-host")
		from := h.mark()
		startWith(t, h, "job-auto", "r1", spec)
		if res := resultOf(h, from, "job-auto"); res.Result.Failure != "" {
			t.Errorf("job failed %q:\n%s", res.Result.Failure, h.output("job-auto"))
		}
		if out := string(h.output("job-auto")); !strings.Contains(out, "Using the process executor with bash...") {
			t.Errorf("trace does not name the process executor:\n%s", out)
		}
	}
	if _, err := os.Stat(filepath.Join(state, "microvm", "probe")); !os.IsNotExist(err) {
		t.Errorf("the probe's directory is still there (%v)", err)
	}
	out, _ := osexec.Command("pgrep", "-f", filepath.Join(state, "microvm")).Output()
	if s := strings.TrimSpace(string(out)); s != "" && a.be.microvm == nil {
		t.Errorf("a QEMU of the probe still runs: %s", s)
	}
}

// Auto never emulates: accel = "tcg" belongs to backend = "microvm".
func TestAutoRefusesTCG(t *testing.T) {
	for _, tc := range []struct {
		backend string
		refused bool
	}{{BackendAuto, true}, {BackendMicroVM, false}} {
		cfg := testConfig(t, t.TempDir())
		cfg.Executor.Backend, cfg.Executor.MicroVM.Accel = tc.backend, microvm.AccelTCG
		err := cfg.Validate()
		if (err != nil) != tc.refused || (tc.refused && !strings.Contains(err.Error(), `accel = "tcg" needs backend = "microvm"`)) {
			t.Errorf("backend %s with accel tcg: Validate = %v, want refused %v", tc.backend, err, tc.refused)
		}
	}
}
