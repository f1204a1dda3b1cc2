package loop

import (
	"net/http"
	"testing"

	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/relay/gitlab"
	"github.com/vk-ci/vk/relay/internal/hubfake"
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
// output with no byte patched twice.
//
// spec: RELAY-09, GL-11, TRACE-06, RELAY-17
func TestRestartMidTrace(t *testing.T) {
	e := newEnv(t, envOptions{})
	glID, id, stop := runningJob(t, e)
	out := output(7, 3<<20)
	e.hub.AppendOutput(id, out[:1<<20+12345])
	e.waitGitLab(glID, "some trace", func(ji gitlabfake.JobInfo) bool { return len(ji.Trace) > 1<<20 })
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
	st, err := state.Open(e.dir, "r1", hubfake.RelayID)
	if err != nil {
		t.Fatal(err)
	}
	e.store = st
	m := e.manager(0, 10)
	stop = e.run(m)
	e.hub.AppendOutput(id, out[1<<20+12345:])
	code := 1
	e.hub.Finish(id, client.JobResult{Failure: client.FailureScript, ExitCode: &code})
	ji := e.waitGitLab(glID, "failed", func(ji gitlabfake.JobInfo) bool { return ji.State == gitlabfake.StateFailed })
	e.hub.WaitFor(t, "settle", func() bool { return e.hub.Jobs[id].Settled > 0 })
	stop(false)

	if string(ji.Trace) != string(out) {
		t.Errorf("trace (%d bytes) differs from the hub's output (%d bytes)", len(ji.Trace), len(out))
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
	want := gitlab.TraceChecksum(out)
	if last.State != "failed" || last.FailureReason != gitlab.ReasonScriptFailure || last.ExitCode != 1 || last.Checksum != want.Checksum || last.Bytesize != want.Bytesize {
		t.Errorf("final update = %+v, want failed script_failure exit 1 with %+v", last, want)
	}
	if e.store.Len() != 0 {
		t.Errorf("record kept after settle")
	}
}

// A job recorded but never submitted (the hub unreachable) is submitted by
// the next start with its recorded request_id.
//
// spec: RELAY-09, RELAY-07, API-43
func TestRestartUnsubmitted(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.hub.Mu.Lock()
	e.hub.FailNext[client.RouteSubmit] = 1 << 30
	e.hub.Mu.Unlock()
	glID := e.pipeline()
	m := e.manager(0, 10)
	e.gate.Set(true)
	stop := e.run(m)
	e.hub.WaitFor(t, "failed submissions", func() bool { return e.hub.Calls[client.RouteSubmit] >= 2 })
	stop(true)
	recs := e.store.Jobs()
	if len(recs) != 1 || recs[0].Phase != state.PhaseTaken || len(recs[0].Response) == 0 || recs[0].GitLabID != glID {
		t.Fatalf("records = %+v, want the job taken with its response", recs)
	}
	e.hub.Mu.Lock()
	e.hub.FailNext[client.RouteSubmit] = 0
	e.hub.Mu.Unlock()
	st, err := state.Open(e.dir, "r1", hubfake.RelayID)
	if err != nil {
		t.Fatal(err)
	}
	e.store = st
	stop = e.run(e.manager(0, 10))
	id := e.hub.OnlyJob(t)
	if got := e.hub.Job(id).Sub.RequestID; got != recs[0].SubmitRequestID {
		t.Errorf("resubmitted with request_id %q, recorded %q", got, recs[0].SubmitRequestID)
	}
	e.waitGitLab(glID, "commit", committed)
	e.hub.Finish(id, client.JobResult{})
	e.waitGitLab(glID, "success", func(ji gitlabfake.JobInfo) bool { return ji.State == gitlabfake.StateSuccess })
	e.hub.WaitFor(t, "settle", func() bool { return e.hub.Jobs[id].Settled > 0 })
	stop(false)
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
			glID, id, stop := runningJob(t, e)
			e.hub.AppendOutput(id, []byte("done\n"))
			e.waitGitLab(glID, "trace", func(ji gitlabfake.JobInfo) bool { return len(ji.Trace) == 5 })
			e.gl.InjectFault(gitlabfake.Fault{Route: gitlabfake.RouteUpdateJob, Count: 3, Status: status})
			start := e.clk.Now()
			e.hub.Finish(id, client.JobResult{})
			ji := e.waitGitLab(glID, "success", func(ji gitlabfake.JobInfo) bool { return ji.State == gitlabfake.StateSuccess })
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
			if ji.Trace == nil || string(ji.Trace) != "done\n" {
				t.Errorf("trace = %q", ji.Trace)
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
	glID, id, stop := runningJob(t, e)
	e.hub.AppendOutput(id, []byte("hello\n"))
	want := gitlab.TraceChecksum([]byte("hello\n"))
	ji := e.waitGitLab(glID, "keep-alive", func(ji gitlabfake.JobInfo) bool {
		for _, u := range ji.Updates {
			if u.State == "running" && u.Bytesize == 6 {
				return true
			}
		}
		return false
	})
	for _, u := range ji.Updates {
		if u.State == "running" && u.Bytesize == 6 && u.Checksum != want.Checksum {
			t.Errorf("keep-alive checksum %q, want %q", u.Checksum, want.Checksum)
		}
	}
	e.hub.Finish(id, client.JobResult{})
	e.waitGitLab(glID, "success", func(ji gitlabfake.JobInfo) bool { return ji.State == gitlabfake.StateSuccess })
	stop(false)
}

// Heartbeats list the held job with its admission (RSESS-04) and a change
// is signalled (RSESS-06).
//
// spec: RSESS-04, RSESS-06, ARB-35
func TestHeartbeatListsJob(t *testing.T) {
	e := newEnv(t, envOptions{})
	glID := e.pipeline()
	m := e.manager(0, 10)
	e.gate.Set(true)
	stop := e.run(m)
	id := e.hub.OnlyJob(t)
	e.waitGitLab(glID, "commit", committed)
	hb := m.Heartbeat()
	if len(hb.Runners) != 1 || len(hb.Runners[0].JobAdmissions) != 1 {
		t.Fatalf("heartbeat = %+v, want one held job", hb)
	}
	ja := hb.Runners[0].JobAdmissions[0]
	if ja.GitLabJob != glID || ja.Job != id || ja.Admission != e.hub.Job(id).Sub.Admission {
		t.Errorf("job admission = %+v", ja)
	}
	e.mu.Lock()
	changes := e.changes
	e.mu.Unlock()
	if changes == 0 {
		t.Errorf("no change signalled")
	}
	e.hub.Finish(id, client.JobResult{})
	e.hub.WaitFor(t, "settle", func() bool { return e.hub.Jobs[id].Settled > 0 })
	stop(false)
	if hb := m.Heartbeat(); len(hb.Runners[0].JobAdmissions) != 0 {
		t.Errorf("settled job still listed: %+v", hb.Runners[0].JobAdmissions)
	}
}
