package loop

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vk-ci/vk/hubclient"
	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/realhub"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/relay/gitlab"
	"github.com/vk-ci/vk/relay/state"
	"github.com/vk-ci/vk/relay/translate"
)

// env is one relay runner against gitlabfake and the REAL hub with a real
// node (internal/realhub). The loops run without relay.Run, so env
// holds the relay's hub session itself (the hub takes reservations only
// from a relay whose session reported the runner); the approval gate stays
// the test's to open. Every hub call goes through a realhub.Tap that
// records it and can inject 503s.
type env struct {
	t     testing.TB
	clk   *clock.Fake
	gl    *gitlabfake.Server
	real  *realhub.Hub
	enrol hubclient.Enrolment
	hub   *realhub.Tap
	dir   string
	sig   string // where job scripts wait for release files
	store *state.Store
	gate  *Gate
	proj  gitlabfake.Project

	// hubVersion is the relay session version the managers are told was
	// negotiated; newEnv sets the newest (an outcome carries the next
	// reservation request).
	hubVersion int

	mu      sync.Mutex
	changes int
	cur     *Manager // guarded by mu; the session's heartbeats are its
	limit   int      // guarded by mu
	status  []client.ServerStatus
	kick    chan struct{}
}

type envOptions struct {
	gitlab gitlabfake.Options
	manual bool // a clock only the test advances
	// gitlabClock: gitlabfake stamps requests with the env's fake clock
	// (Request.At in the loops' time).
	gitlabClock bool
	hub         realhub.Options
}

func newEnv(t testing.TB, o envOptions) *env {
	t.Helper()
	clk := clock.NewFake(time.Now().UTC().Truncate(time.Second))
	if !o.manual {
		clk = realhub.AutoClock(t)
	}
	if o.gitlab.LongPoll == 0 {
		o.gitlab.LongPoll = 500 * time.Millisecond
	}
	o.gitlab.Logger = testlog.New(t)
	if o.gitlabClock {
		o.gitlab.Now = clk.Now
	}
	gl := gitlabfake.New(o.gitlab)
	if err := gl.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gl.Close() })
	proj, err := gl.CreateProject("acme/web", map[string]string{"README.md": "hi\n"}, gitlabfake.ProjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	real := realhub.Start(t, o.hub)
	e := &env{t: t, clk: clk, gl: gl, real: real, dir: t.TempDir(), sig: t.TempDir(), gate: &Gate{}, proj: proj,
		kick: make(chan struct{}, 1), hubVersion: client.RelayVersion}
	e.enrol = real.JoinRelay(t.TempDir(), "relay-test")
	hcfg := e.enrol.Config()
	hcfg.Clock, hcfg.Log = clk, testlog.New(t)
	hc, err := hubclient.New(hcfg)
	if err != nil {
		t.Fatal(err)
	}
	e.hub = realhub.NewTap(hc)
	if e.store, err = state.Open(e.dir, "r1", e.enrol.ID); err != nil {
		t.Fatal(err)
	}
	return e
}

var testPlacement = client.Placement{Pool: realhub.Pool, Envelope: client.Envelope{Mem: 1 << 30, CPUs: 1, Disk: 1 << 30}}

// reopen reopens the runner's state file, as a restarted daemon does.
func (e *env) reopen() {
	e.t.Helper()
	st, err := state.Open(e.dir, "r1", e.enrol.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	e.store = st
}

// pipeline creates a one-job pipeline running script (bash lines on the
// real node) and returns the job's GitLab ID.
func (e *env) pipeline(script []string, vars ...gitlabfake.Variable) int64 {
	e.t.Helper()
	pl, err := e.gl.CreatePipeline(e.proj.Path, gitlabfake.PipelineSpec{Variables: vars,
		Jobs: []gitlabfake.JobSpec{{Name: "build", Script: script}}})
	if err != nil {
		e.t.Fatal(err)
	}
	return pl.Jobs["build"]
}

// waitLine is a script line that blocks the job until release(name).
func (e *env) waitLine(name string) string {
	return "while [ ! -e " + filepath.Join(e.sig, name) + " ]; do sleep 0.02; done"
}

// release lets a job's waitLine(name) pass.
func (e *env) release(name string) {
	e.t.Helper()
	if err := os.WriteFile(filepath.Join(e.sig, name), nil, 0o644); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) manager(limit, concurrent int) *Manager {
	e.t.Helper()
	return e.managerVia(e.hub, limit, concurrent)
}

// managerVia is [env.manager] with the manager's hub calls going through
// hub (a wrapper around e.hub that answers some of them itself).
func (e *env) managerVia(hub Hub, limit, concurrent int) *Manager {
	e.t.Helper()
	gc, err := gitlab.New(gitlab.Config{URL: e.gl.URL(), Logger: testlog.New(e.t)})
	if err != nil {
		e.t.Fatal(err)
	}
	tok := e.gl.RunnerToken()
	m, err := New(Config{
		Hub: hub, Retrier: e.hub.Client().Retrier(), GitLab: gc, SystemID: "s_0123456789ab", HubURL: e.enrol.HubURL,
		Runners: []Runner{{Name: "r1", Token: tok, Limit: limit, Store: e.store, Placement: testPlacement,
			Translate: translate.Runner{ServerURL: e.gl.URL(), RunnerID: 1, ShortToken: gitlab.ShortToken(tok)}}},
		Concurrent: concurrent, Gate: e.gate, Clock: e.clk, Log: testlog.New(e.t),
		OnChange: e.onChange, HubVersion: func() int { return e.hubVersion },
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.use(m, limit, concurrent)
	return m
}

// use makes m the manager whose heartbeats the relay session sends,
// starting the session the first time.
func (e *env) use(m *Manager, limit, concurrent int) {
	e.mu.Lock()
	first := e.cur == nil
	e.cur, e.limit = m, limit
	e.mu.Unlock()
	if first {
		e.session(concurrent)
	}
}

// onChange is a Config.OnChange for managers a test builds itself.
func (e *env) onChange() {
	e.mu.Lock()
	e.changes++
	e.mu.Unlock()
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// session holds the relay's session for the env's lifetime; its
// heartbeats are the current manager's, and a change is sent at once
// (RSESS-06), as relay.Run does.
func (e *env) session(concurrent int) {
	up := make(chan struct{}, 1)
	// The session runs on real time: its heartbeat timer, always armed,
	// would otherwise keep the auto-advanced clock running and hide the
	// loops' own back-offs from the tests that measure them.
	sess := realhub.Session(e.t, e.enrol, nil, realhub.SessionHandler{
		Report: func() client.RelayReport {
			e.mu.Lock()
			defer e.mu.Unlock()
			return client.RelayReport{Release: "test", Host: "test", SystemID: "s_0123456789ab", Concurrent: concurrent,
				GitLabURL: e.gl.URL(), Runners: []client.RunnerReport{{Name: "r1", GitLabRunnerID: 1, Placement: testPlacement,
					Limit: e.limit, RequestConcurrency: 1, TokenAccepted: true}}}
		},
		Heartbeat: func() client.RelayHeartbeat {
			e.mu.Lock()
			m := e.cur
			e.mu.Unlock()
			return m.Heartbeat()
		},
		Status: func(s client.ServerStatus) {
			e.mu.Lock()
			e.status = append(e.status, s)
			e.mu.Unlock()
			select {
			case up <- struct{}{}:
			default:
			}
		},
	})
	// The session is up and reported once the hub sent the server's
	// status; only then does the hub take the relay's reservations.
	select {
	case <-up:
	case <-time.After(30 * time.Second):
		e.t.Fatal("no server status from the hub: the relay session did not come up")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-e.kick:
				e.mu.Lock()
				m := e.cur
				e.mu.Unlock()
				_ = sess.Send(m.Heartbeat())
			}
		}
	}()
	e.t.Cleanup(func() { cancel(); <-done })
}

// run runs m until the returned stop is called: stop ends the request loops
// (and, with abandon, the jobs) and waits for Run to return.
func (e *env) run(m *Manager) (stop func(abandon bool)) {
	ctx, cancel := context.WithCancel(context.Background())
	jctx, jcancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Run(ctx, jctx)
	}()
	var once sync.Once
	stop = func(abandon bool) {
		once.Do(func() {
			cancel()
			if abandon {
				jcancel()
			}
			select {
			case <-done:
			case <-time.After(90 * time.Second):
				e.t.Error("manager did not stop")
			}
			jcancel()
		})
	}
	e.t.Cleanup(func() { stop(true) })
	return stop
}

// waitGitLab waits until cond holds for GitLab job id.
func (e *env) waitGitLab(id int64, what string, cond func(gitlabfake.JobInfo) bool) gitlabfake.JobInfo {
	e.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		ch := e.gl.Changed()
		ji, err := e.gl.Job(id)
		if err != nil {
			e.t.Fatal(err)
		}
		if cond(ji) {
			return ji
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for GitLab job %d: %s (state %s, %d updates, %d patches, trace %q)", id, what, ji.State, len(ji.Updates), len(ji.Patches), tail(ji.Trace))
		}
		select {
		case <-ch:
		case <-time.After(time.Until(deadline)):
		}
	}
}

func tail(b []byte) string {
	s := string(b)
	if len(s) > 2000 {
		s = s[len(s)-2000:]
	}
	return strings.ToValidUTF8(s, "?")
}

// settled waits until the relay settled hub job id.
// oneJobSucceeds runs a one-job pipeline through m until GitLab has the
// job succeeded and the hub has it settled, and returns the hub's job ID.
func (e *env) oneJobSucceeds(m *Manager) string {
	e.t.Helper()
	glID := e.pipeline([]string{"true"})
	e.gate.Set(true)
	stop := e.run(m)
	id := e.hub.OnlyJob(e.t)
	e.waitGitLab(glID, "success", func(ji gitlabfake.JobInfo) bool { return ji.State == gitlabfake.StateSuccess })
	e.settled(id)
	stop(false)
	return id
}

func (e *env) settled(id string) {
	e.t.Helper()
	e.hub.WaitFor(e.t, "settle of "+id, func() bool { return e.hub.Settled[id] > 0 })
}

// committed reports whether GitLab saw the job accepted (a running update).
func committed(ji gitlabfake.JobInfo) bool {
	for _, u := range ji.Updates {
		if u.State == "running" {
			return true
		}
	}
	return false
}
