package loop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/job"
	"github.com/vk-ci/vk/relay/gitlab"
	"github.com/vk-ci/vk/relay/state"
	"github.com/vk-ci/vk/relay/translate"
)

// handleJob drives one recorded job to its end (RELAY-11, RELAY-12) and
// reports whether it is done (record removed). It returns false when ctx
// ended first: the record stays and the next start resumes it (RELAY-09,
// RELAY-17).
func (m *Manager) handleJob(ctx context.Context, r *runnerState, j state.Job) bool {
	log := m.runnerLog(r).With(logkey.GitLabJobID, j.GitLabID)
	var sub submitted // the submission's answer, for the follow that starts on it
	for ctx.Err() == nil {
		var ok bool
		switch j.Phase {
		case state.PhaseTaken:
			j, sub, ok = m.submit(ctx, r, j, log)
		case state.PhaseFailing:
			ok = m.failUncommitted(ctx, r, j, log)
			if ok {
				return m.drop(r, j, log)
			}
		case state.PhaseSubmitted, state.PhaseCommitted:
			j, ok = m.follow(ctx, r, j, sub, log)
			sub = submitted{}
		case state.PhaseReported:
			if m.settle(ctx, j, log) {
				return m.drop(r, j, log)
			}
			ok = false
		default:
			log.Error("unknown phase in the state file; job left to GitLab's timeout", "phase", j.Phase)
			return m.drop(r, j, log)
		}
		if !ok {
			return false
		}
	}
	return false
}

// drop removes the record (RELAY-08).
func (m *Manager) drop(r *runnerState, j state.Job, log *slog.Logger) bool {
	if err := r.Store.Delete(j.GitLabID); err != nil {
		log.Error("could not drop the job from the state file", logkey.Err, err)
	}
	log.Info("job done")
	return true
}

// put writes j's record; a failure is logged (the job goes on in memory).
func (m *Manager) put(r *runnerState, j state.Job, log *slog.Logger) {
	if err := r.Store.Put(j); err != nil {
		log.Error("could not update the state file", logkey.Err, err)
	}
}

// submitted is what the follow that starts at a submission's answer has
// of it: the record's state write, under way, which the commit waits for,
// and the job's view the hub answered, which its watch starts from.
type submitted struct {
	durable durable         // nil: the record is durable (a resumed job)
	view    *client.JobView // nil for a resumed job
}

// submit translates the recorded response and submits it on the
// reservation, naming the admission, with the recorded request_id
// (RELAY-11, ARB-36, ARB-38, RELAY-09). Once the hub took it, the
// submitted record's write starts and submit returns without waiting for
// it: the job's follow (which watches for the node's acceptance) runs
// while the file is written, and only its commit in GitLab waits for the
// write (see tracer.commit).
func (m *Manager) submit(ctx context.Context, r *runnerState, j state.Job, log *slog.Logger) (state.Job, submitted, bool) {
	now := m.clk.Now().UTC()
	resp, err := gitlab.DecodeJobResponse(j.Response)
	var res translate.Result
	if err == nil {
		res, err = translate.Translate(resp, r.Translate)
	}
	if err != nil {
		var re *translate.RefusalError
		if errors.As(err, &re) {
			j.Failure = refusalFailure(re, now, j.Timestamps)
		} else {
			j.Failure = systemFailure("vk-gitlab could not translate the job: "+err.Error(), now, j.Timestamps)
		}
		j.Phase, j.Response = state.PhaseFailing, nil
		m.put(r, j, log)
		return j, submitted{}, true
	}
	for _, n := range res.Notices {
		res.Job.Notices = append(res.Job.Notices, job.Notice{Level: noticeLevel(n.Level), Text: n.Text})
	}
	res.Job.Sources.CorrelationID = j.CorrelationID
	sub := client.JobSubmission{
		Runner: r.Name, Admission: j.Admission, RequestID: j.SubmitRequestID, Placement: r.Placement,
		Reservation: j.Reservation, PlaceWithinSecs: m.placeWithin(), Spec: job.NewGitLabCI(res.Job),
		Queue: gitlabQueue(resp.JobInfo),
	}
	var view client.JobView
	err = m.retry.Do(ctx, "submit", func(ctx context.Context) error {
		v, err := m.cfg.Hub.SubmitJob(ctx, sub)
		if sub.Queue != nil && refusedQueueField(err) {
			sub.Queue = nil // a hub older than the field: the job matters, the metrics do not
			v, err = m.cfg.Hub.SubmitJob(ctx, sub)
		}
		view = v
		return err
	})
	if ctx.Err() != nil {
		return j, submitted{}, false
	}
	var se *client.StatusError
	switch {
	case err == nil:
		// The response stays until a node accepted the job: a hub that
		// took over before one did may have forgotten it, and the job is
		// then submitted again from it (see resubmit).
		j.HubJob, j.Phase = view.ID, state.PhaseSubmitted
		sub := submitted{durable: r.begin(j), view: &view}
		r.mu.Lock()
		if h := r.held[j.GitLabID]; h != nil {
			h.hubJob = view.ID
		}
		r.mu.Unlock()
		m.changed()
		log.Info("job submitted", logkey.JobID, view.ID)
		return j, sub, true
	case errors.As(err, &se) && (se.Body.Code == client.CodeApprovalPending || se.Body.Code == client.CodeProjectRejected):
		// A job awaiting approval is not held: release its reservation and
		// fail it without committing it (FAIL-20..22, DECISIONS 2).
		log.Warn("the hub refused the job pending approval", "code", se.Body.Code, "approval_url", se.Body.ApprovalURL)
		m.release(j.Reservation)
		j.Failure = &state.Failure{Reason: gitlab.ReasonRunnerConfigurationError,
			Trace: translate.FormatTrace(ApprovalNotices(se.Body.Code, j.ProjectPath, j.ProjectID, se.Body.ApprovalURL, m.cfg.HubURL), now, j.Timestamps)}
	case errors.As(err, &se) && se.Status == http.StatusGone && se.Body.Code == client.CodeNotFound:
		// The job this request_id created left the hub's history before
		// the relay heard its 201: a new leader forgot it, no node having
		// accepted it (docs/ha.md). Submit it again as a new job.
		m.resubmit(r, &j, err, log)
		return j, submitted{}, true
	case errors.As(err, &se) && se.Status == http.StatusNotFound && se.Body.Code == client.CodeNotFound && j.Admission != "":
		// The hub does not know the admission (nor, then, its
		// reservation): a new leader forgot a job no node had accepted,
		// and its claimed admission with it, before this submission (or
		// its repeat) came (docs/ha.md). No job of it runs; submit it
		// again without them rather than fail it (DECISIONS 16).
		m.resubmit(r, &j, err, log)
		return j, submitted{}, true
	default:
		log.Error("the hub refused the job", logkey.Err, err)
		m.release(j.Reservation)
		j.Failure = systemFailure("the fleet hub refused the job: "+errText(err), now, j.Timestamps)
	}
	j.Phase, j.Response = state.PhaseFailing, nil
	m.put(r, j, log)
	return j, submitted{}, true
}

// gitlabQueue is what GitLab's job response said about its queue, for the
// hub's workload trace.
func gitlabQueue(ji gitlab.JobInfo) *client.GitLabQueue {
	return &client.GitLabQueue{TimeInQueueSecs: max(ji.TimeInQueueSeconds, 0), Size: max(ji.QueueSize, 0), Depth: max(ji.QueueDepth, 0)}
}

// refusedQueueField reports a hub that predates gitlab_queue refusing it:
// it decodes strictly, so the field is an unknown one (400 invalid naming
// it) and nothing was taken.
func refusedQueueField(err error) bool {
	var se *client.StatusError
	return errors.As(err, &se) && se.Status == http.StatusBadRequest && se.Body.Code == client.CodeInvalid &&
		strings.Contains(se.Body.Error, `"gitlab_queue"`)
}

func errText(err error) string {
	var se *client.StatusError
	if errors.As(err, &se) {
		return fmt.Sprintf("%d %s: %s", se.Status, se.Body.Code, se.Body.Error)
	}
	return err.Error()
}

// ApprovalNotices are the trace lines of a job the hub refused with
// approval_pending or project_rejected (FAIL-21, FAIL-22): an error line
// naming the project and where an operator decides, then the retry line.
func ApprovalNotices(code client.Code, path string, id int64, approvalURL, hubURL string) []translate.Notice {
	what := "is waiting for approval"
	if code == client.CodeProjectRejected {
		what = "was rejected"
	}
	proj := fmt.Sprintf("project %s (ID %d) %s on the fleet hub", path, id, what)
	if approvalURL != "" {
		return []translate.Notice{
			{Level: translate.LevelError, Text: proj + ": " + approvalURL},
			{Level: translate.LevelNotice, Text: "Retry this job once an operator has approved it there."},
		}
	}
	return []translate.Notice{
		{Level: translate.LevelError, Text: proj + " " + hubURL + "."},
		{Level: translate.LevelNotice, Text: "Retry this job once an operator has approved it (GitLab > Pending)."},
	}
}

func noticeLevel(l translate.Level) string {
	switch l {
	case translate.LevelInfo:
		return "info"
	case translate.LevelWarning:
		return "warning"
	case translate.LevelError:
		return "error"
	}
	return ""
}

// failUncommitted writes the failure's trace lines and fails the job in
// GitLab (TRACE-07, FAIL-20, GL-09); a job the hub knows is then settled.
func (m *Manager) failUncommitted(ctx context.Context, r *runnerState, j state.Job, log *slog.Logger) bool {
	f := j.Failure
	if f == nil {
		f = systemFailure("vk-gitlab lost track of the job", m.clk.Now(), j.Timestamps)
	}
	creds := gitlab.JobCredentials{ID: j.GitLabID, Token: j.Token}
	var off int64
	aborted := false
	for off < int64(len(f.Trace)) && !aborted {
		out, err := m.cfg.GitLab.PatchTrace(ctx, creds, off, f.Trace[off:], j.DebugTrace)
		switch {
		case ctx.Err() != nil:
			return false
		case out.Kind == gitlab.PatchSucceeded:
			off = out.NewOffset
		case out.Kind == gitlab.PatchRangeMismatch:
			if out.NewOffset < off || out.NewOffset > int64(len(f.Trace)) {
				off = int64(len(f.Trace)) // GitLab holds something else: do not write over it
			} else {
				off = out.NewOffset
			}
		case out.Aborts():
			aborted = true
		default:
			log.Warn("trace patch failed", logkey.Err, err)
			if m.sleep(ctx, m.retry.Delay(0, 0)) != nil {
				return false
			}
		}
	}
	if !aborted {
		u := gitlab.UpdateJobInfo{State: gitlab.StateFailed, FailureReason: gitlab.MapFailureReason(f.Reason, j.FailureReasons),
			ExitCode: f.ExitCode, Output: gitlab.TraceChecksum(f.Trace)}
		if !m.finalUpdate(ctx, creds, u, log) {
			return false
		}
		m.observeReported(r, j, OutcomeFailed)
	}
	if j.HubJob != "" {
		return m.settle(ctx, j, log)
	}
	return true
}

// finalUpdate sends the final PUT until GitLab takes it (GL-15, GL-16):
// 202 and 412 (and failures) are repeated after the update interval, the
// wait doubling up to an hour. It reports false when ctx ended first.
func (m *Manager) finalUpdate(ctx context.Context, creds gitlab.JobCredentials, u gitlab.UpdateJobInfo, log *slog.Logger) bool {
	wait := gitlab.DefaultUpdateInterval
	for {
		out, err := m.cfg.GitLab.UpdateJob(ctx, creds, u)
		if ctx.Err() != nil {
			return false
		}
		switch out.Kind {
		case gitlab.UpdateSucceeded, gitlab.UpdateAbort:
			log.Info("final update sent", "update", u.String(), "status", out.Status)
			return true
		case gitlab.UpdateAccepted, gitlab.UpdateTraceValidationFailed:
			if out.UpdateInterval > 0 {
				wait = gitlab.NextUpdateInterval(wait, out.UpdateInterval)
			}
		default:
			log.Warn("final update failed", logkey.Err, err)
		}
		if m.sleep(ctx, wait) != nil {
			return false
		}
		wait = min(2*wait, FinalUpdateMaxBackoff)
	}
}

// settle settles the job with the hub until accepted, a 409 repeated until
// the job ends (RELAY-14, RELAY-16). A 400 or 404 ends it too: the hub
// cannot settle the job, and keeping the record would only block the slot.
func (m *Manager) settle(ctx context.Context, j state.Job, log *slog.Logger) bool {
	if j.HubJob == "" {
		return true
	}
	err := m.retry.DoUntilAccepted(ctx, "settle", func(ctx context.Context) error { return m.cfg.Hub.Settle(ctx, j.HubJob) })
	if err == nil {
		return true
	}
	if ctx.Err() != nil {
		return false // shutting down: the next start settles it (RELAY-17)
	}
	{
		log.Warn("settle refused; dropping the job", logkey.JobID, j.HubJob, logkey.Err, err)
	}
	return true
}

// canceller delivers cancels to the hub concurrently with the trace loop
// (RELAY-15): an immediate cancel replaces a pending graceful one.
type canceller struct {
	m      *Manager
	hubJob string
	log    *slog.Logger

	mu    sync.Mutex
	want  client.CancelMode  // strongest requested; guarded by mu
	abort context.CancelFunc // ends the attempt in flight; guarded by mu
	wake  chan struct{}
}

func rank(m client.CancelMode) int {
	switch m {
	case client.CancelGraceful:
		return 1
	case client.CancelImmediate:
		return 2
	}
	return 0
}

// request asks for mode; weaker or equal requests are ignored.
func (c *canceller) request(mode client.CancelMode) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rank(mode) <= rank(c.want) {
		return
	}
	c.want = mode
	if c.abort != nil {
		c.abort()
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *canceller) run(ctx context.Context) {
	var sent client.CancelMode
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		}
		for {
			c.mu.Lock()
			mode := c.want
			if mode == sent {
				c.mu.Unlock()
				break
			}
			actx, cancel := context.WithCancel(ctx)
			c.abort = cancel
			c.mu.Unlock()
			err := c.m.retry.DoUntilAccepted(actx, "cancel", func(ctx context.Context) error {
				_, err := c.m.cfg.Hub.Cancel(ctx, c.hubJob, mode)
				return err
			})
			// Whether a stronger request superseded this attempt is read
			// before the attempt's context is released: cancelling it
			// first made every attempt look superseded, and the same
			// cancel was sent again and again until the job ended.
			superseded := actx.Err() != nil
			cancel()
			if ctx.Err() != nil {
				return
			}
			if !superseded {
				if err != nil {
					c.log.Warn("cancel refused", "mode", mode, logkey.Err, err)
				} else {
					c.log.Info("cancel delivered to the hub", "mode", mode)
				}
				sent = mode
			}
		}
	}
}

// viewWatch long-polls the hub's job view by revision (API-11) and
// publishes the latest.
type viewWatch struct {
	mu     sync.Mutex
	view   *client.JobView // latest; guarded by mu
	err    error           // a final error (404); guarded by mu
	notify chan struct{}   // capacity 1
}

func (w *viewWatch) latest() (*client.JobView, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.view, w.err
}

func (w *viewWatch) publish(v *client.JobView, err error) {
	w.mu.Lock()
	if v != nil {
		w.view = v
	}
	if err != nil {
		w.err = err
	}
	w.mu.Unlock()
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

// watchView long-polls hubJob's view past revision rev (0: from the
// first) and publishes each view to w until the job finished.
func (m *Manager) watchView(ctx context.Context, hubJob string, rev uint64, w *viewWatch) {
	for ctx.Err() == nil {
		var v client.JobView
		err := m.retry.Do(ctx, "follow job", func(ctx context.Context) error {
			var err error
			v, err = m.cfg.Hub.GetJob(ctx, hubJob, rev, PollWait)
			return err
		})
		if ctx.Err() != nil {
			return
		}
		var se *client.StatusError
		if errors.As(err, &se) && (se.Status == http.StatusNotFound || se.Status == http.StatusGone) {
			w.publish(nil, err)
			return
		}
		if err != nil {
			if m.sleep(ctx, 30*time.Second) != nil {
				return
			}
			continue
		}
		w.publish(&v, nil)
		rev = v.Revision
		if v.State == client.JobFinished {
			return
		}
	}
}

// resubmit takes a submitted job the hub does not know (err: a 404 for
// the job or for its admission, or a 410 for the request_id that created it) back to taken, to be submitted again from its recorded response: a hub
// leader that took over before any node accepted the job forgets it, and
// no node runs it (DECISIONS 16, docs/ha.md). The new submission has a
// new request_id (the old one's answer names the forgotten job) and no
// admission or reservation (the new leader holds neither); it waits in
// the queue for room like any other job.
func (m *Manager) resubmit(r *runnerState, j *state.Job, err error, log *slog.Logger) {
	log.Warn("the hub does not know the job no node accepted yet; submitting it again", logkey.Err, err)
	j.Phase, j.HubJob, j.Admission, j.Reservation = state.PhaseTaken, "", "", ""
	j.SubmitRequestID = client.NewRequestID()
	m.put(r, *j, log)
	r.mu.Lock()
	if h := r.held[j.GitLabID]; h != nil {
		h.hubJob = ""
	}
	r.mu.Unlock()
	m.changed()
}
