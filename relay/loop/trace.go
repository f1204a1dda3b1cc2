package loop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/vk-ci/vk/hubclient"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/relay/gitlab"
	"github.com/vk-ci/vk/relay/state"
)

// tracer is one submitted job's conversation with GitLab: commit, trace
// patches, keep-alives and the final update (GL-08..17).
type tracer struct {
	m      *Manager
	r      *runnerState
	j      state.Job
	log    *slog.Logger
	creds  gitlab.JobCredentials
	cancel *canceller
	// durable is the submitted record's state write while under way; the
	// commit waits for it. nil once done (or for a resumed job).
	durable durable

	offset   int64              // GitLab's trace length as last answered
	digest   gitlab.TraceDigest // over the trace's [0, digestTo)
	digestTo int64
	interval time.Duration
	lastSent time.Time // last patch or keep-alive
	note     waitNote  // lines on why the job waits for a node
	aborted  bool      // GitLab ended the job: write nothing more (GL-17)
	// abortCancelled: the immediate cancel that follows an abort was
	// delivered (or refused) by the hub.
	abortCancelled bool
}

// follow runs a submitted job until its final update reached GitLab and the
// hub settled it (RELAY-12). It returns the job's record and false when ctx
// ended first. sub is the submission's answer when the follow starts at
// it (its record's write may still be under way).
func (m *Manager) follow(ctx context.Context, r *runnerState, j state.Job, sub submitted, log *slog.Logger) (state.Job, bool) {
	log = log.With(logkey.JobID, j.HubJob)
	// The view watch and the canceller end with the job's follow: follow
	// returns only once they did, so nothing of the job outlives its
	// handler (nor, at the shutdown deadline, Run).
	wctx, stop := context.WithCancel(ctx)
	var helpers sync.WaitGroup
	defer func() {
		stop()
		helpers.Wait()
	}()
	w := &viewWatch{notify: make(chan struct{}, 1)}
	var after uint64
	if v := sub.view; v != nil && v.State != client.JobFinished {
		// The submission's answer is the job's view already: the watch
		// long-polls past it at once, a round trip sooner.
		w.view, after = v, v.Revision
	}
	c := &canceller{m: m, hubJob: j.HubJob, log: log, wake: make(chan struct{}, 1)}
	helpers.Go(func() { m.watchView(wctx, j.HubJob, after, w) })
	helpers.Go(func() { c.run(wctx) })
	t := &tracer{m: m, r: r, j: j, log: log, creds: gitlab.JobCredentials{ID: j.GitLabID, Token: j.Token}, cancel: c,
		durable: sub.durable, offset: j.TraceOffset, interval: gitlab.DefaultUpdateInterval, lastSent: m.clk.Now(),
		note: waitNote{since: m.clk.Now()}}
	ok := t.run(ctx, w)
	if t.durable != nil {
		<-t.durable.Done() // a file write: it ends by itself
		t.wrote()
	}
	return t.j, ok
}

// run follows the job. Like gitlab-runner's trace loop (network/trace.go
// watch), output goes to GitLab in one patch per update interval, on the
// interval's timer: neither the job's start nor a cancel, which change the
// hub's view, sends one sooner. Once the job finished, everything left is
// patched at once and the final update follows (GL-14).
func (t *tracer) run(ctx context.Context, w *viewWatch) bool {
	m := t.m
	timer := m.clk.NewTimer(t.interval)
	defer timer.Stop()
	tick := false // the interval's timer fired since the last step
	for {
		v, werr := w.latest()
		if werr != nil && t.j.Phase == state.PhaseSubmitted && t.j.Response != nil && !t.aborted {
			// No node accepted the job and the hub does not know it: a
			// new leader forgot it after a failover (docs/ha.md).
			t.m.resubmit(t.r, &t.j, werr, t.log)
			return true
		}
		if werr != nil {
			// The hub no longer knows the job: fail it in GitLab.
			t.log.Error("the hub does not know the job", logkey.Err, werr)
			if !t.aborted {
				t.j.Phase = state.PhaseFailing
				t.j.Failure = t.withPreface(systemFailure("the fleet hub lost the job: "+errText(werr), m.clk.Now(), t.j.Timestamps))
				t.j.HubJob = ""
				m.put(t.r, t.j, t.log)
				return true
			}
			return m.settle(ctx, t.j, t.log)
		}
		if v != nil && t.j.Phase == state.PhaseSubmitted && !t.aborted {
			switch {
			case v.State == client.JobRunning:
				if !t.commit(ctx) {
					return false
				}
			case v.State == client.JobFinished && v.Result != nil && v.Result.Failure == client.FailureNoCapacity:
				// Not placed in time: fail the job in GitLab without committing
				// it (GL-09, DECISIONS 5).
				t.j.Phase = state.PhaseFailing
				t.j.Failure = t.withPreface(systemFailure(fmt.Sprintf("no node of the fleet could take this job within %d s (pool %s, %s)",
					m.placeWithin(), t.r.Placement.Pool, t.r.Placement.Envelope), m.clk.Now(), t.j.Timestamps))
				m.put(t.r, t.j, t.log)
				return true
			case v.State == client.JobQueued && v.Wait != nil:
				if !t.noteWait(ctx, v.Wait) {
					return false
				}
			}
		}
		if v != nil && !t.aborted {
			final := v.State == client.JobFinished
			if final || (t.j.Phase == state.PhaseCommitted && tick) {
				done, err := t.step(ctx, final)
				if err != nil {
					return false
				}
				if done && final {
					return t.finish(ctx, v)
				}
			}
		}
		if tick {
			// As gitlab-runner's time.After, the next interval runs
			// from the end of this update.
			tick = false
			timer.Reset(t.interval)
		}
		if t.aborted {
			if !t.abortCancelled {
				// GitLab cancelled or refused the job: the hub ends it at once
				// (GL-17).
				err := m.retry.DoUntilAccepted(ctx, "cancel", func(ctx context.Context) error {
					_, err := m.cfg.Hub.Cancel(ctx, t.j.HubJob, client.CancelImmediate)
					return err
				})
				if ctx.Err() != nil {
					return false
				}
				if err != nil {
					t.log.Warn("immediate cancel refused", logkey.Err, err)
				}
				t.abortCancelled = true
			}
			if v != nil && v.State == client.JobFinished {
				return t.finishAborted(ctx, v)
			}
		}
		select {
		case <-ctx.Done():
			return false
		case <-w.notify:
		case <-timer.C():
			tick = true
		}
	}
}

// commit sends PUT state=running once the node accepted the job (GL-08)
// and the state file holds the submitted record (see recorded).
func (t *tracer) commit(ctx context.Context) bool {
	if !t.recorded(ctx) {
		return false
	}
	out, err := t.m.cfg.GitLab.UpdateJob(ctx, t.creds, gitlab.UpdateJobInfo{State: gitlab.StateRunning})
	if ctx.Err() != nil {
		return false
	}
	t.observe(out.JobStatus, out.Kind == gitlab.UpdateAbort, out.UpdateInterval)
	switch out.Kind {
	case gitlab.UpdateSucceeded, gitlab.UpdateAccepted:
		t.j.Phase, t.j.Response = state.PhaseCommitted, nil
		t.m.put(t.r, t.j, t.log)
		t.m.observeStarted(t.r, t.j)
		t.lastSent = t.m.clk.Now()
		t.log.Info("job committed in GitLab")
	case gitlab.UpdateAbort:
	default:
		t.log.Warn("commit failed; retrying", logkey.Err, err)
	}
	return true
}

// recorded waits until the submitted record's state write, if still
// under way, is done, and reports false if ctx ended first. Nothing of
// the job reaches GitLab before (the commit, a trace patch): a relay that
// crashes after GitLab heard of the job must find it in its state file
// (RELAY-07, RELAY-09). The follow itself, and the hub's view it
// watches, need not wait.
func (t *tracer) recorded(ctx context.Context) bool {
	if t.durable == nil {
		return true
	}
	select {
	case <-t.durable.Done():
	case <-ctx.Done():
		return false
	}
	t.wrote()
	return true
}

// wrote ends the wait for the submitted record's write; its failure is
// logged, and the job goes on in memory as after any failed state write.
func (t *tracer) wrote() {
	if err := t.durable.Err(); err != nil {
		t.log.Error("could not update the state file", logkey.Err, err)
	}
	t.durable = nil
}

// observe acts on a Job-Status (GL-17).
func (t *tracer) observe(st gitlab.JobStatus, abort bool, interval time.Duration) {
	if interval != 0 {
		t.interval = gitlab.NextUpdateInterval(t.interval, interval)
	}
	switch {
	case abort || st.Aborted():
		if !t.aborted {
			t.log.Info("GitLab ended the job; cancelling it immediately", "job_status", st)
		}
		t.aborted = true
		t.cancel.request(client.CancelImmediate)
	case st.CancelRequested():
		t.cancel.request(client.CancelGraceful)
	}
}

// step patches what the hub holds past GitLab's offset, at most one patch
// unless flush, or keeps the job alive after 30 s of silence (GL-10, GL-13).
// It reports whether every byte the hub holds is patched and the output is
// complete. A non-nil error is ctx's.
func (t *tracer) step(ctx context.Context, flush bool) (bool, error) {
	m := t.m
	if !t.recorded(ctx) {
		return false, ctx.Err()
	}
	for {
		out, err := m.cfg.Hub.ReadOutput(ctx, t.j.HubJob, t.hubOffset(), 0)
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		if errors.Is(err, hubclient.ErrPastEnd) {
			// GitLab holds more than the hub: nothing to send; once the
			// job finished there is nothing better to do than finish.
			return flush, nil
		}
		if err != nil {
			t.log.Warn("output read failed", logkey.Err, err)
			return false, nil
		}
		if len(out.Data) == 0 {
			if m.clk.Now().Sub(t.lastSent) >= gitlab.KeepAliveInterval {
				if err := t.catchUpDigest(ctx); err != nil {
					return false, err
				}
				ka, _ := m.cfg.GitLab.KeepAlive(ctx, t.creds, t.digest.Output())
				t.observe(ka.JobStatus, ka.Kind == gitlab.UpdateAbort, ka.UpdateInterval)
				t.lastSent = m.clk.Now()
			}
			return out.Complete && t.hubOffset() >= out.Length, nil
		}
		if err := t.catchUpDigest(ctx); err != nil {
			return false, err
		}
		p, err := m.cfg.GitLab.PatchTrace(ctx, t.creds, t.offset, out.Data, t.j.DebugTrace)
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		t.observe(p.JobStatus, p.Aborts(), p.UpdateInterval)
		switch p.Kind {
		case gitlab.PatchSucceeded:
			t.digest.Write(out.Data[:p.Sent])
			t.digestTo += int64(p.Sent)
			t.offset = p.NewOffset
			t.lastSent = m.clk.Now()
			t.j.TraceOffset = t.offset
			m.put(t.r, t.j, t.log)
		case gitlab.PatchRangeMismatch:
			t.log.Info("trace offset corrected by GitLab", "from", t.offset, "to", p.NewOffset)
			if p.NewOffset == t.offset {
				return false, nil // no progress: try again next interval
			}
			t.offset = p.NewOffset
			t.j.TraceOffset = t.offset
		case gitlab.PatchNotFound, gitlab.PatchAbort:
			return false, nil
		default:
			t.log.Warn("trace patch failed", logkey.Err, err)
			return false, nil
		}
		if t.aborted {
			return false, nil
		}
		if !flush && p.Kind == gitlab.PatchSucceeded {
			return false, nil
		}
	}
}

// catchUpDigest makes the digest cover [0, offset) (after a restart or a 416
// correction), reading the hub's retained output (API-39).
func (t *tracer) catchUpDigest(ctx context.Context) error {
	if t.digestTo > t.offset {
		t.digest, t.digestTo = gitlab.TraceDigest{}, 0
	}
	if pre := int64(len(t.j.Preface)); t.digestTo < pre {
		n := min(pre, t.offset)
		t.digest.Write([]byte(t.j.Preface[t.digestTo:n]))
		t.digestTo = n
	}
	for t.digestTo < t.offset {
		out, err := t.m.cfg.Hub.ReadOutput(ctx, t.j.HubJob, t.digestTo-int64(len(t.j.Preface)), 0)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil || len(out.Data) == 0 {
			return nil // best effort: the hub holds less than GitLab
		}
		n := min(int64(len(out.Data)), t.offset-t.digestTo)
		t.digest.Write(out.Data[:n])
		t.digestTo += n
	}
	return nil
}

// finishAborted ends a job GitLab aborted (GL-17) once the hub reports it
// finished, as gitlab-runner ends an aborted build (network/trace.go
// finishWithFinalUpdate): one patch of what is left, which GitLab answers
// 403 again (whatever the answer, nothing more is patched), then the final
// update, whose 403 ends it. GitLab stores neither; the wire is
// gitlab-runner's (docs/gitlab-compat.md).
func (t *tracer) finishAborted(ctx context.Context, v *client.JobView) bool {
	out, err := t.m.cfg.Hub.ReadOutput(ctx, t.j.HubJob, t.hubOffset(), 0)
	if ctx.Err() != nil {
		return false
	}
	if err == nil && len(out.Data) > 0 {
		p, perr := t.m.cfg.GitLab.PatchTrace(ctx, t.creds, t.offset, out.Data, t.j.DebugTrace)
		if ctx.Err() != nil {
			return false
		}
		if p.Kind == gitlab.PatchSucceeded {
			t.digest.Write(out.Data[:p.Sent])
			t.digestTo += int64(p.Sent)
			t.offset = p.NewOffset
		}
		t.log.Info("trace flushed after the abort", "status", p.Status, logkey.Err, perr)
	}
	return t.finish(ctx, v)
}

// finish sends the final update once the job finished, its output is
// complete and every byte patched (GL-14, GL-15), then settles (RELAY-12).
func (t *tracer) finish(ctx context.Context, v *client.JobView) bool {
	if err := t.catchUpDigest(ctx); err != nil {
		return false
	}
	u := gitlab.UpdateJobInfo{State: gitlab.StateSuccess, Output: t.digest.Output()}
	if res := v.Result; res != nil && res.Failure != "" {
		u.State = gitlab.StateFailed
		u.FailureReason = gitlab.MapFailureReason(gitlab.FailureReasonFor(string(res.Failure)), t.j.FailureReasons)
		if res.ExitCode != nil {
			u.ExitCode = *res.ExitCode
		}
	}
	if !t.m.finalUpdate(ctx, t.creds, u, t.log) {
		return false
	}
	outcome := OutcomeSuccess
	if u.State != gitlab.StateSuccess {
		outcome = OutcomeFailed
	}
	t.m.observeReported(t.r, t.j, outcome)
	t.j.Phase = state.PhaseReported
	t.m.put(t.r, t.j, t.log)
	return true
}
