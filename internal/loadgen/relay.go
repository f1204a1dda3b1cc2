package loadgen

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"

	"github.com/vk-ci/vk/hubclient"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/job"
)

// Steps name the client-API requests of one lifecycle, in order.
var Steps = []string{"reserve", "ticket", "claim", "outcome", "submit", "follow", "output", "settle"}

// jobEnvelope is what every benchmark job asks for: small, so that a
// node holds many and the run measures the hub, not placement.
var jobEnvelope = client.Envelope{CPUs: 1, Mem: 64 << 20, Disk: 64 << 20}

// relay is one enrolled relay: its principal, key and signed client.
type relay struct {
	id  string
	key ed25519.PrivateKey
	c   *hubclient.Client
}

// enrolRelay joins one relay with a fresh token; its client keeps
// connections alive unless connPerRequest, and moves to the next of
// others (further hub instances' base URLs) when the one in use cannot
// be reached, as vk-gitlab with [hub] urls does.
func enrolRelay(ctx context.Context, t *Target, name string, connPerRequest bool, others ...string) (relay, error) {
	tok, err := t.Admin().CreateToken(ctx, hubclient.KindGitLab, 0)
	if err != nil {
		return relay{}, fmt.Errorf("loadgen: token create --kind gitlab: %w", err)
	}
	res, key, err := hubclient.Join(ctx, t.URL, tok.Token, t.CAPEM, name, hubclient.KindGitLab)
	if err != nil {
		return relay{}, fmt.Errorf("loadgen: relay %s join: %w", name, err)
	}
	cfg := hubclient.Config{HubURL: t.URL, Others: others, CAPEM: t.CAPEM, Key: key, Principal: res.ID}
	if connPerRequest {
		cfg.MaxIdleConns = -1
	}
	c, err := hubclient.New(cfg)
	return relay{id: res.ID, key: key, c: c}, err
}

// benchSpec is the job a lifecycle submits: a GitLab CI job with one
// script step, as the relay translates it.
func benchSpec(gitlabJob int64) job.JobSpec {
	return job.NewGitLabCI(&job.CiJob{
		Job:         job.JobInfo{ID: gitlabJob, ProjectID: 1, ProjectPath: "bench/load", Name: "bench"},
		Token:       "bench-job-token",
		Sources:     job.Sources{RepoURL: "https://gitlab.invalid/bench/load.git", Ref: "main"},
		TimeoutSecs: 600,
		Steps:       []job.Step{{Name: "script", Script: []string{"true"}}},
		Trace:       job.TraceSettings{LimitBytes: 4 << 20},
		ServerURL:   "https://gitlab.invalid",
	})
}

// loop is one relay request loop: one runner, lifecycles back to back.
type loop struct {
	c      *hubclient.Client
	runner string
	// hold records what the runner holds for its relay's heartbeat.
	hold    func(func(*runnerHeld))
	nextJob func() int64
	// lat holds each step's latencies of lifecycles that began while
	// recording was on.
	lat map[string][]time.Duration
	// done counts lifecycles completed while recording was on.
	done int
	// completed is called after each of them.
	completed func()
	// granted, when set, is called with the time the request that
	// returned a grant was sent.
	granted func(sent time.Time)
}

// run repeats lifecycles until ctx ends; record reports whether the
// lifecycle about to begin is inside the measured window.
func (l *loop) run(ctx context.Context, record func() bool) error {
	for ctx.Err() == nil {
		rec := record()
		lat, err := l.lifecycle(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if rec {
			l.done++
			l.completed()
			for k, v := range lat {
				l.lat[k] = append(l.lat[k], v...)
			}
		}
	}
	return nil
}

// lifecycle runs one job through the client API and returns each
// request's latency by step.
func (l *loop) lifecycle(ctx context.Context) (map[string][]time.Duration, error) {
	lat := map[string][]time.Duration{}
	timed := func(step string, f func() error) error {
		t0 := time.Now()
		err := f()
		lat[step] = append(lat[step], time.Since(t0))
		if err != nil {
			return fmt.Errorf("%s: %w", step, err)
		}
		return nil
	}
	place := client.Placement{Pool: Pool, Envelope: jobEnvelope}
	var r hubclient.Reserved
	// As vk-gitlab does, a retryable refusal is retried with the
	// client's back-off: right after the relay's session came up the hub
	// may not have read its report yet (503 unavailable, runner not in the
	// relay's session report).
	req := client.ReservationRequest{Runner: l.runner, Queue: true, RequestID: client.NewRequestID(), Placement: place}
	var sent time.Time
	err := timed("reserve", func() error {
		return l.c.Retrier().Do(ctx, "reserve", func(ctx context.Context) (err error) {
			sent = time.Now()
			r, err = l.c.Reserve(ctx, req)
			return err
		})
	})
	for err == nil && r.Grant == nil {
		if r.Gone {
			return nil, errors.New("ticket: reservation_gone")
		}
		tk := r.Ticket
		l.hold(func(h *runnerHeld) { h.ticket = tk })
		sent = time.Now()
		err = timed("ticket", func() (err error) { r, err = l.c.PollTicket(ctx, tk, 30*time.Second); return err })
	}
	if err != nil {
		return nil, err
	}
	if l.granted != nil {
		l.granted(sent)
	}
	g := *r.Grant
	l.hold(func(h *runnerHeld) { h.ticket, h.admission = "", g.Admission })
	if err := timed("claim", func() error { return l.c.Claim(ctx, g.Admission) }); err != nil {
		return nil, err
	}
	gitlabJob := l.nextJob()
	l.hold(func(h *runnerHeld) {
		h.admission = ""
		h.jobs = append(h.jobs, client.JobAdmission{GitLabJob: gitlabJob, Admission: g.Admission})
	})
	if err := timed("outcome", func() error {
		return l.c.Outcome(ctx, g.Admission, client.OutcomeJob)
	}); err != nil {
		return nil, err
	}
	var v client.JobView
	if err := timed("submit", func() (err error) {
		v, err = l.c.SubmitJob(ctx, client.JobSubmission{Runner: l.runner, Admission: g.Admission, Reservation: g.Reservation,
			RequestID: client.NewRequestID(), Placement: place, PlaceWithinSecs: 300, Spec: benchSpec(gitlabJob)})
		return err
	}); err != nil {
		return nil, err
	}
	l.hold(func(h *runnerHeld) { h.jobs[len(h.jobs)-1].Job = v.ID })
	for v.State != client.JobFinished {
		after := v.Revision
		if err := timed("follow", func() (err error) { v, err = l.c.GetJob(ctx, v.ID, after, 30*time.Second); return err }); err != nil {
			return nil, err
		}
	}
	if err := timed("output", func() error { _, err := l.c.ReadOutput(ctx, v.ID, 0, 0); return err }); err != nil {
		return nil, err
	}
	if err := timed("settle", func() error { return l.c.Settle(ctx, v.ID) }); err != nil {
		return nil, err
	}
	l.hold(func(h *runnerHeld) { h.jobs = h.jobs[:0] })
	return lat, nil
}
