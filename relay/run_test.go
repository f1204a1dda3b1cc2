package relay

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vk-ci/vk/hubclient"
	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/relay/internal/hubfake"
	"github.com/vk-ci/vk/relay/state"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// autoClock is a fake clock advanced whenever a timer is armed (see
// relay/loop's harness): minutes of intervals pass in milliseconds.
func autoClock(t *testing.T) *clock.Fake {
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

type runEnv struct {
	clk  *clock.Fake
	gl   *gitlabfake.Server
	hub  *hubfake.Hub
	cfg  Config
	toks []string
	proj gitlabfake.Project
}

// newRunEnv enrols a relay with the fake hub and configures one runner of
// gitlabfake.
func newRunEnv(t *testing.T, shutdownSecs int) *runEnv {
	return newRunEnvWith(t, shutdownSecs, autoClock(t), gitlabfake.Options{})
}

func newRunEnvWith(t *testing.T, shutdownSecs int, clk *clock.Fake, o gitlabfake.Options) *runEnv {
	o.LongPoll, o.Logger = 500*time.Millisecond, testlog.New(t)
	gl := gitlabfake.New(o)
	if err := gl.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gl.Close() })
	proj, err := gl.CreateProject("acme/web", map[string]string{"README.md": "hi\n"}, gitlabfake.ProjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hub := hubfake.New(t, clk)
	dir := filepath.Join(t.TempDir(), "state")
	if err := state.CheckDir(dir); err != nil {
		t.Fatal(err)
	}
	if err := hubclient.SaveEnrolment(dir, hubclient.Enrolment{HubURL: hub.URL(), ID: hubfake.RelayID, Kind: hubclient.KindGitLab,
		Joined: t0, CAPEM: hub.CAPEM(), Key: hub.Key()}); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.GitLab.URL = gl.URL()
	cfg.StateDir = dir
	cfg.ShutdownTimeout = shutdownSecs
	cfg.Runners = []RunnerConfig{{Name: "r1", TokenFile: "unused", Pool: "linux", RequestConcurrency: 1,
		Envelope: EnvelopeConfig{Mem: 1 << 30, CPUs: 1, Disk: 1 << 30}}}
	return &runEnv{clk: clk, gl: gl, hub: hub, cfg: cfg, toks: []string{gl.RunnerToken()}, proj: proj}
}

func (e *runEnv) start(t *testing.T) (cancel func(), done <-chan error) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		ch <- Run(ctx, e.cfg, e.toks, testlog.New(t), Options{Clock: e.clk, NoSession: true})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-finished:
		case <-time.After(30 * time.Second):
			t.Error("Run did not return")
		}
	})
	return cancel, ch
}

func (e *runEnv) pipeline(t *testing.T) int64 {
	pl, err := e.gl.CreatePipeline(e.proj.Path, gitlabfake.PipelineSpec{Jobs: []gitlabfake.JobSpec{{Name: "build", Script: []string{"make"}}}})
	if err != nil {
		t.Fatal(err)
	}
	return pl.Jobs["build"]
}

// `vk-gitlab run` end to end through the real hub client and its signed
// requests: verify with a persisted system_id, a job run to success, and on
// SIGTERM no new reservation while the running job still finishes.
//
// spec: GL-02, RELAY-17, RELAY-18, RELAY-12, AUTH-16
func TestRunTakesJobAndStops(t *testing.T) {
	e := newRunEnv(t, 3600)
	glID := e.pipeline(t)
	stop, done := e.start(t)
	id := e.hub.OnlyJob(t)
	e.hub.Mu.Lock()
	e.hub.HoldTickets = true // the loop's next ticket waits
	e.hub.Mu.Unlock()
	ctx := t.Context()
	if _, err := e.gl.WaitJobState(ctx, glID, gitlabfake.StateRunning); err != nil {
		t.Fatal(err)
	}
	// Wait until the loop waits on its next ticket, then SIGTERM.
	e.hub.WaitFor(t, "a ticket waiting", func() bool { return len(e.hub.Tickets) > 0 })
	stop()
	e.hub.Mu.Lock()
	reserves := e.hub.Calls[client.RouteReserve]
	e.hub.Mu.Unlock()
	e.hub.AppendOutput(id, []byte("built\n"))
	e.hub.Finish(id, client.JobResult{})
	if _, err := e.gl.WaitJobState(ctx, glID, gitlabfake.StateSuccess); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its job ended")
	}
	e.hub.Mu.Lock()
	if n := e.hub.Calls[client.RouteReserve]; n != reserves {
		t.Errorf("%d reservation requests after SIGTERM", n-reserves)
	}
	e.hub.Mu.Unlock()
	if got := string(e.gl.Trace(glID)); got != "built\n" {
		t.Errorf("trace = %q", got)
	}
	verifies := e.gl.RequestsTo(gitlabfake.RouteVerify)
	if len(verifies) != 1 {
		t.Fatalf("%d verify calls, want 1 at start", len(verifies))
	}
	sid, err := os.ReadFile(filepath.Join(e.cfg.StateDir, state.SystemIDFile))
	if err != nil || len(sid) < 14 {
		t.Fatalf("system_id file: %q %v", sid, err)
	}
	if err := state.Busy(e.cfg.StateDir); err != nil {
		t.Errorf("Busy after the job settled: %v", err)
	}
}

// Past shutdown_timeout a running job is left recorded for the next start,
// and join/leave are refused meanwhile.
//
// spec: RELAY-18, RELAY-17, AUTH-10
func TestShutdownTimeoutLeavesJob(t *testing.T) {
	e := newRunEnv(t, 60)
	glID := e.pipeline(t)
	stop, done := e.start(t)
	e.hub.OnlyJob(t)
	if _, err := e.gl.WaitJobState(t.Context(), glID, gitlabfake.StateRunning); err != nil {
		t.Fatal(err)
	}
	stop()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after shutdown_timeout")
	}
	if err := state.Busy(e.cfg.StateDir); err == nil {
		t.Fatal("no job recorded after shutdown_timeout")
	}
	err := hubclient.Leave(e.cfg.StateDir, func() error { return state.Busy(e.cfg.StateDir) })
	if err == nil {
		t.Errorf("leave accepted while a job is recorded")
	}
}
