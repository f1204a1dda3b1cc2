package microvm

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/need"
	"github.com/vk-ci/vk/node/exec"
)

// tcgBootTimeout is generous: emulation on a loaded shared 2-core host
// runs a boot many times slower than the ~10 s it takes when idle.
const tcgBootTimeout = 6 * time.Minute

// buildAgent builds cmd/vk-agent statically for the guest.
func buildAgent(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "vk-agent")
	cmd := osexec.Command("go", "build", "-o", bin, "github.com/vk-ci/vk/cmd/vk-agent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build vk-agent: %v\n%s", err, out)
	}
	return bin
}

// newExecutor is a TCG executor (KVM here cannot boot a stock kernel);
// it skips without QEMU or a guest kernel, naming the package, and fails
// instead under CI=true.
func newExecutor(t testing.TB) *Executor {
	t.Helper()
	if err := Available("", ""); err != nil {
		need.Missingf(t, "%v", err)
	}
	e, err := New(Config{Root: filepath.Join(t.TempDir(), "vms"), Agent: buildAgent(t), Accel: AccelTCG, BootTimeout: tcgBootTimeout})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// lineWriter closes seen once a line arrives, to cancel at a known point.
type lineWriter struct {
	mu   sync.Mutex
	b    bytes.Buffer
	once sync.Once
	seen chan struct{}
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b.Write(p)
	if bytes.Contains(w.b.Bytes(), []byte("ready\n")) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// One VM carries a job's stages: state persists from stage to stage,
// streams stay apart, exit codes come back, a graceful cancel runs the
// script's trap and an immediate one kills; an OOM in the guest is
// reported and spares the agent; the guest has its own kernel
// and sees none of the host's processes; cleanup leaves no QEMU process,
// socket or directory.
// spec: STAGE-04, XFER-24, NODE-15, NODE-16
func TestJobStagesInOneVM(t *testing.T) {
	e := newExecutor(t)
	ctx := context.Background()
	accepted := time.Now()
	ji, err := e.Prepare(ctx, exec.PrepareRequest{ID: "job1", Size: exec.Size{MemMiB: 256, CPUs: 1}})
	if err != nil {
		t.Fatal(err)
	}
	j := ji.(*Job)
	b := j.Boot()
	first := &lineWriter{seen: make(chan struct{})}
	if _, err := j.Run(ctx, exec.Script{Name: "first", Body: "echo ready"}, first, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	<-first.seen
	t.Logf("accel tcg: qemu up %v, kernel's own time to init %v, agent ready %v, first step output %v after Prepare began",
		b.QEMU, b.Kernel, b.Ready, time.Since(accepted))
	run := func(body string) (string, string, exec.RunResult) {
		t.Helper()
		var out, errb bytes.Buffer
		res, err := j.Run(ctx, exec.Script{Name: "s", Body: body, Env: []string{"STEP=x"}}, &out, &errb)
		if err != nil {
			t.Fatal(err)
		}
		return out.String(), errb.String(), res
	}
	if out, errs, res := run(`echo out; echo err >&2; echo kept > artefact; pwd; echo $STEP`); res.ExitCode != 0 || out != "out\n/builds\nx\n" || errs != "err\n" {
		t.Fatalf("stage 1: %+v %q %q", res, out, errs)
	}
	if out, _, res := run(`cat /builds/artefact; exit 3`); res.ExitCode != 3 || out != "kept\n" {
		t.Fatalf("stage 2: %+v %q", res, out)
	}
	// The job's tree moves through the agent, both ways, with no archiver
	// in the guest (XFER-24).
	var tarball bytes.Buffer
	if err := j.Client().Archive(ctx, ".", &tarball); err != nil {
		t.Fatal(err)
	}
	h, err := tar.NewReader(bytes.NewReader(tarball.Bytes())).Next()
	if err != nil || h.Name != "artefact" {
		t.Errorf("archive of the job tree: first entry %v, %v; want artefact", h, err)
	}
	if err := j.Client().Extract(ctx, "in", bytes.NewReader(tarball.Bytes())); err != nil {
		t.Fatal(err)
	}
	if out, _, res := run(`cat in/artefact`); res.ExitCode != 0 || out != "kept\n" {
		t.Errorf("extracted file in the guest: %+v %q", res, out)
	}
	hostKernel, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	out, _, _ := run(`cat /proc/sys/kernel/random/boot_id; ls /proc | grep -c '^[0-9]'`)
	if f := strings.Fields(out); len(f) != 2 || f[0] == strings.TrimSpace(string(hostKernel)) || len(f[1]) > 2 {
		t.Errorf("guest's boot id and process count %q: want its own kernel and a handful of processes", out)
	}
	// A script that outgrows the guest's memory is killed by the guest's
	// OOM killer, reported as such; the agent, which the OOM killer
	// spares, serves the next stage.
	if _, _, res := run(`awk 'BEGIN { s = "x"; while (1) s = s s }'`); !res.OOMKilled || res.ExitCode == 0 {
		t.Errorf("a script past the guest's memory: %+v, want OOMKilled and a failure", res)
	}
	for _, c := range []struct {
		mode   exec.CancelMode
		script string
		code   int
		signal string
	}{
		{exec.Graceful, `trap 'echo term; exit 7' TERM; echo ready; while :; do sleep 1; done`, 7, ""},
		{exec.Immediate, `echo ready; sleep 100`, -1, "killed"},
	} {
		w := &lineWriter{seen: make(chan struct{})}
		done := make(chan exec.RunResult, 1)
		go func() {
			res, err := j.Run(ctx, exec.Script{Name: "c", Body: c.script}, w, &bytes.Buffer{})
			if err != nil {
				t.Error(err)
			}
			done <- res
		}()
		<-w.seen
		j.Cancel(c.mode)
		if res := <-done; res.ExitCode != c.code || res.Signal != c.signal {
			t.Errorf("cancel %v: %+v, want code %d signal %q (out %q)", c.mode, res, c.code, c.signal, w.String())
		}
	}
	u := j.Usage()
	if u.CPU <= 0 || u.PeakMemBytes <= 0 {
		t.Errorf("usage %+v", u)
	}
	pid := j.PID()
	if err := j.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	// QEMU's CPU (guest execution included) and VmHWM, read before the
	// VM went away, stay the job's usage.
	if u2 := j.Usage(); u2.CPU < u.CPU || u2.PeakMemBytes < u.PeakMemBytes {
		t.Errorf("usage after cleanup %+v, before %+v", u2, u)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("QEMU %d still runs after cleanup", pid)
	}
	if ents, _ := os.ReadDir(e.cfg.Root); len(ents) != 1 { // initrd.cpio stays
		t.Errorf("left in the VM root: %v", ents)
	}
	if _, err := j.Run(ctx, exec.Script{Body: "true"}, &bytes.Buffer{}, &bytes.Buffer{}); err == nil {
		t.Errorf("Run after Cleanup succeeded")
	}
}

// The KVM probe answers within its timeout — here, where KVM is nested
// PVM and a stock guest kernel hangs, with an error — and leaves no QEMU
// process or directory behind either way.
func TestProbeKVMAnswersInTime(t *testing.T) {
	if err := Available("", ""); err != nil {
		need.Missingf(t, "%v", err)
	}
	root := t.TempDir()
	start := time.Now()
	err := ProbeKVM(context.Background(), Config{Root: root, Agent: buildAgent(t)}, 3*time.Second)
	took := time.Since(start)
	t.Logf("probe: %v after %v", err, took)
	if took > 15*time.Second {
		t.Errorf("probe took %v with a 3 s timeout", took)
	}
	if err != nil && !errors.Is(err, ErrUnavailable) {
		t.Errorf("probe error %v does not wrap ErrUnavailable", err)
	}
	if ents, _ := os.ReadDir(root); len(ents) != 0 {
		t.Errorf("probe left %v", ents)
	}
	out, _ := osexec.Command("pgrep", "-f", filepath.Join(root, "probe")).Output()
	if len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("probe QEMU still runs: %s", out)
	}
}
