package loop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/vk-ci/vk/hubclient"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/relay/gitlab"
	"github.com/vk-ci/vk/relay/state"
	"github.com/vk-ci/vk/relay/translate"
)

// requestLoop is one of a runner's request_concurrency loops (ARB-02,
// RELAY-10): reserve, poll the ticket, take a slot, claim, ask GitLab,
// report the outcome, and on a job start its handler under jobCtx.
func (m *Manager) requestLoop(ctx, jobCtx context.Context, r *runnerState, n int) {
	log := m.runnerLog(r).With("loop", n)
	failures := 0
	var next *nextReservation // asked for in the last outcome, if it was
	for ctx.Err() == nil {
		if next != nil && !m.proceeds(r) {
			// The gate closed or another loop's request went out since
			// the outcome: hold no room while waiting.
			m.dropNext(next, log)
			next = nil
		}
		if err := m.cfg.Gate.Wait(ctx); err != nil {
			m.dropNext(next, log)
			return
		}
		if err := r.awaitPoller(ctx); err != nil {
			m.dropNext(next, log)
			return
		}
		g, reqID, sent, err := m.reserve(ctx, r, log, next)
		if err != nil {
			return // ctx ended
		}
		var wait time.Duration
		var stop bool
		wait, next, stop = m.useGrant(ctx, jobCtx, r, grant{g, reqID}, sent, log, &failures)
		if stop {
			m.dropNext(next, log)
			return
		}
		if wait > 0 && m.sleep(ctx, wait) != nil {
			return
		}
	}
}

// grant is a reservation grant and the request_id of its request.
type grant struct {
	*client.ReservationGrant
	requestID string
}

// nextReservation is a reservation request sent in an outcome
// (client.OutcomeRequest.Next) and what the hub answered it: a grant, a
// ticket, or neither when the hub did not queue it, which the next
// reserve then sends itself under the same request_id (API-44), so a
// ticket the hub made without its answer arriving is found, not doubled.
type nextReservation struct {
	req  client.ReservationRequest
	res  hubclient.Reserved
	sent time.Time // when the outcome that answered res was sent (ARB-31)
}

// newReservation is a fresh reservation request of r's.
func newReservation(r *runnerState) client.ReservationRequest {
	return client.ReservationRequest{Runner: r.Name, Queue: true, RequestID: client.NewRequestID(), Placement: r.Placement, LeaseSecs: LeaseSecs}
}

// reserve queues a reservation and polls its ticket until granted (ARB-02):
// a ticket answered 410 is queued again. next, when set, is what the last
// outcome asked for and got, used instead of a new request. It returns the
// grant, its request's request_id, and when the request that produced it
// was sent (ARB-31).
func (m *Manager) reserve(ctx context.Context, r *runnerState, log *slog.Logger, next *nextReservation) (*client.ReservationGrant, string, time.Time, error) {
	for {
		req := newReservation(r)
		var res struct {
			g    *client.ReservationGrant
			t    string
			sent time.Time
		}
		var err error
		switch {
		case next != nil && (next.res.Grant != nil || next.res.Ticket != ""):
			req, res.g, res.t, res.sent = next.req, next.res.Grant, next.res.Ticket, next.sent
		case next != nil:
			req = next.req
			fallthrough
		default:
			err = m.retry.Do(ctx, "reserve", func(ctx context.Context) error {
				res.sent = m.clk.Now()
				rv, err := m.cfg.Hub.Reserve(ctx, req)
				res.g, res.t = rv.Grant, rv.Ticket
				return err
			})
		}
		next = nil
		if err != nil {
			if ctx.Err() != nil {
				return nil, "", time.Time{}, ctx.Err()
			}
			log.Warn("reservation request refused", logkey.Err, err)
			if m.sleep(ctx, 30*time.Second) != nil {
				return nil, "", time.Time{}, ctx.Err()
			}
			continue
		}
		if res.g != nil {
			return res.g, req.RequestID, res.sent, nil
		}
		r.setTicket(res.t, true)
		m.changed()
		g, sent, gone, err := m.pollTicket(ctx, res.t)
		r.setTicket(res.t, false)
		m.changed()
		if err != nil {
			// Stopping: give the ticket back so its room goes elsewhere.
			cctx, cancel := m.lingering(10 * time.Second)
			_ = m.cfg.Hub.CancelTicket(cctx, res.t)
			cancel()
			return nil, "", time.Time{}, err
		}
		if gone {
			log.Debug("ticket gone; queueing again", logkey.TicketID, res.t)
			continue
		}
		return g, req.RequestID, sent, nil
	}
}

// pollTicket long-polls a ticket until it is granted or gone (API-22, API-23).
func (m *Manager) pollTicket(ctx context.Context, ticket string) (*client.ReservationGrant, time.Time, bool, error) {
	for {
		var rv struct {
			g    *client.ReservationGrant
			gone bool
			sent time.Time
		}
		err := m.retry.Do(ctx, "poll ticket", func(ctx context.Context) error {
			rv.sent = m.clk.Now()
			res, err := m.cfg.Hub.PollTicket(ctx, ticket, PollWait)
			rv.g, rv.gone = res.Grant, res.Gone
			return err
		})
		switch {
		case ctx.Err() != nil:
			return nil, time.Time{}, false, ctx.Err()
		case err != nil:
			return nil, time.Time{}, true, nil // refused for good: queue again
		case rv.gone:
			return nil, time.Time{}, true, nil
		case rv.g != nil:
			return rv.g, rv.sent, false, nil
		}
	}
}

// useGrant takes a slot, claims the grant, asks GitLab and reports the
// outcome. It returns how long to wait before queueing again, the next
// reservation when the outcome asked for it, and whether the loop must
// stop (token refused, or ctx ended).
func (m *Manager) useGrant(ctx, jobCtx context.Context, r *runnerState, g grant, sent time.Time, log *slog.Logger, failures *int) (time.Duration, *nextReservation, bool) {
	log = log.With(logkey.Admission, g.Admission, logkey.Reservation, g.Reservation)
	deadline := sent.Add(time.Duration(g.LeaseSecs) * time.Second)
	// Take a slot under concurrent and the runner's limit, else give the
	// grant back (ARB-25).
	if !m.slots.TryAcquire(r.Name, r.Limit) {
		log.Debug("no slot for the grant; released")
		freed := m.slots.changed()
		m.reportOutcome(g.Admission, client.OutcomeReleased, log)
		// Queue again once a slot frees, not at once: the hub would only
		// grant again what cannot be used.
		select {
		case <-freed:
		case <-ctx.Done():
		}
		return 0, nil, ctx.Err() != nil
	}
	// An outcome the hub took ends the admission and releases its
	// reservation there (ARB-34): the relay releases it itself only when
	// the outcome did not get through, so an empty answer from GitLab
	// costs one hub request fewer. With ask, and when the loop goes around at once, the outcome also
	// asks for the loop's next reservation (relay session version 4): an
	// empty answer then costs the hub a ticket poll, a claim and one
	// outcome, not a new POST besides.
	giveBack := func(o client.Outcome, ask bool) *nextReservation {
		var taken bool
		var next *nextReservation
		if ask {
			taken, next = m.reportOutcomeNext(r, g.Admission, o, log)
		} else {
			taken = m.reportOutcome(g.Admission, o, log)
		}
		if !taken {
			m.release(g.Reservation)
		}
		r.setRequest(g.Admission, false)
		m.slots.Release(r.Name)
		m.changed()
		return next
	}
	// The server may have lost its approval meanwhile (RSESS-07), and a
	// grant whose lease ran out by our own count is not worth claiming
	// (ARB-31).
	if !m.cfg.Gate.Open() || !m.clk.Now().Before(deadline) || ctx.Err() != nil {
		giveBack(client.OutcomeReleased, false)
		return 0, nil, ctx.Err() != nil
	}
	// List the admission in the heartbeat first, then claim (ARB-26).
	r.setRequest(g.Admission, true)
	m.changed()
	if err := m.retry.Do(ctx, "claim", func(ctx context.Context) error { return m.cfg.Hub.Claim(ctx, g.Admission) }); err != nil {
		log.Info("claim refused; queueing again", logkey.Err, err)
		r.setRequest(g.Admission, false)
		m.slots.Release(r.Name)
		m.changed()
		return 0, nil, ctx.Err() != nil
	}
	poll, ok := r.startRequest()
	if !ok {
		// Another loop's request is long-polling GitLab already: it
		// hears of a new job as soon as this one would.
		giveBack(client.OutcomeReleased, false)
		return 0, nil, false
	}
	out, reservation := m.requestJob(ctx, r, g, sent, log)
	r.endRequest(poll, out)
	r.recordAnswer(out, m.clk.Now())
	m.changed()
	switch out.Kind {
	case gitlab.RequestJobReceived, gitlab.RequestUndecodable:
		*failures = 0
		return 0, m.tookJob(jobCtx, r, g, reservation, out, log), false
	case gitlab.RequestNoJob:
		*failures = 0
		next := giveBack(noJobOutcome(out), true) // slot and room go back (RELAY-10)
		return 0, next, false
	case gitlab.RequestTokenRefused:
		log.Error("GitLab refused the runner token (403); this runner stops asking for jobs", "token", gitlab.ShortToken(r.Token))
		giveBack(client.OutcomeError, false)
		r.mu.Lock()
		r.refused = true
		stop := r.stop
		r.mu.Unlock()
		m.changed()
		if stop != nil {
			stop()
		}
		return 0, nil, true
	case gitlab.RequestThrottled:
		giveBack(client.OutcomeError, false)
		wait := out.RetryAfter
		if wait <= 0 {
			wait = m.retry.Delay(*failures, 0)
		}
		*failures++
		return wait, nil, false
	default:
		log.Warn("job request failed", "status", out.Status)
		giveBack(client.OutcomeError, false)
		wait := m.retry.Delay(*failures, 0)
		*failures++
		return wait, nil, false
	}
}

// requestJob asks GitLab for a job, renewing the reservation every
// lease/3 while the request is out (ARB-28). The request is not aborted
// when ctx ends (ARB-29): it runs on a context that ignores ctx's end,
// bounded by RequestTimeout and by the shutdown deadline (see the package
// doc). It returns the outcome and the reservation, "" when a renewal
// found it gone.
func (m *Manager) requestJob(ctx context.Context, r *runnerState, g grant, sent time.Time, log *slog.Logger) (gitlab.RequestOutcome, string) {
	r.mu.Lock()
	r.inFlight++
	r.mu.Unlock()
	m.changed()
	defer func() {
		r.mu.Lock()
		r.inFlight--
		r.mu.Unlock()
	}()
	reqCtx, cancel := m.lingering(RequestTimeout)
	defer cancel()
	type result struct {
		out gitlab.RequestOutcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := m.cfg.GitLab.RequestJob(reqCtx, r.Token, m.cfg.SystemID)
		done <- result{out, err}
	}()
	lease := time.Duration(g.LeaseSecs) * time.Second
	if lease <= 0 {
		lease = LeaseSecs * time.Second
	}
	reservation := g.Reservation
	every := lease / 3
	t := m.clk.NewTimer(every - m.clk.Now().Sub(sent)) // counted from the reservation's request (ARB-31)
	defer t.Stop()
	for {
		select {
		case res := <-done:
			if res.err != nil && res.out.Kind == gitlab.RequestFailed {
				log.Warn("GitLab job request failed", logkey.Err, res.err)
			}
			return res.out, reservation
		case <-t.C():
			if reservation == "" {
				continue
			}
			rctx, rcancel := context.WithTimeout(reqCtx, 30*time.Second)
			ng, err := m.cfg.Hub.Renew(rctx, reservation, LeaseSecs)
			rcancel()
			var se *client.StatusError
			switch {
			case err == nil && ng.LeaseSecs > 0:
				every = time.Duration(ng.LeaseSecs) * time.Second / 3
			case errors.As(err, &se) && se.Status == http.StatusGone:
				log.Info("reservation gone during the job request")
				reservation = ""
			case err != nil:
				log.Debug("renew failed", logkey.Err, err)
			}
			t.Reset(every)
		}
	}
}

// tookJob handles a 201: record the job before anything else (RELAY-07),
// report the outcome, and start its handler (RELAY-11). The loop goes
// around at once, so the outcome asks for its next reservation when it
// can (reportOutcomeNext), which tookJob returns.
func (m *Manager) tookJob(jobCtx context.Context, r *runnerState, g grant, reservation string, out gitlab.RequestOutcome, log *slog.Logger) *nextReservation {
	now := m.clk.Now().UTC()
	j := state.Job{
		Admission:        g.Admission,
		Reservation:      reservation,
		SubmitRequestID:  client.NewRequestID(),
		Timestamps:       true,
		Phase:            state.PhaseTaken,
		Taken:            now,
		ReserveRequestID: g.requestID,
		CorrelationID:    out.CorrelationID,
	}
	outcome := client.OutcomeJob
	if out.Job != nil {
		j.GitLabID, j.Token = out.Job.ID, out.Job.Token
		j.Timestamps = translate.Timestamps(out.Job.Variables)
		j.DebugTrace = gitlab.VariableBool(out.Job.Variables, "CI_DEBUG_TRACE")
		j.FailureReasons = out.Job.Features.FailureReasons
		j.ProjectID, j.ProjectPath = out.Job.JobInfo.ProjectID, out.Job.JobInfo.ProjectFullPath
		j.Response = out.Body
		if _, err := translate.Translate(out.Job, r.Translate); err != nil {
			// Refused: the reservation is not used (documented choice).
			var re *translate.RefusalError
			if errors.As(err, &re) {
				j.Phase, j.Failure, j.Response = state.PhaseFailing, refusalFailure(re, now, j.Timestamps), nil
			} else {
				j.Phase, j.Failure, j.Response = state.PhaseFailing, systemFailure("vk-gitlab could not translate the job: "+err.Error(), now, j.Timestamps), nil
			}
			outcome = client.OutcomeReleased
		}
	} else {
		// Undecodable: GitLab considers it assigned; fail it (TRACE-07).
		j.GitLabID, j.Token = out.Identity.ID, out.Identity.Token
		j.Phase, j.Failure = state.PhaseFailing, systemFailure("vk-gitlab could not decode the job GitLab sent", now, true)
		outcome = client.OutcomeError
	}
	if j.GitLabID <= 0 || j.Token == "" {
		log.Error("GitLab sent a job without a readable ID or token; it cannot be failed and is left to GitLab's timeout")
		m.reportOutcome(g.Admission, client.OutcomeError, log)
		r.setRequest(g.Admission, false)
		m.slots.Release(r.Name)
		m.changed()
		return nil
	}
	log = log.With(logkey.GitLabJobID, j.GitLabID)
	if err := r.Store.Put(j); err != nil {
		// Without a record the job would be lost on a crash; carry on
		// in memory (the job is GitLab's already) and say so loudly.
		log.Error("could not record the job in the state file", logkey.Err, err)
	}
	// The admission is listed as a held job before it leaves the requests,
	// so no heartbeat lists it in neither and the hub never reclaims it
	// (ARB-35, ARB-39).
	m.startJob(jobCtx, r, j, false)
	r.setRequest(g.Admission, false)
	m.changed()
	taken, next := m.reportOutcomeNext(r, g.Admission, outcome, log)
	if !taken && outcome != client.OutcomeJob {
		m.release(g.Reservation)
	}
	return next
}

// reportOutcome reports an admission's outcome until the hub takes it or
// answers 400, 404, 409 or 410 (ARB-33), for at most 10 minutes and not
// past the shutdown deadline: a request loop still reports after SIGTERM
// (RELAY-17), but Run does not wait on a hub that will not take it. The
// next start reports a job's outcome again when the job is still recorded
// as taken.
//
// It reports whether the hub took the outcome or had decided the
// admission's end already (409, 410): either way the hub holds no
// reservation for it any more.
func (m *Manager) reportOutcome(admission string, o client.Outcome, log *slog.Logger) bool {
	ctx, cancel := m.lingering(10 * time.Minute)
	defer cancel()
	err := m.retry.DoUntilAccepted(ctx, "outcome", func(ctx context.Context) error {
		err := m.cfg.Hub.Outcome(ctx, admission, o)
		var se *client.StatusError
		if errors.As(err, &se) && (se.Status == http.StatusConflict || se.Status == http.StatusGone) {
			return nil // final answers: the hub decided already
		}
		return err
	})
	if err != nil {
		log.Info("outcome not taken", "outcome", o, logkey.Err, err)
		return false
	}
	return true
}

// reportOutcomeNext reports an admission's outcome as reportOutcome does
// and, when r's loop goes around at once (proceeds) and the hub is of
// relay session version 4 or newer, sends a new reservation request of
// r's in it. It returns whether the hub took the outcome (or had decided
// the admission's end already), and the request sent with the hub's
// answer to it: a grant, a ticket, or neither (the hub did not queue it,
// or the outcome went alone), so the next reserve sends it under the same
// request_id. To an older hub the outcome goes alone and next is nil; to
// one that refuses next 400 (an older instance behind the same name
// during an upgrade) it goes alone after that answer.
func (m *Manager) reportOutcomeNext(r *runnerState, admission string, o client.Outcome, log *slog.Logger) (bool, *nextReservation) {
	if m.cfg.HubVersion == nil || m.cfg.HubVersion() < client.RelayVersionNext || !m.proceeds(r) {
		return m.reportOutcome(admission, o, log), nil
	}
	req := newReservation(r)
	next := &nextReservation{req: req}
	ctx, cancel := m.lingering(10 * time.Minute)
	defer cancel()
	alone := false
	err := m.retry.DoUntilAccepted(ctx, "outcome", func(ctx context.Context) error {
		next.sent = m.clk.Now()
		res, err := m.cfg.Hub.OutcomeNext(ctx, admission, o, req)
		var se *client.StatusError
		if errors.As(err, &se) {
			switch se.Status {
			case http.StatusConflict, http.StatusGone:
				return nil // final answers: the hub decided already, and queued nothing
			case http.StatusBadRequest:
				alone = true
				return nil
			}
		}
		next.res = res
		return err
	})
	switch {
	case alone:
		log.Debug("the hub refused the outcome with its next reservation; reporting it alone")
		return m.reportOutcome(admission, o, log), next
	case err != nil:
		log.Info("outcome not taken", "outcome", o, logkey.Err, err)
		return false, next
	}
	return true, next
}

// proceeds reports whether a loop of r that reserves now goes on at once,
// rather than waiting on the gate or on another loop's long poll.
func (m *Manager) proceeds(r *runnerState) bool {
	return m.cfg.Gate.Open() && !r.pollerBusy()
}

// dropNext gives back what next holds, unclaimed: a ticket is cancelled
// (API-24 releases its reservation, offered or granted), a grant reported
// released. nil, or a next the hub did not queue, holds nothing.
func (m *Manager) dropNext(next *nextReservation, log *slog.Logger) {
	switch {
	case next == nil:
	case next.res.Grant != nil:
		m.reportOutcome(next.res.Grant.Admission, client.OutcomeReleased, log)
	case next.res.Ticket != "":
		ctx, cancel := m.lingering(10 * time.Second)
		_ = m.cfg.Hub.CancelTicket(ctx, next.res.Ticket)
		cancel()
	}
}

// release gives a reservation back (API-30); best effort, the hub also
// releases it on any outcome but job (ARB-34). It tries for at most 30 s
// and not past the shutdown deadline.
func (m *Manager) release(reservation string) {
	if reservation == "" {
		return
	}
	ctx, cancel := m.lingering(30 * time.Second)
	defer cancel()
	_ = m.retry.Do(ctx, "release", func(ctx context.Context) error { return m.cfg.Hub.Release(ctx, reservation) })
}

// lingering returns the context of a call that must outlive the request
// loops' ctx (RELAY-17 stops taking jobs, not what is under way: an
// outcome, a release, a ticket's cancel, a job request already sent) but
// not the shutdown deadline (RELAY-18), bounded by limit (real time, as
// every request timeout).
func (m *Manager) lingering(limit time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(m.deadline, limit)
}

// sleep waits d on the clock or until ctx ends.
func (m *Manager) sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := m.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}

func (r *runnerState) setTicket(t string, on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if on {
		r.tickets[t] = true
	} else {
		delete(r.tickets, t)
	}
}

func (r *runnerState) setRequest(a string, on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if on {
		r.requests[a] = true
	} else {
		delete(r.requests, a)
	}
}

func (r *runnerState) recordAnswer(out gitlab.RequestOutcome, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := &client.GitLabAnswer{Status: out.Status, At: at.UTC()}
	switch out.Kind {
	case gitlab.RequestFailed:
		a.Error = fmt.Sprintf("request failed (status %d)", out.Status)
		r.unhealthy = true
	case gitlab.RequestThrottled:
		r.unhealthy = true
	default:
		r.unhealthy = false
	}
	r.lastAnswer = a
}

// noJobOutcome is the outcome a 204 reports: empty when GitLab found no
// job, released when Workhorse ended a long poll itself, on a change of
// the runner's queue or at its end. Rails was not asked then, so it is no
// empty answer to back the runner off for: the next request goes at once
// and, if a job came, is handed it (DECISIONS 14, docs/capacity-policy.md).
func noJobOutcome(out gitlab.RequestOutcome) client.Outcome {
	if out.WorkhorseAnswered {
		return client.OutcomeReleased
	}
	return client.OutcomeEmpty
}

// awaitPoller waits, before a loop reserves, while another loop of the
// runner has a request out that GitLab may be holding. With Workhorse's
// long polling, a request sent after a 204 is held until the runner's
// queue changes, and each held request holds a reservation on a node:
// one per runner hears of a new job as soon as four would, so the others
// wait here, holding nothing, and go again when it comes back.
func (r *runnerState) awaitPoller(ctx context.Context) error {
	for {
		r.mu.Lock()
		if !r.pollerBusyLocked() {
			r.mu.Unlock()
			return nil
		}
		done := r.pollDone
		r.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// pollerBusy reports whether awaitPoller would wait now.
func (r *runnerState) pollerBusy() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pollerBusyLocked()
}

func (r *runnerState) pollerBusyLocked() bool {
	return r.polling > 0 && r.longPolls && r.idleAnswer
}

// startRequest is called before a loop sends its GitLab request. poll
// reports whether GitLab may hold it (GitLab long-polls and the runner's
// last answer was a 204); ok is false when such a request is already out
// for the runner, and then the loop must not send one.
func (r *runnerState) startRequest() (poll, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.longPolls || !r.idleAnswer {
		return false, true
	}
	if r.polling > 0 {
		return false, false
	}
	r.polling++
	r.pollDone = make(chan struct{})
	return true, true
}

// endRequest records what GitLab's answer says about long polling and
// ends the runner's long poll if this request was it.
func (r *runnerState) endRequest(poll bool, out gitlab.RequestOutcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if out.Status != 0 {
		r.longPolls = out.LongPolling
		r.idleAnswer = out.Kind == gitlab.RequestNoJob
	}
	if poll {
		r.polling--
		close(r.pollDone)
		r.pollDone = nil
	}
}

// refusalFailure is the failure of a job translation refused.
func refusalFailure(re *translate.RefusalError, at time.Time, ts bool) *state.Failure {
	return &state.Failure{Reason: re.FailureReason(), ExitCode: re.ExitCode, Trace: translate.FormatTrace(re.Notices(), at, ts)}
}

// systemFailure is a runner_system_failure with msg in the trace.
func systemFailure(msg string, at time.Time, ts bool) *state.Failure {
	return &state.Failure{Reason: gitlab.ReasonRunnerSystemFailure, Trace: translate.FormatTrace([]translate.Notice{
		{Level: translate.LevelError, Text: msg},
		{Level: translate.LevelError, Text: "Job failed (system failure): " + msg},
	}, at, ts)}
}
