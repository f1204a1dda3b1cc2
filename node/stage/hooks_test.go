package stage

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/testlog"
	vkexec "github.com/vk-ci/vk/node/exec"
)

// OnStage reports every stage as it starts, in the trace's section order,
// with the job's ID: a node reports `running {stage}` from it.
//
// spec: STAGE-01, NSESS-14
func TestOnStageFollowsSections(t *testing.T) {
	var mu sync.Mutex
	var got []string
	h := newHarness(t, Config{OnStage: func(id, stage string) {
		mu.Lock()
		defer mu.Unlock()
		if id != "hooked" {
			t.Errorf("OnStage job id %q, want hooked", id)
		}
		got = append(got, stage)
	}, Transfers: &transfers{}})
	out := newWatchBuf("")
	res, err := h.runner.Run(t.Context(), Spec{ID: "hooked", Job: transferJob(t), Out: out})
	if err != nil {
		t.Fatal(err)
	}
	if res.Failure != FailureNone {
		t.Fatalf("failure %q\n%s", res.Failure, out.String())
	}
	mu.Lock()
	defer mu.Unlock()
	want := strings.Join(sections(out.String()), " ")
	if strings.Join(got, " ") != want || len(got) < 5 {
		t.Errorf("OnStage calls %v, want the sections %s", got, want)
	}
}

// recordingExec wraps an executor, counting Prepare calls, and gives its
// jobs warnings as the container backend does.
type recordingExec struct {
	inner    vkexec.Executor
	mu       sync.Mutex
	prepared int
}

type warnJob struct{ vkexec.Job }

func (warnJob) Warnings() []string {
	return []string{"WARNING: service postgres (#0) has several aliases; vk uses one per service (the first, \"db\") and drops: pg"}
}

func (r *recordingExec) Prepare(ctx context.Context, req vkexec.PrepareRequest) (vkexec.Job, error) {
	r.mu.Lock()
	r.prepared++
	r.mu.Unlock()
	j, err := r.inner.Prepare(ctx, req)
	if err != nil {
		return nil, err
	}
	return warnJob{j}, nil
}

// A spec's Executor replaces the runner's for that job only, its name
// shows in the trace, and both the spec's and the prepared job's warnings
// are written once each as warning lines (DECISIONS 8).
//
// spec: STAGE-01
func TestSpecExecutorOverrideAndWarnings(t *testing.T) {
	h := newHarness(t, Config{})
	over := &recordingExec{inner: h.runner.cfg.Executor}
	out := newWatchBuf("")
	res, err := h.runner.Run(t.Context(), Spec{ID: "over", Job: fixtureJob(t, "job_response_successful.json"), Out: out,
		Executor: over, ExecutorName: "oci", Warnings: []string{"WARNING: the job has 1 service(s) but no image"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Failure != FailureNone {
		t.Fatalf("failure %q\n%s", res.Failure, out.String())
	}
	tr := out.String()
	if over.prepared != 1 {
		t.Errorf("override prepared %d jobs, want 1", over.prepared)
	}
	for _, want := range []string{"Using the oci executor with bash...", "WARNING: the job has 1 service(s) but no image",
		`WARNING: service postgres (#0) has several aliases; vk uses one per service (the first, "db") and drops: pg`} {
		if strings.Count(tr, want) != 1 {
			t.Errorf("trace has %q %d times, want once:\n%s", want, strings.Count(tr, want), tr)
		}
	}
	if strings.Contains(tr, "WARNING: WARNING:") {
		t.Errorf("doubled warning prefix:\n%s", tr)
	}

	// The runner's own executor still runs jobs without an override.
	r2, err := New(Config{Executor: prepareErrExec{vkexec.ErrPrepare}, Clock: clock.NewFake(testStart), Log: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	res, err = r2.Run(t.Context(), Spec{ID: "p2", Job: fixtureJob(t, "job_response_successful.json"), Out: newWatchBuf(""),
		Executor: over})
	if err != nil {
		t.Fatal(err)
	}
	if res.Failure != FailureNone || over.prepared != 2 {
		t.Errorf("override on a failing runner executor: failure %q, prepared %d", res.Failure, over.prepared)
	}
}

// A graceful cancel does what gitlab-runner's does at that point of the
// job: before the user scripts it ends the whole job (no after_script, no
// cleanup section, like an immediate cancel); during them it stops the
// script and after_script still runs; after them it changes nothing.
//
// spec: FAIL-09, STAGE-01
func TestGracefulCancelByPhase(t *testing.T) {
	cases := []struct {
		at          string // the stage at whose start the cancel arrives
		failure     Failure
		afterScript bool
	}{
		{"get_sources", FailureCanceled, false},
		{"step_script", FailureCanceled, true},
		{"after_script", FailureNone, true},
	}
	for _, tc := range cases {
		t.Run(tc.at, func(t *testing.T) {
			handle := make(chan *Handle, 1)
			h := newHarness(t, Config{OnStage: func(_, stage string) {
				if stage == tc.at {
					(<-handle).Cancel(vkexec.Graceful)
				}
			}})
			j := fixtureJob(t, "job_response_after_script.json")
			out := newWatchBuf("")
			hd, err := h.runner.Start(t.Context(), Spec{ID: "phase-" + tc.at, Job: j, Out: out})
			if err != nil {
				t.Fatal(err)
			}
			handle <- hd
			res := hd.Result()
			tr := out.String()
			ran := strings.Contains(tr, ":after_script\r")
			if res.Failure != tc.failure || ran != tc.afterScript {
				t.Errorf("failure %q, after_script ran %v; want %q, %v; trace:\n%s", res.Failure, ran, tc.failure, tc.afterScript, tr)
			}
			if tc.at == "get_sources" && strings.Contains(tr, ":cleanup_file_variables\r") {
				t.Errorf("a stage ran after the cancel ended the job:\n%s", tr)
			}
		})
	}
}

// The job's timeout during a stage before the user steps: as gitlab-runner's
// executeStage, the stage's timeout warning follows its section's end, and
// no later stage runs.
//
// spec: FAIL-03, STAGE-01
func TestTimeoutBeforeSteps(t *testing.T) {
	var h *harness
	h = newHarness(t, Config{OnStage: func(_, stage string) {
		if stage == "get_sources" {
			h.clk.Advance(time.Hour) // past the job's timeout
		}
	}})
	j := fixtureJob(t, "job_response_after_script.json")
	j.TimeoutSecs = 60
	out := newWatchBuf("")
	res, err := h.runner.Run(t.Context(), Spec{ID: "timeout-sources", Job: j, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	tr := out.String()
	rest := ""
	if i := strings.LastIndex(tr, ":get_sources\r"); i >= 0 { // its section_end
		rest = tr[i:]
	}
	if res.Failure != FailureTimeout || !strings.Contains(rest, "WARNING: get_sources could not run to completion because the timeout was exceeded") ||
		strings.Contains(rest, "section_start:") || !strings.Contains(rest, "ERROR: Job failed: execution took longer than 1m0s seconds") {
		t.Errorf("failure %q; trace:\n%s", res.Failure, tr)
	}
}
