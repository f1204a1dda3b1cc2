package loop

import (
	"bytes"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/relay/gitlab"
	"github.com/vk-ci/vk/relay/internal/hubfake"
)

// admissionsWithLocked returns the admissions whose outcomes equal want;
// call it with the hub's lock held.
func admissionsWithLocked(h *hubfake.Hub, want ...client.Outcome) []string {
	var out []string
	for id, a := range h.Adms {
		if slices.Equal(a.Outcomes, want) {
			out = append(out, id)
		}
	}
	return out
}

// A 204 from GitLab: the outcome is empty, the reservation and the slot are
// given back, and the loop queues again.
//
// spec: RELAY-10, ARB-33, ARB-34, ARB-02
func TestEmptyGivesBack(t *testing.T) {
	e := newEnv(t, envOptions{})
	m := e.manager(0, 10)
	e.gate.Set(true)
	stop := e.run(m)
	e.hub.WaitFor(t, "two empty outcomes", func() bool { return len(admissionsWithLocked(e.hub, client.OutcomeEmpty)) >= 2 })
	e.hub.Mu.Lock()
	for _, id := range admissionsWithLocked(e.hub, client.OutcomeEmpty) {
		a := e.hub.Adms[id]
		if !a.Claimed || !e.hub.Rsv[a.Reservation] {
			t.Errorf("admission %s: claimed=%v released=%v, want both", id, a.Claimed, e.hub.Rsv[a.Reservation])
		}
	}
	e.hub.Mu.Unlock()
	stop(false)
	if r, all := m.slots.Held("r1"); r != 0 || all != 0 {
		t.Errorf("slots held after empty requests: runner %d, all %d", r, all)
	}
}

// No job is asked of GitLab before the hub approved the server, and a grant
// that finds no slot is reported released without a claim.
//
// spec: RSESS-07, ARB-25
func TestGateAndSlots(t *testing.T) {
	t.Run("gate", func(t *testing.T) {
		e := newEnv(t, envOptions{})
		m := e.manager(0, 10)
		stop := e.run(m)
		if st := m.Heartbeat().Runners[0].State; st != client.RunnerServerPending {
			t.Errorf("state before approval = %s, want server_pending", st)
		}
		e.gate.Set(true)
		e.hub.WaitFor(t, "a claim after approval", func() bool { return e.hub.Calls[client.RouteClaim] > 0 })
		stop(false)
	})
	t.Run("no slot", func(t *testing.T) {
		e := newEnv(t, envOptions{})
		m := e.manager(1, 10)
		m.slots.Acquire("r1") // a job held elsewhere fills the limit
		e.gate.Set(true)
		stop := e.run(m)
		e.hub.WaitFor(t, "a released outcome", func() bool { return len(admissionsWithLocked(e.hub, client.OutcomeReleased)) > 0 })
		e.hub.Mu.Lock()
		for _, id := range admissionsWithLocked(e.hub, client.OutcomeReleased) {
			if e.hub.Adms[id].Claimed {
				t.Errorf("admission %s claimed without a slot", id)
			}
		}
		claims := e.hub.Calls[client.RouteClaim]
		e.hub.Mu.Unlock()
		stop(false)
		if claims != 0 {
			t.Errorf("%d claims without a slot", claims)
		}
		if n := len(e.gl.RequestsTo(gitlabfake.RouteJobRequest)); n != 0 {
			t.Errorf("%d GitLab job requests without a slot", n)
		}
	})
}

// GitLab answering 429, 503 or 500 ends the admission as error and backs
// off (429/503 for Retry-After).
//
// spec: ARB-33, GL-04, RSESS-05
func TestGitLabThrottled(t *testing.T) {
	for _, tc := range []struct {
		status  int
		minWait time.Duration // Retry-After 20, or a back-off
	}{
		{http.StatusTooManyRequests, 20 * time.Second},
		{http.StatusServiceUnavailable, 20 * time.Second},
		{http.StatusInternalServerError, time.Second},
	} {
		status := tc.status
		t.Run(http.StatusText(status), func(t *testing.T) {
			e := newEnv(t, envOptions{})
			e.gl.InjectFault(gitlabfake.Fault{Route: gitlabfake.RouteJobRequest, Count: 1, Status: status, RetryAfter: "20"})
			m := e.manager(0, 10)
			e.gate.Set(true)
			start := e.clk.Now()
			stop := e.run(m)
			e.hub.WaitFor(t, "an error outcome", func() bool { return len(admissionsWithLocked(e.hub, client.OutcomeError)) > 0 })
			e.hub.WaitFor(t, "an empty outcome after the back-off", func() bool { return len(admissionsWithLocked(e.hub, client.OutcomeEmpty)) > 0 })
			if waited := e.clk.Now().Sub(start); waited < tc.minWait {
				t.Errorf("asked again after %v, want at least %v", waited, tc.minWait)
			}
			stop(false)
			if lb := m.Heartbeat().Runners[0].LastAnswer; lb == nil {
				t.Errorf("no last answer in the heartbeat")
			}
		})
	}
}

// GitLab refusing the runner token (403) stops that runner.
//
// spec: GL-04, RSESS-05
func TestTokenRefused(t *testing.T) {
	e := newEnv(t, envOptions{})
	m := e.manager(0, 10)
	e.gl.RemoveRunner(e.gl.RunnerToken())
	e.gate.Set(true)
	stop := e.run(m)
	e.hub.WaitFor(t, "an error outcome", func() bool { return len(admissionsWithLocked(e.hub, client.OutcomeError)) > 0 })
	stop(false)
	if st := m.Heartbeat().Runners[0].State; st != client.RunnerTokenRefused {
		t.Errorf("state = %s, want token_refused", st)
	}
	if n := len(e.gl.RequestsTo(gitlabfake.RouteJobRequest)); n != 1 {
		t.Errorf("%d job requests, want 1 (the runner stops)", n)
	}
}

// runningJob starts a manager, takes one job and waits for its commit.
func runningJob(t *testing.T, e *env, vars ...gitlabfake.Variable) (glID int64, hubID string, stop func(bool)) {
	glID = e.pipeline(vars...)
	m := e.manager(0, 10)
	e.gate.Set(true)
	stop = e.run(m)
	hubID = e.hub.OnlyJob(t)
	e.waitGitLab(glID, "commit", committed)
	return glID, hubID, stop
}

// A graceful cancel in GitLab (Job-Status canceling) asks the hub for a
// graceful cancel; the job's end is then reported and GitLab ends it
// canceled. An immediate cancel afterwards replaces it.
//
// spec: GL-17, RELAY-15, GL-22, FAIL-09
func TestCancelGraceful(t *testing.T) {
	e := newEnv(t, envOptions{})
	glID, id, stop := runningJob(t, e)
	e.hub.AppendOutput(id, []byte("step 1\n"))
	e.waitGitLab(glID, "first patch", func(ji gitlabfake.JobInfo) bool { return len(ji.Trace) > 0 })
	if err := e.gl.CancelJob(glID, true); err != nil {
		t.Fatal(err)
	}
	e.hub.AppendOutput(id, []byte("step 2\n"))
	e.hub.WaitFor(t, "graceful cancel", func() bool { return len(e.hub.Jobs[id].Cancels) > 0 })
	if c := e.hub.Job(id).Cancels; c[0] != client.CancelGraceful {
		t.Fatalf("cancels = %v, want graceful first", c)
	}
	e.hub.AppendOutput(id, []byte("cleaning up\n"))
	e.hub.Finish(id, client.JobResult{Failure: client.FailureCanceled})
	ji := e.waitGitLab(glID, "canceled", func(ji gitlabfake.JobInfo) bool { return ji.State == gitlabfake.StateCanceled })
	e.hub.WaitFor(t, "settle", func() bool { return e.hub.Jobs[id].Settled > 0 })
	stop(false)
	if want := "step 1\nstep 2\ncleaning up\n"; string(ji.Trace) != want {
		t.Errorf("trace = %q, want %q", ji.Trace, want)
	}
}

// An immediate cancel in GitLab (403 with Job-Status canceled) asks the hub
// for an immediate cancel, after which nothing more is written.
//
// spec: GL-17, GL-12, RELAY-15
func TestCancelImmediate(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.hub.CancelEnds = true
	glID, id, stop := runningJob(t, e)
	e.hub.AppendOutput(id, []byte("step 1\n"))
	e.waitGitLab(glID, "first patch", func(ji gitlabfake.JobInfo) bool { return len(ji.Trace) > 0 })
	if err := e.gl.CancelJob(glID, false); err != nil {
		t.Fatal(err)
	}
	e.hub.AppendOutput(id, []byte("step 2\n"))
	e.hub.WaitFor(t, "settle", func() bool { return e.hub.Jobs[id].Settled > 0 })
	stop(false)
	if c := e.hub.Job(id).Cancels; len(c) == 0 || c[len(c)-1] != client.CancelImmediate {
		t.Errorf("cancels = %v, want immediate", c)
	}
	ji, _ := e.gl.Job(glID)
	rejected := 0
	for _, p := range ji.Patches {
		if p.Status == http.StatusForbidden {
			rejected++
		}
	}
	if rejected != 1 {
		t.Errorf("%d patches answered 403, want exactly 1 (nothing written after it)", rejected)
	}
	for _, u := range ji.Updates {
		if u.State != "running" {
			t.Errorf("final update %+v sent for a job GitLab canceled", u)
		}
	}
	if e.store.Len() != 0 {
		t.Errorf("record kept after settle")
	}
}

// A job the hub could not place is failed in GitLab as
// runner_system_failure, never committed, with the reason in the trace.
//
// spec: GL-09, FAIL-10, TRACE-07, ARB-37
func TestNoCapacity(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.hub.AutoRun = false
	glID := e.pipeline()
	m := e.manager(0, 10)
	e.gate.Set(true)
	stop := e.run(m)
	id := e.hub.OnlyJob(t)
	e.hub.Finish(id, client.JobResult{Failure: client.FailureNoCapacity})
	ji := e.waitGitLab(glID, "failed", func(ji gitlabfake.JobInfo) bool { return ji.State == gitlabfake.StateFailed })
	e.hub.WaitFor(t, "settle", func() bool { return e.hub.Jobs[id].Settled > 0 })
	stop(false)
	if committed(ji) {
		t.Errorf("unplaceable job was committed")
	}
	if ji.FailureReason != gitlab.ReasonRunnerSystemFailure {
		t.Errorf("failure_reason = %q, want runner_system_failure", ji.FailureReason)
	}
	if !bytes.Contains(ji.Trace, []byte("no node of the fleet could take this job within 300 s (pool linux, mem=1G cpus=1 disk=1G)")) || !bytes.Contains(ji.Trace, []byte(" 00O ")) {
		t.Errorf("trace = %q, want the stamped reason", ji.Trace)
	}
	if e.store.Len() != 0 {
		t.Errorf("record kept after settle")
	}
}

// A submission refused approval_pending or project_rejected releases the
// reservation and fails the job uncommitted as runner_configuration_error,
// the trace ending in the instructions (exact lines).
//
// spec: FAIL-20, FAIL-21, FAIL-22, TRACE-07, API-49
func TestApprovalRefusal(t *testing.T) {
	for _, tc := range []struct {
		name, url string
		code      client.Code
		want      []string
	}{
		{"pending with url", "https://hub.example.com:8444/gitlab/main/projects/%d", client.CodeApprovalPending, []string{
			"\x1b[31;1mERROR: project acme/web (ID %d) is waiting for approval on the fleet hub: https://hub.example.com:8444/gitlab/main/projects/%d\x1b[0;m",
			"\x1b[0KRetry this job once an operator has approved it there.\x1b[0;m"}},
		{"pending without url", "", client.CodeApprovalPending, []string{
			"\x1b[31;1mERROR: project acme/web (ID %d) is waiting for approval on the fleet hub https://hub.example.com.\x1b[0;m",
			"\x1b[0KRetry this job once an operator has approved it (GitLab > Pending).\x1b[0;m"}},
		{"rejected", "", client.CodeProjectRejected, []string{
			"\x1b[31;1mERROR: project acme/web (ID %d) was rejected on the fleet hub https://hub.example.com.\x1b[0;m",
			"\x1b[0KRetry this job once an operator has approved it (GitLab > Pending).\x1b[0;m"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOptions{})
			url := tc.url
			if url != "" {
				url = strings.ReplaceAll(url, "%d", itoa(e.proj.ID))
			}
			e.hub.SubmitErr, e.hub.SubmitCode = &client.Error{Error: "waiting", Code: tc.code, ApprovalURL: url}, http.StatusForbidden
			glID := e.pipeline(gitlabfake.Variable{Key: "FF_TIMESTAMPS", Value: "false", Public: true})
			m := e.manager(0, 10)
			e.gate.Set(true)
			stop := e.run(m)
			ji := e.waitGitLab(glID, "failed", func(ji gitlabfake.JobInfo) bool { return ji.State == gitlabfake.StateFailed })
			stop(false)
			want := strings.ReplaceAll(strings.Join(tc.want, "\n")+"\n", "%d", itoa(e.proj.ID))
			if string(ji.Trace) != want {
				t.Errorf("trace =\n%q\nwant\n%q", ji.Trace, want)
			}
			if ji.FailureReason != gitlab.ReasonRunnerConfigurationError || committed(ji) {
				t.Errorf("failure_reason %q committed %v, want runner_configuration_error uncommitted", ji.FailureReason, committed(ji))
			}
			e.hub.Mu.Lock()
			for _, a := range e.hub.Adms {
				if slices.Contains(a.Outcomes, client.OutcomeJob) && !e.hub.Rsv[a.Reservation] {
					t.Errorf("reservation %s not released", a.Reservation)
				}
			}
			e.hub.Mu.Unlock()
			if e.store.Len() != 0 {
				t.Errorf("record kept")
			}
		})
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// The reservation is renewed every lease_secs/3 while GitLab holds the job
// request, and a request in flight is not aborted when the daemon stops: its
// answer is still reported.
//
// spec: ARB-28, ARB-29, ARB-31
func TestRenewDuringRequest(t *testing.T) {
	e := newEnv(t, envOptions{gitlab: gitlabfake.Options{LongPoll: 1500 * time.Millisecond}})
	m := e.manager(0, 10)
	e.gate.Set(true)
	stop := e.run(m)
	e.hub.WaitFor(t, "a renewal", func() bool { return e.hub.Calls[client.RouteRenew] > 0 })
	// Stop while the request is held by GitLab.
	stopped := make(chan struct{})
	go func() { stop(false); close(stopped) }()
	<-stopped
	reqs := e.gl.RequestsTo(gitlabfake.RouteJobRequest)
	if len(reqs) == 0 || reqs[len(reqs)-1].Status != http.StatusNoContent {
		t.Fatalf("last job request = %+v, want answered 204 (not aborted)", reqs)
	}
	e.hub.Mu.Lock()
	defer e.hub.Mu.Unlock()
	if n := len(admissionsWithLocked(e.hub, client.OutcomeEmpty)); n != len(reqs) {
		t.Errorf("%d empty outcomes for %d answered requests", n, len(reqs))
	}
}

// Cancel delivery: an immediate cancel replaces a graceful one still being
// retried; the settle is retried (409) until the job ends.
//
// spec: RELAY-15, RELAY-16, RELAY-14, GL-17
func TestCancelReplacesAndSettleWaits(t *testing.T) {
	e := newEnv(t, envOptions{})
	glID, id, stop := runningJob(t, e)
	e.hub.Mu.Lock()
	e.hub.FailNext[client.RouteCancel] = 1 << 30 // the graceful cancel cannot get through
	e.hub.Mu.Unlock()
	if err := e.gl.CancelJob(glID, true); err != nil {
		t.Fatal(err)
	}
	e.hub.AppendOutput(id, []byte("a\n"))
	e.hub.WaitFor(t, "cancel attempts", func() bool { return e.hub.Calls[client.RouteCancel] >= 2 })
	// GitLab now cancels hard: the next answer is 403 canceled.
	e.gl.InjectFault(gitlabfake.Fault{Route: gitlabfake.RoutePatchTrace, Count: 1, Status: http.StatusForbidden,
		Header: http.Header{"Job-Status": {"canceled"}}})
	e.hub.Mu.Lock()
	e.hub.FailNext[client.RouteCancel] = 0
	e.hub.Mu.Unlock()
	e.hub.AppendOutput(id, []byte("b\n"))
	e.hub.WaitFor(t, "immediate cancel", func() bool {
		c := e.hub.Jobs[id].Cancels
		return len(c) > 0 && c[len(c)-1] == client.CancelImmediate
	})
	e.hub.WaitFor(t, "settle attempts on the unfinished job", func() bool { return e.hub.Calls[client.RouteSettle] >= 2 })
	if e.hub.Job(id).Settled != 0 {
		t.Fatalf("settled before the job ended")
	}
	e.hub.Finish(id, client.JobResult{Failure: client.FailureCanceled})
	e.hub.WaitFor(t, "settle", func() bool { return e.hub.Jobs[id].Settled > 0 })
	stop(false)
	if c := e.hub.Job(id).Cancels; c[len(c)-1] != client.CancelImmediate {
		t.Errorf("cancels = %v, want immediate last", c)
	}
	if e.store.Len() != 0 {
		t.Errorf("record kept")
	}
}

// A grant whose lease, counted from when its request was sent, ran out
// before the claim is given back unclaimed and GitLab is not asked.
//
// spec: ARB-31, ARB-27
func TestLapsedGrantNotClaimed(t *testing.T) {
	e := newEnv(t, envOptions{manual: true})
	e.hub.HoldTickets, e.hub.LeaseSecs = true, 5
	m := e.manager(0, 10)
	e.gate.Set(true)
	stop := e.run(m)
	e.hub.WaitFor(t, "a ticket polled", func() bool { return e.hub.Calls[client.RouteTicketGet] > 0 })
	e.clk.Advance(6 * time.Second) // the poll's answer arrives after the lease
	e.hub.GrantTickets()
	e.hub.WaitFor(t, "a released outcome", func() bool { return len(admissionsWithLocked(e.hub, client.OutcomeReleased)) > 0 })
	e.hub.Mu.Lock()
	claims := e.hub.Calls[client.RouteClaim]
	e.hub.HoldTickets = true
	e.hub.Mu.Unlock()
	stop(false)
	if claims != 0 {
		t.Errorf("%d claims of a lapsed grant", claims)
	}
	if n := len(e.gl.RequestsTo(gitlabfake.RouteJobRequest)); n != 0 {
		t.Errorf("%d GitLab requests on a lapsed grant", n)
	}
}
