package loop

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/relay/gitlab"
	"github.com/vk-ci/vk/relay/internal/hubfake"
	"github.com/vk-ci/vk/relay/state"
)

// output returns n bytes of deterministic, line-structured job output.
func output(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "line %d %x\r\n", i, r.Uint64())
	}
	return b.Bytes()[:n]
}

// The happy path end to end: reserve → grant → claim → GitLab 201 → record →
// submit → accepted → commit → trace patched byte for byte → final update →
// settle → record dropped.
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
	e.hub.Mu.Lock()
	e.hub.FailNext[client.RouteSubmit] = 2
	e.hub.FailNext[client.RouteOutcome] = 1
	e.hub.FailNext[client.RouteSettle] = 1
	e.hub.FailNext[client.RouteClaim] = 1
	e.hub.Mu.Unlock()
	glID := e.pipeline()
	var recorded []state.Job
	e.hub.OnSubmit = func(sub client.JobSubmission) {
		// RELAY-07: the job is in the state file before it is submitted.
		st, err := state.Open(e.dir, "r1", hubfake.RelayID)
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
	if len(recorded) != 1 || recorded[0].ReserveRequestID == "" || recorded[0].GitLabID != glID || recorded[0].Phase != state.PhaseTaken || recorded[0].Token == "" {
		t.Fatalf("state at submission = %+v, want the job recorded as taken", recorded)
	}
	sub := e.hub.Job(id).Sub
	if sub.Admission == "" || sub.Reservation == "" || sub.PlaceWithinSecs != PlaceWithinSecs || sub.Runner != "r1" || sub.Spec.GitLabCI == nil {
		t.Errorf("submission = %+v, want admission, reservation, place_within_secs 300", sub)
	}
	if sub.RequestID != recorded[0].SubmitRequestID {
		t.Errorf("submission request_id %q, recorded %q", sub.RequestID, recorded[0].SubmitRequestID)
	}
	e.waitGitLab(glID, "commit", committed)

	// 2.5 MiB of output in pieces, as a node streams it.
	out := output(1, 5<<19)
	for i := 0; i < len(out); i += 700 << 10 {
		e.hub.AppendOutput(id, out[i:min(len(out), i+700<<10)])
	}
	code := 0
	e.hub.Finish(id, client.JobResult{ExitCode: &code})
	ji := e.waitGitLab(glID, "success", func(ji gitlabfake.JobInfo) bool { return ji.State == gitlabfake.StateSuccess })
	e.hub.WaitFor(t, "settle", func() bool { return e.hub.Jobs[id].Settled > 0 })
	stop(false)

	if !bytes.Equal(ji.Trace, out) {
		t.Errorf("GitLab trace (%d bytes) differs from the hub's output (%d bytes)", len(ji.Trace), len(out))
	}
	for _, p := range ji.Patches {
		if p.Len > gitlab.MaxTracePatch {
			t.Errorf("patch of %d bytes, want at most 1 MiB", p.Len)
		}
	}
	last := ji.Updates[len(ji.Updates)-1]
	want := gitlab.TraceChecksum(out)
	if last.State != "success" || last.Checksum != want.Checksum || last.Bytesize != want.Bytesize || last.FailureReason != "" {
		t.Errorf("final update = %+v, want success with %+v", last, want)
	}
	if n := e.store.Len(); n != 0 {
		t.Errorf("state file still holds %d job(s) after settle", n)
	}
	a := e.hub.Adms[sub.Admission]
	if !a.Claimed || !slices.Equal(a.Outcomes, []client.Outcome{client.OutcomeJob}) {
		t.Errorf("admission claimed=%v outcomes=%v, want claimed and [job]", a.Claimed, a.Outcomes)
	}
	if leaks := e.gl.RunnerTokenLeaks(); len(leaks) > 0 {
		t.Errorf("runner token sent to %d per-job requests", len(leaks))
	}
}

// Translation notices travel in the spec for the node to write, so the
// daemon writes nothing into the trace of a job it submits.
//
// spec: TRACE-06, RELAY-11
func TestNoticesInSpec(t *testing.T) {
	e := newEnv(t, envOptions{})
	pl, err := e.gl.CreatePipeline(e.proj.Path, gitlabfake.PipelineSpec{Jobs: []gitlabfake.JobSpec{{Name: "build", Script: []string{"make"},
		Services: []gitlabfake.Image{{Name: "postgres:16", Alias: "db,db2"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	glID := pl.Jobs["build"]
	m := e.manager(0, 10)
	e.gate.Set(true)
	stop := e.run(m)
	id := e.hub.OnlyJob(t)
	spec := e.hub.Job(id).Sub.Spec.GitLabCI
	if len(spec.Notices) != 1 || spec.Notices[0].Level != "warning" || !strings.Contains(spec.Notices[0].Text, `drops db2`) {
		t.Errorf("notices = %+v, want the dropped alias warning", spec.Notices)
	}
	e.waitGitLab(glID, "commit", committed)
	e.hub.Finish(id, client.JobResult{})
	ji := e.waitGitLab(glID, "success", func(ji gitlabfake.JobInfo) bool { return ji.State == gitlabfake.StateSuccess })
	stop(false)
	if len(ji.Trace) != 0 {
		t.Errorf("the daemon wrote %q into the trace of a submitted job", ji.Trace)
	}
}
