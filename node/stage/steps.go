package stage

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/node/exec"
	"github.com/vk-ci/vk/proto/job"
)

// stepRuns decides whether a user step runs given its `when` and whether
// an earlier step failed.
func stepRuns(when string, failed bool) bool {
	switch when {
	case "always":
		return true
	case "on_failure":
		return failed
	default:
		return !failed
	}
}

// userSteps runs the job's script steps in order, each as its `when`
// allows, until one is aborted, times out or is cancelled.
func (x *run) userSteps(ctx context.Context) {
	x.setScripts(inScripts)
	defer x.setScripts(afterScripts)
	for _, st := range x.job.Steps {
		if st.Name == job.StepAfterScript {
			continue
		}
		if x.aborted() != "" || ctx.Err() != nil {
			return // nothing more runs after an abort or the timeout
		}
		if x.canceled() {
			// Canceled between two steps: as gitlab-runner once its
			// script context ended.
			if x.failure != FailureCanceled {
				x.tr.Warningln("script canceled externally (UI, API)")
			}
			x.fail(FailureCanceled, errCanceled)
			return
		}
		if !stepRuns(st.When, x.failed()) {
			continue
		}
		x.userStep(ctx, st)
	}
}

// userStep runs one script step in its own section. While it runs, the
// handle knows it (a cancel reaches it), and RUNNER_SCRIPT_TIMEOUT bounds
// it.
func (x *run) userStep(ctx context.Context, st job.Step) {
	name := "step_" + strings.ToLower(st.Name)
	x.sectionStart(name)
	x.tr.Title(`Executing "` + name + `" stage of the job script`)
	w := x.writer()
	w.exports(x.exports("running"))
	w.cd(x.projectDir)
	w.commands("script_step", st.Script...)
	stepCtx, stepStop := context.WithCancelCause(ctx)
	x.h.mu.Lock()
	x.h.current, x.h.inUserStep, x.h.stepStop = x.ej, true, stepStop
	alreadyCanceled := x.h.canceled
	x.h.mu.Unlock()
	if alreadyCanceled {
		x.h.Cancel(exec.Graceful)
	}
	var scriptTimer clock.Timer
	if d := x.scriptTimeout(); d > 0 {
		scriptTimer = x.r.clk.AfterFunc(d, func() { stepStop(errTimeout) })
	}
	res, err := x.runScript(stepCtx, name, w.finish())
	if scriptTimer != nil {
		scriptTimer.Stop()
	}
	x.h.mu.Lock()
	x.h.current, x.h.inUserStep, x.h.stepStop = nil, false, nil
	if x.h.graceTimer != nil {
		x.h.graceTimer.Stop()
		x.h.graceTimer = nil
	}
	x.h.mu.Unlock()
	stepStop(nil)
	x.tr.SectionEnd(name)
	x.stepOutcome(ctx, stepCtx, name, res, err)
}

// stepOutcome records a finished step's failure, if any: a backend error,
// the job's or the script's timeout, an abort, a cancel or a non-zero
// exit.
func (x *run) stepOutcome(ctx, stepCtx context.Context, name string, res exec.RunResult, err error) {
	switch {
	case err != nil:
		x.tr.Errorln(err.Error())
		x.failStage(ctx, err, FailureSystem)
	case errors.Is(context.Cause(ctx), errTimeout), errors.Is(context.Cause(stepCtx), errTimeout):
		x.tr.Warningln(name + " could not run to completion because the timeout was exceeded. For more control over job and script timeouts see: " + timeoutDocsURL)
		if !errors.Is(context.Cause(ctx), errTimeout) {
			x.timeout = x.scriptTimeout()
			if x.failure == FailureNone {
				// gitlab-runner's ErrJobScriptTimeout wrapping the
				// script context's error.
				x.msg = "script timeout: context deadline exceeded"
			}
		}
		x.fail(FailureTimeout, fmt.Errorf("%w after %v", errTimeout, x.timeout))
	case x.aborted() != "":
		x.fail(x.aborted(), context.Cause(ctx))
	case x.canceled():
		x.tr.Warningln("script canceled externally (UI, API)")
		x.fail(FailureCanceled, errCanceled)
	case res.ExitCode != 0:
		if res.OOMKilled {
			x.tr.Warningln(fmt.Sprintf("%s ran out of memory: a process was killed for using more than the job's %d MiB", name, x.size.MemMiB))
		}
		if x.failure == FailureNone {
			x.exitCode = exitCode(res)
		}
		x.fail(FailureScript, fmt.Errorf("%s: exit code %d", name, exitCode(res)))
	}
}

func exitCode(res exec.RunResult) int {
	if res.ExitCode < 0 {
		return 137 // killed: what a shell reports for SIGKILL
	}
	return res.ExitCode
}

// jobStatus is CI_JOB_STATUS for after_script.
func (x *run) jobStatus() string {
	switch x.failure {
	case FailureNone:
		return "success"
	case FailureTimeout:
		return "timedout"
	case FailureCanceled:
		return "canceled"
	default:
		return "failed"
	}
}

func (x *run) afterScript(ctx context.Context) {
	var st *job.Step
	for i := range x.job.Steps {
		if x.job.Steps[i].Name == job.StepAfterScript {
			st = &x.job.Steps[i]
			break
		}
	}
	if st == nil || len(st.Script) == 0 || x.aborted() != "" {
		return
	}
	limit := DefaultAfterScriptTimeout
	if v, ok := x.lookup("RUNNER_AFTER_SCRIPT_TIMEOUT"); ok {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			limit = d
		}
	}
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	t := x.r.clk.AfterFunc(limit, func() { cancel(errTimeout) })
	defer t.Stop()
	var res exec.RunResult
	var err error
	x.section("after_script", "Running after_script", func() {
		w := x.writer()
		w.exports(x.exports(x.jobStatus()))
		w.cd(x.projectDir)
		w.notice("Running after script...")
		w.commands("after_script_step", st.Script...)
		res, err = x.runScript(actx, "after_script", w.finish())
	})
	// Like gitlab-runner, the outcome is reported after the section ends.
	var why string
	switch {
	case err != nil:
		why = err.Error()
	case errors.Is(context.Cause(actx), errTimeout):
		why = "execution took longer than " + limit.String()
	case x.aborted() != "":
		why = "context canceled"
	case res.ExitCode != 0:
		why = "exit status " + strconv.Itoa(exitCode(res))
	default:
		return
	}
	if v, _ := x.lookup("AFTER_SCRIPT_IGNORE_ERRORS"); v == "false" {
		x.tr.Errorln("after_script failed: " + why)
		if x.failure == FailureNone {
			x.exitCode = exitCode(res)
		}
		x.fail(FailureScript, errors.New("after_script: "+why))
		return
	}
	x.tr.Warningln("after_script failed, but job will continue unaffected: " + why)
}
