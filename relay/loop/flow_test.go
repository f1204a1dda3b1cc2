package loop

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/relay/gitlab"
	"github.com/vk-ci/vk/relay/state"
)

// seqLines returns the script lines' contents found in a trace, in order:
// the node writes each output line as "<RFC 3339 time> <stream tag>
// <line>" (timestamped trace format).
func seqLines(trace []byte) []string {
	var out []string
	for _, l := range strings.Split(string(trace), "\n") {
		f := strings.SplitN(l, " ", 3)
		if len(f) == 3 && f[1] == "01O" {
			out = append(out, f[2])
		}
	}
	return out
}

// containsSeq reports whether lines hold from..to consecutively (what
// `seq from to` prints).
func containsSeq(lines []string, from, to int) bool {
	n := to - from + 1
	for i, l := range lines {
		if l == fmt.Sprint(from) && len(lines)-i >= n {
			ok := true
			for k := 0; k < n && ok; k++ {
				ok = lines[i+k] == fmt.Sprint(from+k)
			}
			if ok {
				return true
			}
		}
	}
	return false
}

// The happy path end to end against the real hub and a real node: reserve
// → grant → claim → GitLab 201 → record → submit → accepted → commit →
// trace patched byte for byte (over 2 MiB, so several patches) → final
// update → settle → record dropped. Hub hiccups (503) on submit, outcome,
// claim and settle are retried.
//
// spec: ARB-02, ARB-26, ARB-33, ARB-36, ARB-38, RELAY-13, RELAY-14, RELAY-07, RELAY-08, RELAY-10, RELAY-11, RELAY-12, GL-08, GL-10, GL-14, GL-15, TRACE-06, GL-22
func TestWholeLoop(t *testing.T) {
	for _, twoPhase := range []bool{false, true} {
		t.Run(fmt.Sprintf("two_phase=%v", twoPhase), func(t *testing.T) { testWholeLoop(t, twoPhase) })
	}
}

func testWholeLoop(t *testing.T, twoPhase bool) {
	e := newEnv(t, envOptions{gitlab: gitlabfake.Options{TwoPhaseCommit: twoPhase}})
	// Hub hiccups are retried (RELAY-13, RELAY-14).
	e.hub.SetFail(client.RouteSubmit, 2)
	e.hub.SetFail(client.RouteOutcome, 1)
	e.hub.SetFail(client.RouteSettle, 1)
	e.hub.SetFail(client.RouteClaim, 1)
	const lines = 60000 // about 2 MiB with the node's timestamps
	glID := e.pipeline([]string{fmt.Sprintf("seq 1 %d", lines)})
	var recorded []state.Job
	e.hub.OnSubmit = func(sub client.JobSubmission) {
		// The job is in the state file before it is submitted (RELAY-07).
		st, err := state.Open(e.dir, "r1", e.enrol.ID)
		if err != nil {
			t.Errorf("reopen state: %v", err)
			return
		}
		recorded = st.Jobs()
		if ji, _ := e.gl.Job(glID); committed(ji) {
			t.Errorf("job committed in GitLab before its submission")
		}
	}
	m := e.manager(0, 10)
	e.gate.Set(true)
	stop := e.run(m)

	id := e.hub.OnlyJob(t)
	e.hub.Mu.Lock()
	rec := slices.Clone(recorded)
	e.hub.Mu.Unlock()
	if len(rec) != 1 || rec[0].ReserveRequestID == "" || rec[0].GitLabID != glID || rec[0].Phase != state.PhaseTaken || rec[0].Token == "" {
		t.Fatalf("state at submission = %+v, want the job recorded as taken", rec)
	}
	sub := e.hub.Sub(id)
	if sub.Admission == "" || sub.Reservation == "" || sub.PlaceWithinSecs != client.RelayPlaceWithinSecs || sub.Runner != "r1" || sub.Spec.GitLabCI == nil {
		t.Errorf("submission = %+v, want admission, reservation, place_within_secs 300", sub)
	}
	if sub.Queue == nil || sub.Queue.Size < 0 || sub.Queue.TimeInQueueSecs < 0 {
		t.Errorf("submission gitlab_queue = %+v, want GitLab's queue metrics", sub.Queue)
	}
	if sub.RequestID != rec[0].SubmitRequestID {
		t.Errorf("submission request_id %q, recorded %q", sub.RequestID, rec[0].SubmitRequestID)
	}
	ji := e.waitGitLab(glID, "success", func(ji gitlabfake.JobInfo) bool { return ji.State == gitlabfake.StateSuccess })
	if !committed(ji) {
		t.Errorf("job never committed (no running update)")
	}
	e.settled(id)
	stop(false)

	e.hub.Mu.Lock()
	served := slices.Clone(e.hub.Output[id])
	view := e.hub.Views[id]
	a := e.hub.Outcomes[sub.Admission]
	claimed := e.hub.Claimed[sub.Admission]
	calls := maps2(e.hub.Calls)
	e.hub.Mu.Unlock()
	if !bytes.Equal(ji.Trace, served) {
		t.Errorf("GitLab trace (%d bytes) differs from the hub's output (%d bytes)", len(ji.Trace), len(served))
	}
	if view.State != client.JobFinished || view.Result == nil || view.Result.OutputLen != int64(len(ji.Trace)) {
		t.Errorf("hub view = %+v, want finished with output_len %d", view, len(ji.Trace))
	}
	if !containsSeq(seqLines(ji.Trace), 1, lines) {
		t.Errorf("trace (%d bytes) lacks the script's %d lines: %q", len(ji.Trace), lines, tail(ji.Trace))
	}
	big := 0
	for _, p := range ji.Patches {
		if p.Len > gitlab.MaxTracePatch {
			t.Errorf("patch of %d bytes, want at most 1 MiB", p.Len)
		}
		if p.Len > 0 {
			big++
		}
	}
	if big < 3 {
		t.Errorf("%d patches for %d bytes, want the trace in pieces of at most 1 MiB", big, len(ji.Trace))
	}
	last := ji.Updates[len(ji.Updates)-1]
	want := gitlab.TraceChecksum(ji.Trace)
	if last.State != "success" || last.Checksum != want.Checksum || last.Bytesize != want.Bytesize || last.FailureReason != "" {
		t.Errorf("final update = %+v, want success with %+v", last, want)
	}
	if n := e.store.Len(); n != 0 {
		t.Errorf("state file still holds %d job(s) after settle", n)
	}
	if !claimed || !slices.Equal(a, []client.Outcome{client.OutcomeJob}) {
		t.Errorf("admission claimed=%v outcomes=%v, want claimed and [job]", claimed, a)
	}
	for route, n := range map[string]int{client.RouteSubmit: 3, client.RouteClaim: 2, client.RouteOutcome: 2, client.RouteSettle: 2} {
		if calls[route] < n {
			t.Errorf("%d calls of %s, want at least %d (the 503s retried)", calls[route], route, n)
		}
	}
	if leaks := e.gl.RunnerTokenLeaks(); len(leaks) > 0 {
		t.Errorf("runner token sent to %d per-job requests", len(leaks))
	}
}

func maps2(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Translation notices travel in the spec for the node to write: the real
// node writes the warning into the job's output, and the daemon itself
// writes nothing else into the trace of a job it submits.
//
// spec: TRACE-06, RELAY-11
func TestNoticesInSpec(t *testing.T) {
	e := newEnv(t, envOptions{})
	pl, err := e.gl.CreatePipeline(e.proj.Path, gitlabfake.PipelineSpec{Jobs: []gitlabfake.JobSpec{{Name: "build", Script: []string{"echo built"},
		Services: []gitlabfake.Image{{Name: "postgres:16", Alias: "db,db2"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	glID := pl.Jobs["build"]
	m := e.manager(0, 10)
	e.gate.Set(true)
	stop := e.run(m)
	id := e.hub.OnlyJob(t)
	spec := e.hub.Sub(id).Spec.GitLabCI
	if len(spec.Notices) != 1 || spec.Notices[0].Level != "warning" || !strings.Contains(spec.Notices[0].Text, `drops db2`) {
		t.Errorf("notices = %+v, want the dropped alias warning", spec.Notices)
	}
	ji := e.waitGitLab(glID, "final", func(ji gitlabfake.JobInfo) bool {
		return ji.State == gitlabfake.StateSuccess || ji.State == gitlabfake.StateFailed
	})
	e.settled(id)
	stop(false)
	e.hub.Mu.Lock()
	served := slices.Clone(e.hub.Output[id])
	e.hub.Mu.Unlock()
	if !bytes.Equal(ji.Trace, served) {
		t.Errorf("the trace (%q) is not exactly the hub's output (%q): the daemon wrote into it", tail(ji.Trace), tail(served))
	}
}

// Every job request carries a new X-Request-Id, as gitlab-runner's do, and
// the one of the request that delivered the job (as GitLab answered it)
// reaches the node in the spec, for get_sources' Gitaly correlation ID.
//
// spec: GL-03, SPEC-07
func TestCorrelationIDInSpec(t *testing.T) {
	e := newEnv(t, envOptions{})
	glID := e.pipeline([]string{"echo built"})
	m := e.manager(0, 10)
	e.gate.Set(true)
	stop := e.run(m)
	id := e.hub.OnlyJob(t)
	got := e.hub.Sub(id).Spec.GitLabCI.Sources.CorrelationID
	e.waitGitLab(glID, "final", func(ji gitlabfake.JobInfo) bool {
		return ji.State == gitlabfake.StateSuccess || ji.State == gitlabfake.StateFailed
	})
	e.settled(id)
	stop(false)
	seen := map[string]bool{}
	var delivered string
	for _, r := range e.gl.RequestsTo(gitlabfake.RouteJobRequest) {
		rid := r.Header.Get("X-Request-Id")
		if len(rid) != 32 || seen[rid] {
			t.Errorf("job request X-Request-Id %q: want a new 32-hex ID per request", rid)
		}
		seen[rid] = true
		if r.Status == 201 {
			delivered = rid
		}
	}
	if delivered == "" || got != delivered {
		t.Errorf("spec correlation ID %q, want the delivering request's %q", got, delivered)
	}
}
