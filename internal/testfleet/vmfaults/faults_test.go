package vmfaults_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/microvmtest"
	"github.com/vk-ci/vk/internal/testfleet"
	"github.com/vk-ci/vk/internal/testfleet/fleettest"
	"github.com/vk-ci/vk/node"
	"github.com/vk-ci/vk/node/exec/microvm"
	"github.com/vk-ci/vk/proto/client"
)

// vmLeftovers lists what microVM jobs hold under root (a node's
// <state_dir>/microvm), one "kind what" string each: a job directory (its
// agent socket, console log and disk overlay) — anything there but the
// shared initramfs and the images' disks —, a file in the disks
// directory that is not an image's disk, and a live QEMU (or any process)
// whose command line names root.
func vmLeftovers(root string) []string {
	var out []string
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		if e.Name() != "disks" && e.Name() != "initrd.cpio" {
			out = append(out, "jobdir "+e.Name())
		}
	}
	filepath.WalkDir(filepath.Join(root, "disks"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasSuffix(p, ".ext4") {
			out = append(out, "disk-dir "+p)
		}
		return nil
	})
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, c := range cmdlines {
		b, err := os.ReadFile(c)
		if err == nil && bytes.Contains(b, []byte(root+"/")) {
			out = append(out, "process "+strings.TrimSuffix(strings.TrimPrefix(c, "/proc/"), "/cmdline"))
		}
	}
	return out
}

// startedOrEnded waits until job id's trace holds marker, failing the
// test at once when the job ends without it (a guest that did not boot).
func startedOrEnded(t *testing.T, ctx context.Context, tn *testfleet.Tenant, id int64, marker string) {
	t.Helper()
	ji, err := tn.WaitGitLab(ctx, id, func(ji gitlabfake.JobInfo) bool {
		return bytes.Contains(ji.Trace, []byte(marker)) || ji.State.Finished()
	})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(ji.Trace, []byte(marker)) {
		t.Fatalf("job %d ended %s (%q) before printing %q:\n%s", id, ji.State, ji.FailureReason, marker, fleettest.StripANSI(string(ji.Trace)))
	}
}

// The faults on a node with [executor] backend = "microvm" (TCG here),
// in one fleet run of two pipelines of two initramfs jobs each, every job
// in its own guest (two at a time, so that guests boot in reasonable time
// on a loaded host):
//
//   - "graceful" is cancelled gracefully from GitLab once it runs: its
//     script's TERM trap runs in the guest, then its after_script sees
//     canceled;
//   - "immediate" is cancelled immediately: the hub records it canceled
//     and its after_script never runs;
//   - "slow" runs past its timeout: job_execution_timeout;
//   - "held" is running when the node is killed: the node is the real
//     `vk node run` in a process of its own (testfleet.NodeSpec.Binary),
//     SIGKILLed.
//
// Before the kill only the held job's VM is left (the others' QEMU,
// socket, overlay and directory went with their jobs). The killed node
// cleans nothing up, and its QEMU does not outlive it: QEMU is started
// with a parent-death signal (SIGKILL), so it dies with the node, leaving
// only the job's directory, which the restarted node's sweep removes
// before anything runs. After the restart nothing is left at all — no
// QEMU, job directory, overlay, socket or cgroup — and the held job has
// ended once, interrupted, as on every backend (FAIL-08). Every GitLab
// trace equals the hub's output.
//
// spec: FAIL-03, FAIL-08, FAIL-09
func TestMicroVMFaults(t *testing.T) {
	fleettest.NeedBinaries(t, testfleet.RegistryBinary) // a microvm node pulls images from the fleet's registry
	agent := microvmtest.Agent(t)
	vk := fleettest.BuildVK(t)
	f := fleettest.Start(t, testfleet.Options{Nodes: []testfleet.NodeSpec{{Executor: node.BackendMicroVM, Binary: vk}},
		Node: func(_ int, c *node.Config) {
			c.Executor.MicroVM = node.MicroVMConfig{Accel: microvm.AccelTCG, Agent: agent, BootTimeoutSecs: 600}
		}})
	n, tn := f.Nodes()[0], f.Tenants()[0]
	ctx := fleettest.Timeout(t, 20*time.Minute)
	loop := `while true; do echo tick; sleep 0.5; done`
	cancels, err := tn.CreatePipeline("acme/vm-cancel", fleettest.Readme, gitlabfake.PipelineSpec{Jobs: []gitlabfake.JobSpec{
		{Name: "graceful", Script: []string{`trap 'echo "got TERM"; exit 1' TERM`, `echo started-graceful`, loop},
			AfterScript: []string{`echo "after_script saw $CI_JOB_STATUS"`}},
		{Name: "immediate", Script: []string{`echo started-immediate`, loop},
			AfterScript: []string{`echo "after_script must not run"`}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"graceful", "immediate"} {
		startedOrEnded(t, ctx, tn, cancels.Jobs[name], "started-"+name)
	}
	microvmCancels(t, ctx, tn, cancels)
	if left := vmLeftovers(filepath.Join(n.Dir, "microvm")); len(left) != 0 {
		t.Errorf("after the cancelled jobs ended the node still holds: %v", left)
	}
	// GitLab takes no trace for a job cancelled immediately (it is
	// canceled at once), so the node's last lines reach the hub only:
	// there GitLab's trace is a prefix of the hub's output.
	for name, id := range cancels.Jobs {
		hub, ok, err := tn.HubOutput(ctx, id)
		gl := tn.GitLab.Trace(id)
		if err != nil || !ok || !(bytes.Equal(gl, hub) || (name == "immediate" && bytes.HasPrefix(hub, gl))) {
			t.Errorf("%s: GitLab trace (%d bytes) vs hub output (%d bytes, ok=%v, err=%v): want equal (a prefix for immediate)",
				name, len(gl), len(hub), ok, err)
		}
	}

	ends, err := tn.CreatePipeline("acme/vm-ends", fleettest.Readme, gitlabfake.PipelineSpec{Jobs: []gitlabfake.JobSpec{
		// Long enough for a guest to boot under TCG on a loaded host;
		// when the timeout hits during the boot instead, the job must
		// end the same way.
		{Name: "slow", Timeout: 100 * time.Second, Script: []string{`echo started-slow`, `sleep 600`}},
		{Name: "held", Script: []string{`echo "$((6*7))-holding"`, `sleep 600`}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ji, err := tn.WaitState(ctx, ends.Jobs["slow"], gitlabfake.StateFailed, gitlabfake.StateSuccess, gitlabfake.StateCanceled)
	if err != nil {
		t.Fatal(err)
	}
	if ji.FailureReason != "job_execution_timeout" {
		t.Errorf("slow = %s (%q), want failed job_execution_timeout; trace:\n%s", ji.State, ji.FailureReason, fleettest.StripANSI(string(ji.Trace)))
	}
	t.Logf("slow: timed out after its script started: %v", bytes.Contains(ji.Trace, []byte("started-slow")))
	microvmKilled(t, ctx, tn, n, ends)
	fleettest.CheckTraces(t, ctx, tn, ends)
}

// microvmCancels cancels pl's running "graceful" job gracefully and its
// "immediate" one immediately, and checks how each ended.
func microvmCancels(t *testing.T, ctx context.Context, tn *testfleet.Tenant, pl gitlabfake.Pipeline) {
	t.Helper()
	if err := tn.GitLab.CancelJob(pl.Jobs["graceful"], true); err != nil {
		t.Fatal(err)
	}
	if err := tn.GitLab.CancelJob(pl.Jobs["immediate"], false); err != nil {
		t.Fatal(err)
	}
	ji, err := tn.WaitState(ctx, pl.Jobs["graceful"], gitlabfake.StateCanceled)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"got TERM", "after_script saw canceled"} {
		if !bytes.Contains(ji.Trace, []byte(want)) {
			t.Errorf("graceful: trace lacks %q:\n%s", want, fleettest.StripANSI(string(ji.Trace)))
		}
	}
	hj, err := tn.WaitHubJob(ctx, pl.Jobs["immediate"], func(j store.Job) bool { return j.State == "finished" })
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(hj.Result, []byte("canceled")) {
		t.Errorf("immediate: hub result %s, want failure canceled", hj.Result)
	}
	if st := tn.GitLab.JobState(pl.Jobs["immediate"]); st != gitlabfake.StateCanceled {
		t.Errorf("immediate: GitLab state %s, want canceled", st)
	}
	if tr := tn.GitLab.Trace(pl.Jobs["immediate"]); bytes.Contains(tr, []byte("after_script must not run")) {
		t.Errorf("immediate cancel ran after_script:\n%s", fleettest.StripANSI(string(tr)))
	}
}

// microvmKilled SIGKILLs n, a node in a process of its own, while pl's
// "held" job runs in its guest (the only VM left by then); the node's
// QEMU must die with it, and the restarted node must sweep the job's
// directory and report the job's end once, interrupted.
func microvmKilled(t *testing.T, ctx context.Context, tn *testfleet.Tenant, n *testfleet.Node, pl gitlabfake.Pipeline) {
	t.Helper()
	id := pl.Jobs["held"]
	startedOrEnded(t, ctx, tn, id, "42-holding")
	hj, err := tn.HubJob(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(n.Dir, "microvm")
	during := strings.Join(vmLeftovers(root), "\n")
	if !strings.Contains(during, "jobdir "+hj.ID) || strings.Count(during, "jobdir ") != 1 || strings.Count(during, "process ") != 1 {
		t.Errorf("while only the held job runs, want its directory and one QEMU under %s; found:\n%s", root, during)
	}
	if n.Process() == nil {
		t.Fatal("the node does not run as a process of its own")
	}
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	// The kernel delivers QEMU's parent-death signal as the node dies;
	// QEMU's exit is observed by polling /proc, with a deadline.
	var left []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		left = vmLeftovers(root)
		if !strings.Contains(strings.Join(left, "\n"), "process ") || time.Now().After(deadline) {
			break
		}
	}
	if got := strings.Join(left, "\n"); got != "jobdir "+hj.ID {
		t.Errorf("after the SIGKILL want only the held job's directory (no cleanup ran, QEMU died with the node); found:\n%s", got)
	}
	if err := n.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	ji, err := tn.WaitState(ctx, id, gitlabfake.StateFailed, gitlabfake.StateCanceled, gitlabfake.StateSuccess)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("held after the kill and restart: %s (%s)", ji.State, ji.FailureReason)
	if ji.State != gitlabfake.StateFailed || ji.FailureReason != "runner_interrupted" {
		t.Errorf("held = %s (%q), want failed runner_interrupted", ji.State, ji.FailureReason)
	}
	hj, err = tn.WaitHubJob(ctx, id, func(j store.Job) bool { return j.State == "finished" })
	if err != nil {
		t.Fatal(err)
	}
	var res client.JobResult
	if err := json.Unmarshal(hj.Result, &res); err != nil || res.Failure != client.FailureInterrupted {
		t.Errorf("held: hub result %s (%v), want failure %q", hj.Result, err, client.FailureInterrupted)
	}
	if finals := finalUpdates(ji); finals != 1 {
		t.Errorf("held: GitLab accepted %d final updates, want 1: %+v", finals, ji.Updates)
	}
	if left := append(vmLeftovers(root), n.Leftovers()...); len(left) != 0 {
		t.Errorf("after the restart the node still holds: %v", left)
	}
}

// finalUpdates counts the job's final state updates GitLab accepted.
func finalUpdates(ji gitlabfake.JobInfo) int {
	n := 0
	for _, u := range ji.Updates {
		if (u.State == "success" || u.State == "failed") && u.Status == 200 {
			n++
		}
	}
	return n
}
