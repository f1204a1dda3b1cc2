package node

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/node/journal"
	"github.com/vk-ci/vk/node/spool"
	"github.com/vk-ci/vk/node/trace"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

// interruptedMessage ends the trace and the result of a job the node
// stopped under (FAIL-08).
const interruptedMessage = "the node stopped while the job ran; the job was interrupted"

// recover puts back what a previous run of the node left in the journal
// (NODE-06, FAIL-08):
//   - a job accepted or running had its processes die with the node: it
//     ends interrupted, its spooled output kept and a last error line
//     appended, and its result is journaled;
//   - every job finished but not recorded (those included) gets its spool
//     reopened and a sender that resends unacked output, then the result,
//     until the hub records it (NSESS-16).
//
// Reservations do not survive a restart (their clock is gone): the hub
// releases them when held does not list them.
func (a *Agent) recover() error {
	for _, e := range a.journal.Unfinished() {
		if err := a.interruptRecovered(e); err != nil {
			return err
		}
	}
	for _, e := range a.journal.Unrecorded() {
		sp, err := spool.Open(filepath.Join(a.spools, e.Job), spool.Options{Limit: a.cfg.Output.SpoolLimit.Bytes()})
		if err != nil {
			return fmt.Errorf("node: recover %s: %w", e.Job, err)
		}
		st := sp.Status()
		var jres journaledResult
		if err := json.Unmarshal(e.Result, &jres); err != nil {
			a.log.Error("journaled result unreadable; reporting a system failure", logkey.JobID, e.Job, logkey.Err, err)
			jres = journaledResult{JobResult: client.JobResult{Failure: client.FailureSystem, Message: "journaled result unreadable"}}
		}
		res := jres.JobResult
		if !st.Finished {
			n, err := sp.Finish()
			if err != nil {
				return fmt.Errorf("node: recover %s: %w", e.Job, err)
			}
			st.OutputLen = n
		}
		res.OutputLen = st.OutputLen
		jr := newJobRun(e.Job, sp)
		jr.result = &dispatch.Result{Job: e.Job, Result: res, Egress: jres.Egress}
		jr.resultAt = a.clk.Now()
		jr.sendOff = st.Acked
		close(jr.granted)
		a.jobs[e.Job] = jr
		a.log.Info("recovered job awaiting recorded", logkey.JobID, e.Job, "failure", res.Failure,
			"output_len", st.OutputLen, "acked", st.Acked)
	}
	// Spools no unrecorded job owns: a crash after journal.Recorded and
	// before the spool's removal, or after the spool's creation and before
	// journal.Accept (the start was then never answered accepted).
	ents, err := os.ReadDir(a.spools)
	if err != nil {
		return fmt.Errorf("node: recover: %w", err)
	}
	for _, d := range ents {
		if _, ok := a.jobs[d.Name()]; !ok {
			a.log.Info("removing orphaned spool", logkey.JobID, d.Name())
			if err := os.RemoveAll(filepath.Join(a.spools, d.Name())); err != nil {
				a.log.Warn("orphaned spool not removed", logkey.JobID, d.Name(), logkey.Err, err)
			}
		}
	}
	return nil
}

// interruptRecovered ends a job that was running when the node stopped.
func (a *Agent) interruptRecovered(e journal.Entry) error {
	sp, err := spool.Open(filepath.Join(a.spools, e.Job), spool.Options{Limit: a.cfg.Output.SpoolLimit.Bytes()})
	if err != nil {
		return fmt.Errorf("node: recover %s: %w", e.Job, err)
	}
	defer sp.Close()
	if st := sp.Status(); !st.Finished {
		var start dispatch.Start
		opts := trace.Options{Clock: a.opts.Clock, Timestamps: true}
		if json.Unmarshal(e.Spec, &start) == nil && start.Spec.GitLabCI != nil {
			j := start.Spec.GitLabCI
			opts.Timestamps, opts.LimitBytes = j.Timestamps(), j.Trace.LimitBytes
		}
		if opts.LimitBytes <= 0 {
			opts.LimitBytes = trace.DefaultLimitBytes
		}
		// Append the last line only while the trace is under its limit:
		// the bytes already spooled count against it.
		if left := opts.LimitBytes - st.Produced; left > 1024 {
			opts.LimitBytes = left
			tr := trace.New(&appendWriter{a: a, sp: sp}, opts)
			tr.Errorln("Job failed: " + interruptedMessage)
			tr.Close()
		}
	}
	n, err := sp.Finish()
	if err != nil {
		return fmt.Errorf("node: recover %s: %w", e.Job, err)
	}
	if a.opts.Executor == nil {
		// What the process executor's cleanup did not get to remove.
		if err := os.RemoveAll(filepath.Join(a.cfg.buildsDir(), e.Job)); err != nil {
			a.log.Warn("job directory not removed", logkey.JobID, e.Job, logkey.Err, err)
		}
	}
	res := client.JobResult{Failure: client.FailureInterrupted, Message: interruptedMessage, OutputLen: n}
	b, _ := json.Marshal(res)
	if err := a.journal.Finished(e.Job, b); err != nil {
		return fmt.Errorf("node: recover %s: %w", e.Job, err)
	}
	a.log.Warn("job interrupted by the node's stop", logkey.JobID, e.Job, "stage", e.Stage, "output_len", n)
	return nil
}

// appendWriter appends to a spool.
type appendWriter struct {
	a  *Agent
	sp *spool.Spool
}

func (w *appendWriter) Write(p []byte) (int, error) {
	if _, err := w.sp.Append(w.a.runCtx, p); err != nil {
		return 0, err
	}
	return len(p), nil
}
