package testfleet_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/testfleet"
)

// pidAlive reports whether process pid exists.
func pidAlive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// readPid reads a pid a job script wrote.
func readPid(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("job pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("job pid file %q: %v", b, err)
	}
	return pid
}

// waitPidGone waits for a job's process to exit. The process is external
// (bash run by the node), so polling with a deadline is the way to see it.
func waitPidGone(t *testing.T, pid int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for pidAlive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("job process %d still running %v later", pid, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pause waits d of wall time: the length of an injected fault (an outage
// lasts this long), not a stand-in for synchronisation.
func pause(d time.Duration) { <-time.After(d) }

// acceptedPatchesContiguous checks that the trace PATCHes GitLab accepted
// cover the trace exactly once: each starts where the previous ended, so
// no byte was accepted twice and none skipped.
func acceptedPatchesContiguous(t *testing.T, ji gitlabfake.JobInfo) {
	t.Helper()
	next := int64(0)
	for i, p := range ji.Patches {
		if p.Status != 202 {
			continue
		}
		if p.Start != next {
			t.Errorf("job %d patch %d accepted at %d-%d, want it to start at %d (a duplicate or a gap)", ji.ID, i, p.Start, p.End, next)
		}
		next = p.End + 1
	}
	if next != int64(len(ji.Trace)) {
		t.Errorf("job %d accepted patches end at %d, trace is %d bytes", ji.ID, next, len(ji.Trace))
	}
}

// ticker is a job script printing n numbered lines every interval, with
// its pid in $PIDDIR/<job name>.pid.
func ticker(n int, every string) []string {
	return []string{
		`echo $$ > "$PIDDIR/$CI_JOB_NAME.pid"`,
		fmt.Sprintf(`i=0; while [ $i -lt %d ]; do echo "line $i of $CI_JOB_NAME: some output to fill the trace a little"; i=$((i+1)); sleep %s; done`, n, every),
	}
}

func pidVar(dir string) []gitlabfake.Variable {
	return []gitlabfake.Variable{{Key: "PIDDIR", Value: dir, Public: true}}
}

// TestCancelAndTimeout cancels one job gracefully and one immediately from
// GitLab, and lets a third run past its timeout.
//
// spec: NSESS-09, GL-17, RELAY-15, FAIL-03, FAIL-09
func TestCancelAndTimeout(t *testing.T) {
	f := newFleet(t, testfleet.Options{Nodes: []testfleet.NodeSpec{{MaxConcurrency: 4}}})
	tn := f.Tenants()[0]
	ctx := timeout(t, 90*time.Second)
	pids := t.TempDir()
	// The jobs print while they loop: the relay learns of a cancel from
	// the Job-Status of its next trace PATCH (GL-17).
	loop := `while true; do echo tick; sleep 0.2; done`
	pl, err := tn.CreatePipeline("acme/cancel", readme, gitlabfake.PipelineSpec{Jobs: []gitlabfake.JobSpec{
		{Name: "graceful", Variables: pidVar(pids),
			Script:      []string{`echo $$ > "$PIDDIR/graceful.pid"`, `trap 'echo "got TERM"; exit 1' TERM`, `echo started-graceful`, loop},
			AfterScript: []string{`echo "after_script saw $CI_JOB_STATUS"`}},
		{Name: "immediate", Variables: pidVar(pids),
			Script:      []string{`echo $$ > "$PIDDIR/immediate.pid"`, `echo started-immediate`, loop},
			AfterScript: []string{`echo "after_script must not run"`}},
		{Name: "slow", Timeout: 2 * time.Second, Script: []string{`echo started-slow`, `sleep 60`}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	// Not "slow": its two seconds run from the job's start, clone
	// included (FAIL-03), so on a loaded machine it may time out before
	// its script prints, and a wait for that line would wait for ever.
	for _, n := range []string{"graceful", "immediate"} {
		if err := tn.WaitTrace(ctx, pl.Jobs[n], "started-"+n); err != nil {
			t.Fatal(err)
		}
	}
	immPid := readPid(t, filepath.Join(pids, "immediate.pid"))
	if err := tn.GitLab.CancelJob(pl.Jobs["graceful"], true); err != nil {
		t.Fatal(err)
	}
	if err := tn.GitLab.CancelJob(pl.Jobs["immediate"], false); err != nil {
		t.Fatal(err)
	}

	t.Run("graceful", func(t *testing.T) {
		ji, err := tn.WaitState(ctx, pl.Jobs["graceful"], gitlabfake.StateCanceled)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"got TERM", "after_script saw canceled"} {
			if !bytes.Contains(ji.Trace, []byte(want)) {
				t.Errorf("trace lacks %q:\n%s", want, ji.Trace)
			}
		}
		hub, ok, err := tn.HubOutput(ctx, pl.Jobs["graceful"])
		if err != nil || !ok || !bytes.Equal(ji.Trace, hub) {
			t.Errorf("graceful: GitLab trace (%d bytes) != hub output (%d bytes, ok=%v, err=%v)", len(ji.Trace), len(hub), ok, err)
		}
	})
	t.Run("immediate", func(t *testing.T) {
		if st := tn.GitLab.JobState(pl.Jobs["immediate"]); st != gitlabfake.StateCanceled {
			t.Errorf("immediate: GitLab state %s, want canceled", st)
		}
		// The node must stop the job: its process goes away and the hub
		// records the job finished canceled.
		waitPidGone(t, immPid, 20*time.Second)
		j, err := tn.WaitHubJob(ctx, pl.Jobs["immediate"], func(j store.Job) bool { return j.State == "finished" })
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(j.Result, []byte("canceled")) {
			t.Errorf("immediate: hub result %s, want failure canceled", j.Result)
		}
		if tr := tn.GitLab.Trace(pl.Jobs["immediate"]); bytes.Contains(tr, []byte("after_script must not run")) {
			t.Errorf("immediate cancel ran after_script:\n%s", tr)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		ji, err := tn.WaitState(ctx, pl.Jobs["slow"], gitlabfake.StateFailed)
		if err != nil {
			t.Fatal(err)
		}
		if ji.FailureReason != "job_execution_timeout" || !bytes.Contains(ji.Trace, []byte("execution took longer than 2s seconds")) {
			t.Errorf("slow: failure_reason %q, want job_execution_timeout and the timeout's last line; trace:\n%s", ji.FailureReason, ji.Trace)
		}
		// Its script (a 60 s sleep) ran when the node was quick enough to
		// reach it in two seconds; either way the timeout ended the job.
		t.Logf("slow: the timeout came during the script: %v", bytes.Contains(ji.Trace, []byte("started-slow")))
	})
}

// TestHubKilledMidPipeline kills the hub while three jobs run (and
// produce output) and restarts it on its state dir: every job ends
// successfully, once, with its whole trace.
//
// spec: FAIL-19, NODE-06, NODE-11, API-39 (and DECISIONS ruling 6)
func TestHubKilledMidPipeline(t *testing.T) {
	f := newFleet(t, testfleet.Options{Nodes: []testfleet.NodeSpec{{MaxConcurrency: 3}}})
	tn := f.Tenants()[0]
	ctx := timeout(t, 2*time.Minute)
	pids := t.TempDir()
	var jobs []gitlabfake.JobSpec
	for i := 1; i <= 5; i++ {
		jobs = append(jobs, gitlabfake.JobSpec{Name: fmt.Sprintf("work-%d", i), Stage: "test", Variables: pidVar(pids), Script: ticker(20, "0.15")})
	}
	jobs = append(jobs, gitlabfake.JobSpec{Name: "after", Stage: "deploy", Script: []string{"echo done"}})
	pl, err := tn.CreatePipeline("acme/hubkill", readme, gitlabfake.PipelineSpec{Stages: []string{"test", "deploy"}, Jobs: jobs})
	if err != nil {
		t.Fatal(err)
	}
	// The node takes three jobs at most: once three are running in
	// GitLab, no other job can be taken. Wait until those three run on the
	// node (accepted: what a hub restart keeps, FAIL-19) and print, then
	// kill the hub.
	var taken []int64
	for len(taken) < 3 {
		ch := tn.GitLab.Changed()
		taken = taken[:0]
		for _, j := range jobs[:5] {
			if tn.GitLab.JobState(pl.Jobs[j.Name]) == gitlabfake.StateRunning {
				taken = append(taken, pl.Jobs[j.Name])
			}
		}
		if len(taken) >= 3 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("only %d jobs running", len(taken))
		case <-ch:
		}
	}
	for _, id := range taken {
		if _, err := tn.WaitHubJob(ctx, id, testfleet.Started); err != nil {
			t.Fatal(err)
		}
		if err := tn.WaitTrace(ctx, id, "line 2 of"); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Hub().Kill(); err != nil {
		t.Fatalf("kill: %v", err)
	}
	pause(2 * time.Second)
	if err := f.Hub().Restart(ctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
	states, err := tn.WaitFinished(ctx, pl)
	if err != nil {
		t.Fatal(err)
	}
	handed := 0
	for _, r := range tn.GitLab.RequestsTo(gitlabfake.RouteJobRequest) {
		if r.Status == 201 {
			handed++
		}
	}
	if handed != len(jobs) {
		t.Errorf("GitLab handed out %d jobs, want %d (each once)", handed, len(jobs))
	}
	hubJobs, err := f.Hub().Jobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	perGitLab := map[int64]int{}
	for _, j := range hubJobs {
		perGitLab[j.GitLabJobID]++
	}
	for name, id := range pl.Jobs {
		if states[name] != gitlabfake.StateSuccess {
			ji, _ := tn.GitLab.Job(id)
			t.Errorf("%s = %s (%s), want success; trace:\n%s", name, states[name], ji.FailureReason, ji.Trace)
			continue
		}
		if perGitLab[id] != 1 {
			t.Errorf("%s: %d hub jobs, want 1", name, perGitLab[id])
		}
		tr := tn.GitLab.Trace(id)
		if n := bytes.Count(tr, []byte("Running with vk")); n != 1 {
			t.Errorf("%s: trace shows %d runs, want 1", name, n)
		}
		if strings.HasPrefix(name, "work-") && !bytes.Contains(tr, []byte("line 19 of "+name)) {
			t.Errorf("%s: trace incomplete:\n%s", name, tr)
		}
	}
	checkTraces(t, ctx, tn, pl)
}

// TestRelayKilledMidTrace kills the relay while a job's trace is being
// patched and restarts it on its state dir: it resumes from its state file
// and GitLab's trace offset; the trace is byte-identical and no byte was
// patched twice.
//
// spec: RELAY-07, RELAY-09, RELAY-17, GL-11, API-39
func TestRelayKilledMidTrace(t *testing.T) {
	f := newFleet(t, testfleet.Options{Tenants: []testfleet.TenantSpec{{GitLab: gitlabfake.Options{TraceUpdateInterval: 1}}}})
	tn := f.Tenants()[0]
	ctx := timeout(t, 2*time.Minute)
	pl, err := tn.CreatePipeline("acme/relaykill", readme, gitlabfake.PipelineSpec{Jobs: []gitlabfake.JobSpec{
		{Name: "chatty", Variables: pidVar(t.TempDir()), Script: ticker(60, "0.1")}}})
	if err != nil {
		t.Fatal(err)
	}
	id := pl.Jobs["chatty"]
	if _, err := tn.WaitGitLab(ctx, id, func(ji gitlabfake.JobInfo) bool {
		return bytes.Contains(ji.Trace, []byte("line 5 of")) && ji.State == gitlabfake.StateRunning
	}); err != nil {
		t.Fatal(err)
	}
	before := len(tn.GitLab.Trace(id))
	if err := tn.Relay.Kill(); err != nil {
		t.Fatalf("kill: %v", err)
	}
	pause(2 * time.Second)
	if got := len(tn.GitLab.Trace(id)); got != before {
		t.Fatalf("trace grew from %d to %d bytes while the relay was dead", before, got)
	}
	if err := tn.Relay.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	ji, err := tn.WaitState(ctx, id, gitlabfake.StateSuccess, gitlabfake.StateFailed)
	if err != nil {
		t.Fatal(err)
	}
	if ji.State != gitlabfake.StateSuccess {
		t.Fatalf("chatty = %s (%s), trace:\n%s", ji.State, ji.FailureReason, ji.Trace)
	}
	if !bytes.Contains(ji.Trace, []byte("line 59 of chatty")) {
		t.Errorf("trace incomplete:\n%s", ji.Trace)
	}
	acceptedPatchesContiguous(t, ji)
	checkTraces(t, ctx, tn, pl)
	if ji.ChecksumMismatch {
		t.Error("the final update's checksum disagreed with GitLab's trace")
	}
}

// TestNodeLost partitions the node running a job past job_lost_after: the
// hub ends the job lost, GitLab gets runner_system_failure, the job kept
// running meanwhile, and when the node comes back it is told to cancel it.
// A second node with room stands by: the hub never runs the lost job
// again (GitLab's retry rules decide that, FAIL-13).
//
// spec: FAIL-11, FAIL-13, FAIL-16, FAIL-17, FAIL-18
func TestNodeLost(t *testing.T) {
	f := newFleet(t, testfleet.Options{JobLostAfter: 2 * time.Second,
		Nodes: []testfleet.NodeSpec{{Name: "node-1"}, {Name: "node-2"}}})
	tn := f.Tenants()[0]
	ctx := timeout(t, 2*time.Minute)
	pids := t.TempDir()
	pl, err := tn.CreatePipeline("acme/lost", readme, gitlabfake.PipelineSpec{Jobs: []gitlabfake.JobSpec{
		{Name: "forever", Variables: pidVar(pids), Script: ticker(100000, "0.1")}}})
	if err != nil {
		t.Fatal(err)
	}
	id := pl.Jobs["forever"]
	if err := tn.WaitTrace(ctx, id, "line 3 of"); err != nil {
		t.Fatal(err)
	}
	pid := readPid(t, filepath.Join(pids, "forever.pid"))
	var nd, other *testfleet.Node
	for _, n := range f.Nodes() {
		if v, ok := n.HubView(ctx); ok && v.Jobs == 1 {
			nd = n
		} else {
			other = n
		}
	}
	if nd == nil || other == nil {
		t.Fatal("no node, or both, report the job")
	}
	nd.Partition()
	ji, err := tn.WaitState(ctx, id, gitlabfake.StateFailed, gitlabfake.StateSuccess)
	if err != nil {
		t.Fatal(err)
	}
	if ji.State != gitlabfake.StateFailed || ji.FailureReason != "runner_system_failure" {
		t.Errorf("forever = %s (%q), want failed (runner_system_failure)", ji.State, ji.FailureReason)
	}
	if !pidAlive(pid) {
		t.Error("the job stopped while its node was only unreachable (FAIL-18: it keeps running)")
	}
	nd.Heal()
	// Back in touch, the node's held names the job; the hub cancels it
	// immediately and the job's process goes.
	waitPidGone(t, pid, 30*time.Second)
	// Not run again: the other node holds nothing, the script's pid file
	// is the first run's, and GitLab still has the one failed attempt.
	if v, ok := other.HubView(ctx); !ok || v.Jobs != 0 {
		t.Errorf("%s after the loss: %+v (want no job: the hub never retries, FAIL-13)", other.Name, v)
	}
	if again := readPid(t, filepath.Join(pids, "forever.pid")); again != pid {
		t.Errorf("the job ran again (pid %d after %d)", again, pid)
	}
	if ji, _ := tn.GitLab.Job(id); ji.State != gitlabfake.StateFailed {
		t.Errorf("forever after the loss = %s, want still failed", ji.State)
	}
}

// TestSessionCutShorterThanThreshold cuts the node off for less than
// job_lost_after while its job prints: the job keeps running and its
// output catches up, complete and in order.
//
// spec: FAIL-18, NODE-11, NSESS-24, API-39
func TestSessionCutShorterThanThreshold(t *testing.T) {
	f := newFleet(t, testfleet.Options{JobLostAfter: 5 * time.Second})
	tn := f.Tenants()[0]
	nd := f.Nodes()[0]
	ctx := timeout(t, 2*time.Minute)
	pl, err := tn.CreatePipeline("acme/cut", readme, gitlabfake.PipelineSpec{Jobs: []gitlabfake.JobSpec{
		{Name: "steady", Variables: pidVar(t.TempDir()), Script: ticker(40, "0.1")}}})
	if err != nil {
		t.Fatal(err)
	}
	id := pl.Jobs["steady"]
	if err := tn.WaitTrace(ctx, id, "line 5 of"); err != nil {
		t.Fatal(err)
	}
	nd.Partition()
	pause(1500 * time.Millisecond)
	nd.Heal()
	ji, err := tn.WaitState(ctx, id, gitlabfake.StateSuccess, gitlabfake.StateFailed)
	if err != nil {
		t.Fatal(err)
	}
	if ji.State != gitlabfake.StateSuccess {
		t.Fatalf("steady = %s (%s), trace:\n%s", ji.State, ji.FailureReason, ji.Trace)
	}
	last := -1
	for _, line := range strings.Split(string(ji.Trace), "\n") {
		i := strings.Index(line, "line ")
		if i < 0 || !strings.Contains(line, " of steady") {
			continue
		}
		var n int
		if _, err := fmt.Sscanf(line[i:], "line %d of", &n); err == nil {
			if n != last+1 {
				t.Errorf("trace line %d follows %d", n, last)
			}
			last = n
		}
	}
	if last != 39 {
		t.Errorf("trace ends at line %d, want 39", last)
	}
	checkTraces(t, ctx, tn, pl)
}
