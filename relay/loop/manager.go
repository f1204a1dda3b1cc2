package loop

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/vk-ci/vk/hubclient"
	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/relay/gitlab"
	"github.com/vk-ci/vk/relay/state"
	"github.com/vk-ci/vk/relay/translate"
)

// Defaults of the loops (ARB-28, GL-13, GL-16). The place_within_secs of
// every submission is client.RelayPlaceWithinSecs (ARB-38).
const (
	// LeaseSecs is the lease asked for each reservation (ARB-28).
	LeaseSecs = 90
	// RequestTimeout bounds one GitLab job request (ARB-28).
	RequestTimeout = 60 * time.Second
	// PollWait is the long-poll wait of ticket and job-view polls.
	PollWait = 60 * time.Second
	// FinalUpdateMaxBackoff caps the final update's backoff (GL-16).
	FinalUpdateMaxBackoff = time.Hour
)

// Runner is one configured runner as the loops need it.
type Runner struct {
	// Name is the runner's name (state file, hub runner name). Required.
	Name string
	// Token is the glrt- runner token. Required; never logged.
	Token string
	// Placement is where its jobs run. Required.
	Placement client.Placement
	// RequestConcurrency is its number of request loops; 0 means 1.
	RequestConcurrency int
	// Limit bounds its jobs; 0 means only concurrent does.
	Limit int
	// Translate describes the runner to the translation (server URL,
	// GitLab runner ID, short token, CA, output limit).
	Translate translate.Runner
	// Store is its state file. Required.
	Store *state.Store
	// Refused: GitLab refused the token already (at verify). The runner
	// reserves nothing and asks GitLab for nothing; its heartbeat state is
	// token_refused; jobs recorded in its state file still resume.
	Refused bool
}

// Config configures a Manager.
type Config struct {
	// Hub is the hub's client API. Required.
	Hub Hub
	// Retrier retries hub calls (RELAY-13/14); nil means a zero Retrier
	// with Clock.
	Retrier *hubclient.Retrier
	// GitLab is the GitLab client. Required.
	GitLab *gitlab.Client
	// SystemID is the daemon's system_id (GL-02).
	SystemID string
	// HubURL is the enrolled hub URL, named in approval refusals without
	// an approval_url (FAIL-22).
	HubURL string
	// Runners are the configured runners. Required.
	Runners []Runner
	// Concurrent bounds the jobs of all runners; 0 means no bound.
	Concurrent int
	// Gate is the approval gate (RSESS-07). Required.
	Gate *Gate
	// OnChange is called (from any goroutine, must not block) whenever a
	// runner's requests, jobs or state change (RSESS-06); nil means none.
	OnChange func()
	// Clock drives intervals and backoffs; nil means real time.
	Clock clock.Clock
	// Log receives the loops' lines; nil discards.
	Log *slog.Logger
	// PlaceWithinSecs is the place_within_secs of every submission, in
	// seconds. Tests only: 0 means client.RelayPlaceWithinSecs (300,
	// ARB-38), which production always sends.
	PlaceWithinSecs int
	// Observer hears when jobs start and are reported, for metrics; nil
	// means none.
	Observer JobObserver
	// HubVersion returns the relay session version negotiated with the
	// hub, 0 while no session is up; from client.RelayVersionNext on, an
	// outcome carries the loop's next reservation request. nil means 0.
	HubVersion func() int
}

// Manager runs the request loops of every runner and the jobs they take,
// and resumes recorded jobs at start (RELAY-09).
type Manager struct {
	cfg   Config
	clk   clock.Clock
	log   *slog.Logger
	retry *hubclient.Retrier
	slots *Slots
	rs    []*runnerState
	// deadline ends at the shutdown deadline (Run's jobCtx): calls that
	// outlive the request loops' ctx (outcomes, releases, a job request
	// already sent) end with it. context.Background until Run sets it,
	// before it starts any goroutine.
	deadline context.Context

	jobs sync.WaitGroup
}

// runnerState is one runner's live state for heartbeats.
type runnerState struct {
	Runner
	mu         sync.Mutex
	tickets    map[string]bool   // guarded by mu
	requests   map[string]bool   // admissions of outstanding requests; guarded by mu
	held       map[int64]*holder // jobs held; guarded by mu
	inFlight   int               // GitLab requests out; guarded by mu
	refused    bool              // GitLab refused the token; guarded by mu
	unhealthy  bool              // the last GitLab request failed; guarded by mu
	lastAnswer *client.GitLabAnswer
	stop       context.CancelFunc // stops the runner's loops; set in Run
	// One long poll per runner (see awaitPoller); guarded by mu.
	longPolls  bool          // GitLab's last answer said it long-polls
	idleAnswer bool          // the last answer was a 204: a request now may be held
	polling    int           // requests out that GitLab may hold (0 or 1)
	pollDone   chan struct{} // closed when that request comes back; nil while none
	// begin starts a state write without waiting for it (Store.Begin); a
	// test holds the write in flight through it.
	begin func(state.Job) durable
}

// durable is a state write under way (*state.Pending): Done is closed
// once the file holds it or the write failed, Err then says which.
type durable interface {
	Done() <-chan struct{}
	Err() error
}

// holder is a held job as the heartbeat lists it.
type holder struct {
	hubJob, admission string
}

// New checks cfg and returns a Manager.
func New(cfg Config) (*Manager, error) {
	if cfg.Hub == nil || cfg.GitLab == nil || cfg.Gate == nil || len(cfg.Runners) == 0 {
		return nil, errors.New("loop: Hub, GitLab, Gate and Runners are required")
	}
	m := &Manager{cfg: cfg, clk: clock.Or(cfg.Clock), log: cfg.Log, retry: cfg.Retrier, slots: NewSlots(cfg.Concurrent),
		deadline: context.Background()}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	if m.retry == nil {
		m.retry = &hubclient.Retrier{Clock: cfg.Clock, Log: m.log}
	}
	for _, r := range cfg.Runners {
		if r.Name == "" || r.Token == "" || r.Store == nil {
			return nil, fmt.Errorf("loop: runner %q: Name, Token and Store are required", r.Name)
		}
		if r.RequestConcurrency <= 0 {
			r.RequestConcurrency = 1
		}
		rs := &runnerState{Runner: r, refused: r.Refused, tickets: map[string]bool{}, requests: map[string]bool{}, held: map[int64]*holder{}}
		rs.begin = func(j state.Job) durable { return rs.Store.Begin(j) }
		m.rs = append(m.rs, rs)
	}
	return m, nil
}

// Run resumes every recorded job, then runs each runner's request loops until
// ctx ends (RELAY-17: no new job is taken after that). Jobs keep running
// under jobCtx, which the caller ends after shutdown_timeout (RELAY-18), and
// so do the calls a loop still makes after ctx ended (the outcome of its
// admission, a reservation's release, a ticket's cancel, a GitLab job
// request already sent): every one of them ends when jobCtx does, so Run
// returns at the latest once jobCtx ended and the calls in flight noticed,
// every job finished or left recorded for the next start. Run may be
// called once.
func (m *Manager) Run(ctx, jobCtx context.Context) error {
	m.deadline = jobCtx
	for _, r := range m.rs {
		for _, j := range r.Store.Jobs() {
			m.slots.Acquire(r.Name)
			m.startJob(jobCtx, r, j, true)
		}
	}
	var loops sync.WaitGroup
	for _, r := range m.rs {
		if r.Refused {
			continue // a known-bad token reserves nothing (RSESS-05)
		}
		rctx, cancel := context.WithCancel(ctx)
		r.mu.Lock()
		r.stop = cancel
		r.mu.Unlock()
		for i := range r.RequestConcurrency {
			loops.Add(1)
			go func() {
				defer loops.Done()
				m.requestLoop(rctx, jobCtx, r, i)
			}()
		}
	}
	m.changed()
	loops.Wait()
	m.jobs.Wait()
	return nil
}

// Refused returns the names of the runners whose token GitLab refused, in
// configuration order.
func (m *Manager) Refused() []string {
	var out []string
	for _, r := range m.rs {
		r.mu.Lock()
		if r.refused {
			out = append(out, r.Name)
		}
		r.mu.Unlock()
	}
	return out
}

// startJob runs a job's handler in its own goroutine; the slot is given back
// when it returns with the job settled.
// A resumed job not yet submitted reports its outcome again first: it may
// not have reached the hub before the stop, and a repeat of the same outcome
// is answered 204.
func (m *Manager) startJob(ctx context.Context, r *runnerState, j state.Job, resumed bool) {
	r.mu.Lock()
	r.held[j.GitLabID] = &holder{hubJob: j.HubJob, admission: j.Admission}
	r.mu.Unlock()
	m.changed()
	m.jobs.Add(1)
	go func() {
		defer m.jobs.Done()
		if resumed && j.Phase == state.PhaseTaken && j.Admission != "" {
			m.reportOutcome(j.Admission, client.OutcomeJob, m.runnerLog(r))
		}
		done := m.handleJob(ctx, r, j)
		if !done {
			return // left recorded: the next start resumes it
		}
		r.mu.Lock()
		delete(r.held, j.GitLabID)
		r.mu.Unlock()
		m.slots.Release(r.Name)
		m.changed()
	}()
}

// placeWithin is the place_within_secs the Manager submits (ARB-38).
func (m *Manager) placeWithin() int {
	if m.cfg.PlaceWithinSecs > 0 {
		return m.cfg.PlaceWithinSecs
	}
	return client.RelayPlaceWithinSecs
}

func (m *Manager) changed() {
	if m.cfg.OnChange != nil {
		m.cfg.OnChange()
	}
}

// Heartbeat returns every runner's current state (RSESS-04, RSESS-05).
func (m *Manager) Heartbeat() client.RelayHeartbeat {
	hb := client.RelayHeartbeat{Runners: make([]client.RunnerHeartbeat, 0, len(m.rs))}
	gateOpen := m.cfg.Gate.Open()
	for _, r := range m.rs {
		r.mu.Lock()
		rh := client.RunnerHeartbeat{Name: r.Name, State: r.stateLocked(gateOpen)}
		for t := range r.tickets {
			rh.Tickets = append(rh.Tickets, t)
		}
		for a := range r.requests {
			rh.RequestAdmissions = append(rh.RequestAdmissions, a)
		}
		for id, h := range r.held {
			rh.JobAdmissions = append(rh.JobAdmissions, client.JobAdmission{GitLabJob: id, Job: h.hubJob, Admission: h.admission})
		}
		if r.lastAnswer != nil {
			a := *r.lastAnswer
			rh.LastAnswer = &a
		}
		r.mu.Unlock()
		slices.Sort(rh.Tickets)
		slices.Sort(rh.RequestAdmissions)
		slices.SortFunc(rh.JobAdmissions, func(a, b client.JobAdmission) int { return cmp.Compare(a.GitLabJob, b.GitLabJob) })
		hb.Runners = append(hb.Runners, rh)
	}
	return hb
}

// stateLocked is the state the runner reports to the hub: polling,
// waiting_capacity, server_pending, unhealthy or token_refused (RSESS-05).
func (r *runnerState) stateLocked(gateOpen bool) client.RunnerState {
	switch {
	case r.refused:
		return client.RunnerTokenRefused
	case !gateOpen:
		return client.RunnerServerPending
	case r.unhealthy:
		return client.RunnerUnhealthy
	case r.inFlight > 0:
		return client.RunnerPolling
	}
	return client.RunnerWaitingCapacity
}

// runnerLog returns the logger of runner r.
func (m *Manager) runnerLog(r *runnerState) *slog.Logger {
	return m.log.With(logkey.RunnerID, r.Name)
}
