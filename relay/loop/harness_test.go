package loop

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/relay/gitlab"
	"github.com/vk-ci/vk/relay/internal/hubfake"
	"github.com/vk-ci/vk/relay/state"
	"github.com/vk-ci/vk/relay/translate"
)

// t0 is every test's fixed start time (UTC).
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// autoClock is a fake clock that a driver goroutine advances whenever a
// timer is armed, so intervals and backoffs of minutes pass in
// milliseconds while requests travel over real sockets. Tests never wait on
// it: they wait on the fakes' state.
func autoClock(t testing.TB) *clock.Fake {
	clk := clock.NewFake(t0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if clk.Pending() > 0 {
					clk.Advance(250 * time.Millisecond)
				}
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return clk
}

// env is one relay runner against gitlabfake and the test hub.
type env struct {
	t     testing.TB
	clk   *clock.Fake
	gl    *gitlabfake.Server
	hub   *hubfake.Hub
	dir   string
	store *state.Store
	gate  *Gate
	proj  gitlabfake.Project

	mu      sync.Mutex
	changes int
}

type envOptions struct {
	gitlab  gitlabfake.Options
	manual  bool // a clock only the test advances
	limit   int
	concurr int
}

func newEnv(t testing.TB, o envOptions) *env {
	t.Helper()
	clk := clock.NewFake(t0)
	if !o.manual {
		clk = autoClock(t)
	}
	if o.gitlab.LongPoll == 0 {
		o.gitlab.LongPoll = 500 * time.Millisecond
	}
	o.gitlab.Logger = testlog.New(t)
	gl := gitlabfake.New(o.gitlab)
	if err := gl.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gl.Close() })
	proj, err := gl.CreateProject("acme/web", map[string]string{"README.md": "hi\n"}, gitlabfake.ProjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	st, err := state.Open(dir, "r1", hubfake.RelayID)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, clk: clk, gl: gl, hub: hubfake.New(t, clk), dir: dir, store: st, gate: &Gate{}, proj: proj}
}

// pipeline creates a one-job pipeline and returns the job's GitLab ID.
func (e *env) pipeline(vars ...gitlabfake.Variable) int64 {
	e.t.Helper()
	pl, err := e.gl.CreatePipeline(e.proj.Path, gitlabfake.PipelineSpec{Variables: vars,
		Jobs: []gitlabfake.JobSpec{{Name: "build", Script: []string{"make"}}}})
	if err != nil {
		e.t.Fatal(err)
	}
	return pl.Jobs["build"]
}

func (e *env) manager(limit, concurrent int) *Manager {
	e.t.Helper()
	gc, err := gitlab.New(gitlab.Config{URL: e.gl.URL(), Logger: testlog.New(e.t)})
	if err != nil {
		e.t.Fatal(err)
	}
	tok := e.gl.RunnerToken()
	m, err := New(Config{
		Hub: e.hub.Client(e.t), GitLab: gc, SystemID: "s_0123456789ab", HubURL: "https://hub.example.com",
		Runners: []Runner{{Name: "r1", Token: tok, Limit: limit, Store: e.store,
			Placement: client.Placement{Pool: "linux", Envelope: client.Envelope{Mem: 1 << 30, CPUs: 1, Disk: 1 << 30}},
			Translate: translate.Runner{ServerURL: e.gl.URL(), RunnerID: 1, ShortToken: gitlab.ShortToken(tok)}}},
		Concurrent: concurrent, Gate: e.gate, Clock: e.clk, Log: testlog.New(e.t),
		OnChange: func() { e.mu.Lock(); e.changes++; e.mu.Unlock() },
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return m
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
			case <-time.After(60 * time.Second):
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
	deadline := time.Now().Add(30 * time.Second)
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
			e.t.Fatalf("timed out waiting for GitLab job %d: %s (state %s, %d updates, %d patches)", id, what, ji.State, len(ji.Updates), len(ji.Patches))
		}
		select {
		case <-ch:
		case <-time.After(time.Until(deadline)):
		}
	}
}

func committed(ji gitlabfake.JobInfo) bool {
	for _, u := range ji.Updates {
		if u.State == "running" {
			return true
		}
	}
	return false
}
