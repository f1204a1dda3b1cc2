package stage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/node/exec"
)

// finish closes the trace, cleans the environment up and assembles the
// result.
func (x *run) finish() Result {
	if err := x.tr.Close(); err != nil {
		x.log.Warn("trace", slog.Any(logkey.Err, err))
	}
	if err := x.tr.Err(); err != nil && x.failure == FailureNone {
		// The trace could not be kept: the job's outcome cannot be shown.
		x.fail(FailureSystem, fmt.Errorf("%w: %w", ErrSystem, err))
	}
	res := Result{Failure: x.failure, Err: x.err, OutputLen: x.tr.Len(), Truncated: x.tr.Truncated()}
	if x.failure == FailureScript {
		res.ExitCode = x.exitCode
	}
	if x.ej != nil {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := x.ej.Cleanup(cctx); err != nil {
			x.log.Warn("cleanup", slog.Any(logkey.Err, err))
		}
		cancel()
		res.Usage = x.ej.Usage()
	}
	res.Usage.Size = x.size
	res.Usage.Wall = x.r.clk.Now().Sub(x.start) // driver's start to the end, cleanup included (NODE-14)
	return res
}

// failStage records err as the stage's failure: timeout or cancellation
// when the job's context ended, a marked failure, or def.
func (x *run) failStage(ctx context.Context, err error, def Failure) {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errTimeout):
		x.fail(FailureTimeout, err)
	case x.aborted() != "":
		x.fail(x.aborted(), err)
	case errors.Is(err, ErrConfiguration):
		x.fail(FailureConfiguration, err)
	case errors.Is(err, ErrImagePull):
		x.fail(FailureImagePull, err)
	case errors.Is(err, ErrSystem), errors.Is(err, exec.ErrPrepare), errors.Is(err, exec.ErrStart):
		x.fail(FailureSystem, err)
	default:
		x.fail(def, err)
	}
}

// finalLine writes gitlab-runner's last line for the outcome, on a new
// runner stream as gitlab-runner does (its entry's flag is ' ', not the
// '+' that follows the last section's end marker).
func (x *run) finalLine() {
	if err := x.tr.NewRunnerStream(); err != nil {
		x.log.Warn("trace", slog.Any(logkey.Err, err))
	}
	if f := x.aborted(); f != "" && (x.failure == FailureNone || x.failure == f) {
		x.failure = f
		if f == FailureInterrupted {
			x.err = errInterrupted
			x.tr.Errorln("Job failed (system failure): the node stopped the job")
			return
		}
	}
	if x.failure == FailureNone && x.canceled() {
		x.fail(FailureCanceled, errCanceled)
	}
	switch x.failure {
	case FailureNone:
		x.tr.Infoln("Job succeeded")
	case FailureScript:
		x.tr.Errorln("Job failed: exit status " + strconv.Itoa(x.exitCode))
	case FailureTimeout:
		if x.msg != "" {
			x.tr.Errorln("Job failed: " + x.msg)
			return
		}
		// gitlab-runner formats the time.Duration with %v, then "seconds".
		x.tr.Errorln(fmt.Sprintf("Job failed: execution took longer than %v seconds", x.timeout))
	case FailureCanceled:
		x.tr.Errorln("Job failed: canceled")
	case FailureSystem:
		x.tr.Errorln("Job failed (system failure): " + x.failText())
	default:
		x.tr.Errorln("Job failed: " + x.failText())
	}
}

func (x *run) failText() string {
	switch {
	case x.msg != "":
		return x.msg
	case x.err != nil:
		return x.err.Error()
	}
	return "unknown error"
}
