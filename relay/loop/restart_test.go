package loop

import (
	"bytes"
	"net/http"
	"slices"
	"testing"

	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/relay/gitlab"
	"github.com/vk-ci/vk/relay/state"
)

// checkPatches fails when GitLab accepted two patches over the same bytes
// or left a gap: accepted patches must tile the trace from 0.
func checkPatches(t *testing.T, ji gitlabfake.JobInfo) {
	t.Helper()
	var next int64
	for _, p := range ji.Patches {
		if p.Status != http.StatusAccepted {
			continue
		}
		if p.Start != next {
			t.Errorf("accepted patch %d-%d, want it to start at %d (duplicate or gap)", p.Start, p.End, next)
		}
		next = p.End + 1
	}
}

// A daemon stopped mid-trace resumes from GitLab's trace offset, found with
// a PATCH answered 416, and the trace ends byte-identical to the hub's
// output with no byte patched twice. The real node keeps running the job
// while the daemon is down.
//
// spec: RELAY-09, GL-11, TRACE-06, RELAY-17
func TestRestartMidTrace(t *testing.T) {
	e := newEnv(t, envOptions{})
	glID, id, _, stop := runningJob(t, e, []string{"seq 1 40000", e.waitLine("more"), "seq 40001 80000", "exit 1"})
	e.waitGitLab(glID, "over 1 MiB of trace", func(ji gitlabfake.JobInfo) bool { return len(ji.Trace) > 1<<20 })
	stop(true) // the job is abandoned mid-trace: its record stays

	recs := e.store.Jobs()
	if len(recs) != 1 || recs[0].Phase != state.PhaseCommitted || recs[0].HubJob != id {
		t.Fatalf("records after stop = %+v, want the committed job", recs)
	}
	// As if the daemon died between a patch and its record: the
	// recorded offset lags GitLab's.
	recs[0].TraceOffset = 0
	if err := e.store.Put(recs[0]); err != nil {
		t.Fatal(err)
	}
	e.reopen()
	stop = e.run(e.manager(0, 10))
	e.release("more")
	ji := e.waitGitLab(glID, "failed", func(ji gitlabfake.JobInfo) bool { return ji.State == gitlabfake.StateFailed })
	e.settled(id)
	stop(false)

	e.hub.Mu.Lock()
	served := slices.Clone(e.hub.Output[id])
	e.hub.Mu.Unlock()
	if !bytes.Equal(ji.Trace, served) {
		t.Errorf("trace (%d bytes) differs from the hub's output (%d bytes)", len(ji.Trace), len(served))
	}
	if ls := seqLines(ji.Trace); !containsSeq(ls, 1, 40000) || !containsSeq(ls, 40001, 80000) {
		t.Errorf("trace lacks the script's 80000 lines (%d output lines, first %q, last %q)", len(ls), ls[:min(3, len(ls))], ls[max(0, len(ls)-3):])
	}
	checkPatches(t, ji)
	saw416 := false
	for _, p := range ji.Patches {
		saw416 = saw416 || p.Status == http.StatusRequestedRangeNotSatisfiable
	}
	if !saw416 {
		t.Errorf("no 416 patch: the resume point was not asked of GitLab")
	}
	last := ji.Updates[len(ji.Updates)-1]
	want := gitlab.TraceChecksum(ji.Trace)
	if last.State != "failed" || last.FailureReason != gitlab.ReasonScriptFailure || last.ExitCode != 1 || last.Checksum != want.Checksum || last.Bytesize != want.Bytesize {
		t.Errorf("final update = %+v, want failed script_failure exit 1 with %+v", last, want)
	}
	if e.store.Len() != 0 {
		t.Errorf("record kept after settle")
	}
}

// A job recorded but never submitted (the hub unreachable: every
// submission answered 503) is submitted by the next start with its
// recorded request_id, and the real hub runs it.
//
// spec: RELAY-09, RELAY-07, API-43
func TestRestartUnsubmitted(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.hub.SetFail(client.RouteSubmit, 1<<30)
	glID := e.pipeline([]string{"echo resumed"})
	e.gate.Set(true)
	stop := e.run(e.manager(0, 10))
	e.hub.WaitFor(t, "failed submissions", func() bool { return e.hub.Calls[client.RouteSubmit] >= 2 })
	stop(true)
	recs := e.store.Jobs()
	if len(recs) != 1 || recs[0].Phase != state.PhaseTaken || len(recs[0].Response) == 0 || recs[0].GitLabID != glID {
		t.Fatalf("records = %+v, want the job taken with its response", recs)
	}
	e.hub.SetFail(client.RouteSubmit, 0)
	e.reopen()
	stop = e.run(e.manager(0, 10))
	id := e.hub.OnlyJob(t)
	if got := e.hub.Sub(id).RequestID; got != recs[0].SubmitRequestID {
		t.Errorf("resubmitted with request_id %q, recorded %q", got, recs[0].SubmitRequestID)
	}
	ji := e.waitGitLab(glID, "success", func(ji gitlabfake.JobInfo) bool { return ji.State == gitlabfake.StateSuccess })
	e.settled(id)
	stop(false)
	if !committed(ji) || !bytes.Contains(ji.Trace, []byte(" resumed\n")) {
		t.Errorf("trace = %q, want the job run and committed", tail(ji.Trace))
	}
}

// The final update answered 202 (trace still processing) or 412 (trace
// validation) is repeated until GitLab takes it; ported from gitlab-runner's
// TestJobFinishTraceUpdateRetry and TestJobDelayedTraceProcessingWithRejection.
//
// spec: GL-16, GL-22, GL-14
func TestFinalUpdateRetry(t *testing.T) {
	for _, status := range []int{http.StatusAccepted, http.StatusPreconditionFailed} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			e := newEnv(t, envOptions{})
			glID, id, _, stop := runningJob(t, e, []string{"echo done", e.waitLine("end")})
			e.waitTrace(glID, " done\n")
			e.gl.InjectFault(gitlabfake.Fault{Route: gitlabfake.RouteUpdateJob, Count: 3, Status: status})
			start := e.clk.Now()
			e.release("end")
			ji := e.waitGitLab(glID, "success", func(ji gitlabfake.JobInfo) bool { return ji.State == gitlabfake.StateSuccess })
			e.settled(id)
			stop(false)
			faulted := 0
			for _, r := range e.gl.RequestsTo(gitlabfake.RouteUpdateJob) {
				if r.Faulted {
					faulted++
				}
			}
			if faulted != 3 {
				t.Errorf("%d faulted updates, want 3", faulted)
			}
			// Waits of 3, 6 and 12 s: backing off, not hammering.
			if took := e.clk.Now().Sub(start); took < 21e9 {
				t.Errorf("final update taken after %v, want at least 21s of back-off", took)
			}
			e.hub.Mu.Lock()
			served := slices.Clone(e.hub.Output[id])
			e.hub.Mu.Unlock()
			if !bytes.Equal(ji.Trace, served) {
				t.Errorf("trace = %q, want the hub's output", tail(ji.Trace))
			}
		})
	}
}

// Keep-alive: after 30 s without output the job is kept alive with the
// trace's checksum and size.
//
// spec: GL-13, GL-22
func TestKeepAlive(t *testing.T) {
	e := newEnv(t, envOptions{})
	glID, id, _, stop := runningJob(t, e, []string{"echo hello", e.waitLine("end")})
	before := e.waitTrace(glID, " hello\n")
	n := int64(len(before.Trace))
	ji := e.waitGitLab(glID, "keep-alive", func(ji gitlabfake.JobInfo) bool {
		for _, u := range ji.Updates {
			if u.State == "running" && u.Bytesize == n {
				return true
			}
		}
		return false
	})
	want := gitlab.TraceChecksum(ji.Trace[:n])
	for _, u := range ji.Updates {
		if u.State == "running" && u.Bytesize == n && u.Checksum != want.Checksum {
			t.Errorf("keep-alive checksum %q, want %q", u.Checksum, want.Checksum)
		}
	}
	e.release("end")
	e.waitGitLab(glID, "success", func(ji gitlabfake.JobInfo) bool { return ji.State == gitlabfake.StateSuccess })
	e.settled(id)
	stop(false)
}

// Heartbeats list the held job with its admission (RSESS-04) and a change
// is signalled (RSESS-06).
//
// spec: RSESS-04, RSESS-06, ARB-35
func TestHeartbeatListsJob(t *testing.T) {
	e := newEnv(t, envOptions{})
	glID, id, m, stop := runningJob(t, e, []string{e.waitLine("end")})
	hb := m.Heartbeat()
	if len(hb.Runners) != 1 || len(hb.Runners[0].JobAdmissions) != 1 {
		t.Fatalf("heartbeat = %+v, want one held job", hb)
	}
	ja := hb.Runners[0].JobAdmissions[0]
	if ja.GitLabJob != glID || ja.Job != id || ja.Admission != e.hub.Sub(id).Admission {
		t.Errorf("job admission = %+v", ja)
	}
	e.mu.Lock()
	changes := e.changes
	e.mu.Unlock()
	if changes == 0 {
		t.Errorf("no change signalled")
	}
	e.release("end")
	e.settled(id)
	stop(false)
	if hb := m.Heartbeat(); len(hb.Runners[0].JobAdmissions) != 0 {
		t.Errorf("settled job still listed: %+v", hb.Runners[0].JobAdmissions)
	}
}
