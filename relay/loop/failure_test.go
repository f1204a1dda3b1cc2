package loop

import (
	"bytes"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub"
	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/realhub"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/relay/gitlab"
)

// A 204 from GitLab: the outcome is empty, the reservation and the slot are
// given back, and the loop queues again.
//
// spec: RELAY-10, ARB-33, ARB-34, ARB-02
func TestEmptyGivesBack(t *testing.T) {
	// no long polling: every 204 is Rails' "no job" (Workhorse's own end
	// of a long poll is reported released, TestOneLongPollPerRunner)
	e := newEnv(t, envOptions{gitlab: gitlabfake.Options{LongPoll: -1}})
	m := e.manager(0, 10)
	e.gate.Set(true)
	stop := e.run(m)
	e.hub.WaitFor(t, "two empty outcomes", func() bool { return len(e.hub.AdmissionsWithLocked(client.OutcomeEmpty)) >= 2 })
	e.hub.Mu.Lock()
	for _, id := range e.hub.AdmissionsWithLocked(client.OutcomeEmpty) {
		if !e.hub.Claimed[id] {
			t.Errorf("admission %s not claimed before GitLab was asked", id)
		}
		// The outcome itself gave the reservation back (ARB-34): the
		// relay sends no DELETE after an outcome the hub took.
		if r := e.hub.Grants[id].Reservation; !e.hub.Released[r] {
			t.Errorf("admission %s: reservation %s not released by its empty outcome", id, r)
		}
	}
	e.hub.Mu.Unlock()
	stop(false)
	if n := e.hub.Count(client.RouteReservationDelete); n != 0 {
		t.Errorf("%d reservation DELETEs after empty outcomes the hub took, want 0 (the outcome releases it)", n)
	}
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
		if n := len(e.gl.RequestsTo(gitlabfake.RouteJobRequest)); n != 0 {
			t.Errorf("%d GitLab job requests before approval", n)
		}
		e.gate.Set(true)
		e.hub.WaitFor(t, "a claim after approval", func() bool { return e.hub.Answers[client.RouteClaim] > 0 })
		stop(false)
	})
	t.Run("no slot", func(t *testing.T) {
		e := newEnv(t, envOptions{})
		m := e.manager(1, 10)
		m.slots.Acquire("r1") // a job held elsewhere fills the limit
		e.gate.Set(true)
		stop := e.run(m)
		e.hub.WaitFor(t, "a released outcome", func() bool { return len(e.hub.AdmissionsWithLocked(client.OutcomeReleased)) > 0 })
		e.hub.Mu.Lock()
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
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			e := newEnv(t, envOptions{})
			e.gl.InjectFault(gitlabfake.Fault{Route: gitlabfake.RouteJobRequest, Count: 1, Status: tc.status, RetryAfter: "20"})
			m := e.manager(0, 10)
			e.gate.Set(true)
			start := e.clk.Now()
			stop := e.run(m)
			e.hub.WaitFor(t, "an error outcome", func() bool { return len(e.hub.AdmissionsWithLocked(client.OutcomeError)) > 0 })
			e.hub.WaitFor(t, "an empty outcome after the back-off", func() bool { return len(e.hub.AdmissionsWithLocked(client.OutcomeEmpty)) > 0 })
			waited := e.clk.Now().Sub(start)
			reqs := e.gl.RequestsTo(gitlabfake.RouteJobRequest)
			stop(false)
			if len(reqs) < 2 {
				t.Fatalf("%d job requests, want the faulted one and one after", len(reqs))
			}
			if waited < tc.minWait {
				t.Errorf("asked again after %v, want at least %v", waited, tc.minWait)
			}
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
	e.hub.WaitFor(t, "an error outcome", func() bool { return len(e.hub.AdmissionsWithLocked(client.OutcomeError)) > 0 })
	stop(false)
	if st := m.Heartbeat().Runners[0].State; st != client.RunnerTokenRefused {
		t.Errorf("state = %s, want token_refused", st)
	}
	if n := len(e.gl.RequestsTo(gitlabfake.RouteJobRequest)); n != 1 {
		t.Errorf("%d job requests, want 1 (the runner stops)", n)
	}
}

// runningJob starts a manager, takes one job running script on the real
// node and waits for its commit.
func runningJob(t *testing.T, e *env, script []string, vars ...gitlabfake.Variable) (glID int64, hubID string, m *Manager, stop func(bool)) {
	glID = e.pipeline(script, vars...)
	m = e.manager(0, 10)
	e.gate.Set(true)
	stop = e.run(m)
	hubID = e.hub.OnlyJob(t)
	e.waitGitLab(glID, "commit", committed)
	return glID, hubID, m, stop
}

// waitTrace waits until GitLab's trace of id holds s.
func (e *env) waitTrace(id int64, s string) gitlabfake.JobInfo {
	e.t.Helper()
	return e.waitGitLab(id, "trace "+s, func(ji gitlabfake.JobInfo) bool { return bytes.Contains(ji.Trace, []byte(s)) })
}

// A graceful cancel in GitLab (Job-Status canceling) asks the hub for a
// graceful cancel; the real node stops the script, the job's end is
// reported and GitLab ends it canceled.
//
// spec: GL-17, RELAY-15, GL-22, FAIL-09
func TestCancelGraceful(t *testing.T) {
	e := newEnv(t, envOptions{})
	glID, id, _, stop := runningJob(t, e, []string{"echo step-one", e.waitLine("never"), "echo step-two"})
	e.waitTrace(glID, "step-one")
	if err := e.gl.CancelJob(glID, true); err != nil {
		t.Fatal(err)
	}
	ji := e.waitGitLab(glID, "canceled", func(ji gitlabfake.JobInfo) bool { return ji.State == gitlabfake.StateCanceled })
	e.settled(id)
	stop(false)
	e.hub.Mu.Lock()
	cancels := slices.Clone(e.hub.Cancels[id])
	served := slices.Clone(e.hub.Output[id])
	view := e.hub.Views[id]
	e.hub.Mu.Unlock()
	if len(cancels) == 0 || cancels[0] != client.CancelGraceful {
		t.Errorf("cancels = %v, want graceful first", cancels)
	}
	if view.Result == nil || view.Result.Failure != client.FailureCanceled {
		t.Errorf("hub result = %+v, want canceled", view.Result)
	}
	if !bytes.Equal(ji.Trace, served) || bytes.Contains(ji.Trace, []byte("step-two")) {
		t.Errorf("trace = %q, want the hub's output (%d bytes) without step-two", tail(ji.Trace), len(served))
	}
	if e.store.Len() != 0 {
		t.Errorf("record kept after settle")
	}
}

// An immediate cancel in GitLab (403 with Job-Status canceled) asks the hub
// for an immediate cancel, after which nothing more is written; the job is
// still ended on the wire as gitlab-runner ends it (a last patch, the
// final update, both answered 403).
//
// spec: GL-17, GL-12, RELAY-15
func TestCancelImmediate(t *testing.T) {
	e := newEnv(t, envOptions{})
	// The job writes a line every 20 ms, so a patch is always due.
	glID, id, _, stop := runningJob(t, e, []string{"echo step-one", "while :; do echo tick; sleep 0.02; done"})
	e.waitTrace(glID, "step-one")
	if err := e.gl.CancelJob(glID, false); err != nil {
		t.Fatal(err)
	}
	e.settled(id)
	stop(false)
	e.hub.Mu.Lock()
	c := slices.Clone(e.hub.Cancels[id])
	e.hub.Mu.Unlock()
	if len(c) == 0 || c[len(c)-1] != client.CancelImmediate {
		t.Errorf("cancels = %v, want immediate", c)
	}
	ji, _ := e.gl.Job(glID)
	// As gitlab-runner (network/trace.go): after the 403 nothing more is
	// written, but the aborted job is still ended on the wire: at most one
	// more patch of what is left (answered 403 again), then the final
	// update, answered 403.
	rejected := 0
	for _, p := range ji.Patches {
		switch {
		case p.Status == http.StatusForbidden:
			rejected++
		case rejected > 0:
			t.Errorf("patch %+v answered after the 403", p)
		}
	}
	if rejected < 1 || rejected > 2 {
		t.Errorf("%d patches answered 403, want the abort and at most one flush", rejected)
	}
	var final []gitlabfake.Update
	for _, u := range ji.Updates {
		if u.State != "running" {
			final = append(final, u)
		}
	}
	if len(final) != 1 || final[0].State != "failed" || final[0].Status != http.StatusForbidden {
		t.Errorf("final updates %+v, want one failed update answered 403", final)
	}
	if e.store.Len() != 0 {
		t.Errorf("record kept after settle")
	}
}

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
	e.hub.WaitFor(t, "a renewal the hub accepted", func() bool { return e.hub.Answers[client.RouteRenew] > 0 })
	// Stop while the request is held by GitLab.
	stop(false)
	reqs := e.gl.RequestsTo(gitlabfake.RouteJobRequest)
	if len(reqs) == 0 || reqs[len(reqs)-1].Status != http.StatusNoContent {
		t.Fatalf("last job request = %+v, want answered 204 (not aborted)", reqs)
	}
	// the first request (no last_update yet) is Rails' empty answer; the
	// held ones end in Workhorse's own 204, reported released
	empty, released := len(e.hub.AdmissionsWith(client.OutcomeEmpty)), len(e.hub.AdmissionsWith(client.OutcomeReleased))
	if empty+released != len(reqs) || released == 0 {
		t.Errorf("%d empty and %d released outcomes for %d answered requests, want them to add up with the held one released", empty, released, len(reqs))
	}
}

// Cancel delivery: an immediate cancel replaces a graceful one still being
// retried (the hub answering 503 meanwhile); the settle is retried (409 from
// the real hub) until the job ends.
//
// spec: RELAY-15, RELAY-16, RELAY-14, GL-17
func TestCancelReplacesAndSettleWaits(t *testing.T) {
	e := newEnv(t, envOptions{})
	// The job ignores SIGTERM (a graceful cancel) and waits for release.
	glID, id, _, stop := runningJob(t, e, []string{"trap '' TERM", "echo a", e.waitLine("end"), "echo b"})
	e.waitTrace(glID, " a\n")
	e.hub.SetFail(client.RouteCancel, 1<<30) // the graceful cancel cannot get through
	if err := e.gl.CancelJob(glID, true); err != nil {
		t.Fatal(err)
	}
	e.hub.WaitFor(t, "cancel attempts", func() bool { return e.hub.Calls[client.RouteCancel] >= 2 })
	// GitLab now cancels hard: the next answer is 403 canceled.
	e.gl.InjectFault(gitlabfake.Fault{Route: gitlabfake.RoutePatchTrace, Count: 1, Status: http.StatusForbidden,
		Header: http.Header{"Job-Status": {"canceled"}}})
	e.hub.SetFail(client.RouteCancel, 0)
	e.hub.WaitFor(t, "immediate cancel", func() bool {
		c := e.hub.Cancels[id]
		return len(c) > 0 && c[len(c)-1] == client.CancelImmediate
	})
	e.settled(id)
	stop(false)
	e.hub.Mu.Lock()
	c := slices.Clone(e.hub.Cancels[id])
	e.hub.Mu.Unlock()
	if !slices.Contains(c, client.CancelGraceful) || c[len(c)-1] != client.CancelImmediate {
		t.Errorf("cancels = %v, want graceful tried, immediate last", c)
	}
	if e.store.Len() != 0 {
		t.Errorf("record kept")
	}
	if ji, _ := e.gl.Job(glID); strings.Contains(string(ji.Trace), " b\n") {
		t.Errorf("the job ran past its immediate cancel")
	}
}

// A job the hub could not place is failed in GitLab as
// runner_system_failure, never committed, with the reason in the trace.
// Provoked for real: the granted node stops just before the submission
// reaches the hub, and the manager submits place_within_secs 1 (the
// test-only Config.PlaceWithinSecs; production always sends 300), so the
// real hub ends it no_capacity within a second instead of five minutes.
// The trace names the window actually submitted.
//
// spec: GL-09, FAIL-10, TRACE-07, ARB-37, ARB-38
func TestNoCapacity(t *testing.T) {
	e := newEnv(t, envOptions{})
	// The submission must reach a hub that has seen the node go (a kept
	// connection gets it there before the node's session close otherwise).
	e.hub.OnSubmit = func(client.JobSubmission) { e.real.StopNode() }
	glID := e.pipeline([]string{"echo never"})
	m := e.manager(0, 10)
	m.cfg.PlaceWithinSecs = 1
	e.gate.Set(true)
	stop := e.run(m)
	id := e.hub.OnlyJob(t)
	if got := e.hub.Sub(id).PlaceWithinSecs; got != 1 {
		t.Errorf("submitted place_within_secs = %d, want the configured 1", got)
	}
	ji := e.waitGitLab(glID, "failed", func(ji gitlabfake.JobInfo) bool { return ji.State == gitlabfake.StateFailed })
	e.settled(id)
	stop(false)
	if v := e.hub.Views[id]; v.Result == nil || v.Result.Failure != client.FailureNoCapacity {
		t.Errorf("hub result = %+v, want no_capacity", v.Result)
	}
	if committed(ji) {
		t.Errorf("unplaceable job was committed")
	}
	if ji.FailureReason != gitlab.ReasonRunnerSystemFailure {
		t.Errorf("failure_reason = %q, want runner_system_failure", ji.FailureReason)
	}
	if !bytes.Contains(ji.Trace, []byte("no node of the fleet could take this job within 1 s (pool linux, mem=1G cpus=1 disk=1G)")) || !bytes.Contains(ji.Trace, []byte(" 00O ")) {
		t.Errorf("trace = %q, want the stamped reason", ji.Trace)
	}
	if e.store.Len() != 0 {
		t.Errorf("record kept after settle")
	}
}

// A submission refused approval_pending or project_rejected by the real
// hub (approvals.required, the server approved, the project pending or
// rejected by the operator) releases the reservation and fails the job
// uncommitted as runner_configuration_error, the trace ending in the
// instructions (exact lines).
//
// spec: FAIL-20, FAIL-21, FAIL-22, TRACE-07, API-49
func TestApprovalRefusal(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ui     string
		reject bool
		want   []string
	}{
		{"pending with url", "https://hub.example.com:8444", false, []string{
			"\x1b[31;1mERROR: project acme/web (ID %d) is waiting for approval on the fleet hub: https://hub.example.com:8444/gitlab/%i/projects/%d\x1b[0;m",
			"\x1b[0KRetry this job once an operator has approved it there.\x1b[0;m"}},
		{"pending without url", "", false, []string{
			"\x1b[31;1mERROR: project acme/web (ID %d) is waiting for approval on the fleet hub %h.\x1b[0;m",
			"\x1b[0KRetry this job once an operator has approved it (GitLab > Pending).\x1b[0;m"}},
		{"rejected", "", true, []string{
			"\x1b[31;1mERROR: project acme/web (ID %d) was rejected on the fleet hub %h.\x1b[0;m",
			"\x1b[0KRetry this job once an operator has approved it (GitLab > Pending).\x1b[0;m"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOptions{hub: realhub.Options{Approvals: true, Hub: func(c *hub.Config) { c.UIURL = tc.ui }}})
			inst := strings.TrimPrefix(e.gl.URL(), "http://")
			ctx := t.Context()
			// `vk-hub projects approve <server>`; the project stays
			// pending, or is rejected.
			if err := e.real.Admin().SetApproval(ctx, inst, 0, store.ApprovalApproved); err != nil {
				t.Fatal(err)
			}
			if tc.reject {
				if err := e.real.Admin().SetApproval(ctx, inst, e.proj.ID, store.ApprovalRejected); err != nil {
					t.Fatal(err)
				}
			}
			glID := e.pipeline([]string{"echo never"}, gitlabfake.Variable{Key: "FF_TIMESTAMPS", Value: "false", Public: true})
			m := e.manager(0, 10)
			e.gate.Set(true)
			stop := e.run(m)
			ji := e.waitGitLab(glID, "failed", func(ji gitlabfake.JobInfo) bool { return ji.State == gitlabfake.StateFailed })
			stop(false)
			want := strings.Join(tc.want, "\n") + "\n"
			want = strings.NewReplacer("%d", itoa(e.proj.ID), "%i", inst, "%h", e.enrol.HubURL).Replace(want)
			if string(ji.Trace) != want {
				t.Errorf("trace =\n%q\nwant\n%q", ji.Trace, want)
			}
			if ji.FailureReason != gitlab.ReasonRunnerConfigurationError || committed(ji) {
				t.Errorf("failure_reason %q committed %v, want runner_configuration_error uncommitted", ji.FailureReason, committed(ji))
			}
			e.hub.Mu.Lock()
			if len(e.hub.Refused) != 1 {
				t.Errorf("%d submissions refused, want 1", len(e.hub.Refused))
			} else if r := e.hub.Refused[0].Reservation; !e.hub.Released[r] {
				t.Errorf("reservation %s of the refused submission not released", r)
			}
			e.hub.Mu.Unlock()
			if e.store.Len() != 0 {
				t.Errorf("record kept")
			}
		})
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// A grant whose lease, counted from when its request was sent, ran out
// before the claim is given back unclaimed and GitLab is not asked. For
// real: the hub has no node while the ticket waits, the relay's clock
// passes the lease, then a node joins and the real hub grants.
//
// spec: ARB-31, ARB-27
func TestLapsedGrantNotClaimed(t *testing.T) {
	e := newEnv(t, envOptions{manual: true, hub: realhub.Options{NoNode: true}})
	m := e.manager(0, 10)
	e.gate.Set(true)
	stop := e.run(m)
	e.hub.WaitFor(t, "a ticket polled", func() bool { return e.hub.Calls[client.RouteTicketGet] > 0 })
	e.clk.Advance((LeaseSecs + 1) * time.Second) // the poll's answer arrives after the lease
	e.real.StartNode()
	var lapsed string
	e.hub.WaitFor(t, "a released outcome", func() bool {
		for _, a := range e.hub.AdmissionsWithLocked(client.OutcomeReleased) {
			lapsed = a
		}
		return lapsed != ""
	})
	stop(false)
	// The loop goes on with fresh grants, which it may claim; the lapsed
	// one was never claimed, and GitLab was asked only on claimed ones.
	e.hub.Mu.Lock()
	claims, accepted := e.hub.ClaimCalls[lapsed], e.hub.Answers[client.RouteClaim]
	e.hub.Mu.Unlock()
	if claims != 0 {
		t.Errorf("%d claims of the lapsed grant %s", claims, lapsed)
	}
	if n := len(e.gl.RequestsTo(gitlabfake.RouteJobRequest)); n > accepted {
		t.Errorf("%d GitLab requests for %d claimed grants: one on the lapsed grant", n, accepted)
	}
}

// Output goes to GitLab in one patch per X-GitLab-Trace-Update-Interval, as
// gitlab-runner's trace loop sends it: not in a burst when the job starts
// nor right after a canceling answer (the hub's view changing), only the
// final flush follows the job's end at once.
//
// spec: GL-10, GL-22
func TestPatchCadence(t *testing.T) {
	e := newEnv(t, envOptions{gitlabClock: true})
	glID, id, _, stop := runningJob(t, e, []string{"echo start", "while [ ! -e " + filepath.Join(e.sig, "go") + " ]; do echo tick; sleep 0.02; done"})
	e.waitTrace(glID, "tick")
	e.waitGitLab(glID, "patches", func(ji gitlabfake.JobInfo) bool { return len(ji.Patches) >= 4 })
	if err := e.gl.CancelJob(glID, true); err != nil { // canceling: the view changes
		t.Fatal(err)
	}
	e.waitGitLab(glID, "final", func(ji gitlabfake.JobInfo) bool { return ji.State.Finished() })
	e.settled(id)
	stop(false)
	patches := e.gl.RequestsTo(gitlabfake.RoutePatchTrace)
	// The last patch is the final flush; every other one waited an
	// interval since the one before.
	for i := 1; i < len(patches)-1; i++ {
		if d := patches[i].At.Sub(patches[i-1].At); d < gitlab.DefaultUpdateInterval {
			t.Errorf("patch %d came %v after the one before, want at least %v", i, d, gitlab.DefaultUpdateInterval)
		}
	}
}
