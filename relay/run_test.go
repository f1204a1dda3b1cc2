package relay

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/hubclient"
	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/realhub"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/relay/state"
)

// t0 is the start of every test's fake clock: the real time, because the
// real hub checks request signatures against its own (real) clock, within
// the wide skew realhub configures.
var t0 = time.Now().UTC().Truncate(time.Second)

// runEnv is one relay (relay.Run) enrolled with the REAL hub, which has a
// real node (internal/realhub), and one runner of gitlabfake. The
// relay's hub calls go through a realhub.Tap (Options.Hub) so tests can
// see them.
type runEnv struct {
	clk   *clock.Fake
	gl    *gitlabfake.Server
	real  *realhub.Hub
	enrol hubclient.Enrolment
	hub   *realhub.Tap
	cfg   Config
	toks  []string
	proj  gitlabfake.Project
	sig   string // where job scripts wait for release files
}

// newRunEnv enrols a relay with the real hub and configures one runner of
// gitlabfake.
func newRunEnv(t *testing.T, shutdownSecs int) *runEnv {
	return newRunEnvWith(t, shutdownSecs, realhub.AutoClock(t), gitlabfake.Options{}, realhub.Options{})
}

func newRunEnvWith(t *testing.T, shutdownSecs int, clk *clock.Fake, o gitlabfake.Options, ho realhub.Options) *runEnv {
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
	real := realhub.Start(t, ho)
	dir := filepath.Join(t.TempDir(), "state")
	if err := state.CheckDir(dir); err != nil {
		t.Fatal(err)
	}
	// `vk-gitlab join` with a token from `vk-hub token create --kind gitlab`.
	enrol := real.JoinRelay(dir, "relay-test")
	hcfg := enrol.Config()
	hcfg.Clock, hcfg.Log = clk, testlog.New(t)
	hc, err := hubclient.New(hcfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.GitLab.URL = gl.URL()
	cfg.StateDir = dir
	cfg.ShutdownTimeout = shutdownSecs
	cfg.Runners = []RunnerConfig{{Name: "r1", TokenFile: "unused", Pool: realhub.Pool, RequestConcurrency: 1,
		Envelope: EnvelopeConfig{Mem: 1 << 30, CPUs: 1, Disk: 1 << 30}}}
	return &runEnv{clk: clk, gl: gl, real: real, enrol: enrol, hub: realhub.NewTap(hc), cfg: cfg,
		toks: []string{gl.RunnerToken()}, proj: proj, sig: t.TempDir()}
}

// start runs Run (with its hub session) until the returned cancel.
func (e *runEnv) start(t *testing.T) (cancel func(), done <-chan error) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		ch <- Run(ctx, e.cfg, e.toks, testlog.New(t), Options{Clock: e.clk, Hub: e.hub})
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

// pipeline creates a one-job pipeline running script on the real node.
func (e *runEnv) pipeline(t *testing.T, script ...string) int64 {
	pl, err := e.gl.CreatePipeline(e.proj.Path, gitlabfake.PipelineSpec{Jobs: []gitlabfake.JobSpec{{Name: "build", Script: script}}})
	if err != nil {
		t.Fatal(err)
	}
	return pl.Jobs["build"]
}

// waitLine is a script line that blocks the job until release(name).
func (e *runEnv) waitLine(name string) string {
	return "while [ ! -e " + filepath.Join(e.sig, name) + " ]; do sleep 0.02; done"
}

// release lets a job's waitLine(name) pass.
func (e *runEnv) release(t *testing.T, name string) {
	if err := os.WriteFile(filepath.Join(e.sig, name), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// `vk-gitlab run` end to end through the real hub client, its signed
// requests and its session with the real hub: verify with a persisted
// system_id, a job run on the real node to success, and on SIGTERM no new
// reservation while the running job still finishes. The node holds one
// job's envelope, so the loop's next ticket waits while the job runs.
//
// spec: GL-02, RELAY-17, RELAY-18, RELAY-12, AUTH-16
func TestRunTakesJobAndStops(t *testing.T) {
	e := newRunEnvWith(t, 3600, realhub.AutoClock(t), gitlabfake.Options{}, realhub.Options{NodeCPUs: 1})
	glID := e.pipeline(t, "echo started", e.waitLine("end"), "echo built")
	stop, done := e.start(t)
	e.hub.OnlyJob(t)
	ctx := t.Context()
	if _, err := e.gl.WaitJobState(ctx, glID, gitlabfake.StateRunning); err != nil {
		t.Fatal(err)
	}
	// Wait until the loop waits on its next ticket, then SIGTERM.
	e.hub.WaitFor(t, "a ticket waiting", func() bool { return len(e.hub.Tickets) > 0 })
	stop()
	reserves := e.hub.Count(client.RouteReserve)
	e.release(t, "end")
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
	if n := e.hub.Count(client.RouteReserve); n != reserves {
		t.Errorf("%d reservation requests after SIGTERM", n-reserves)
	}
	if got := string(e.gl.Trace(glID)); !containsLine(got, "started") || !containsLine(got, "built") {
		t.Errorf("trace = %q, want the job's output through its end", got)
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

// containsLine reports whether trace has an output line equal to s after
// the node's "<time> <stream> " prefix.
func containsLine(trace, s string) bool {
	for _, l := range strings.Split(trace, "\n") {
		if f := strings.SplitN(l, " ", 3); len(f) == 3 && f[2] == s {
			return true
		}
	}
	return false
}

// Past shutdown_timeout a running job is left recorded for the next start,
// and join/leave are refused meanwhile.
//
// spec: RELAY-18, RELAY-17, AUTH-10
func TestShutdownTimeoutLeavesJob(t *testing.T) {
	e := newRunEnv(t, 60)
	glID := e.pipeline(t, e.waitLine("never"))
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
	e.release(t, "never") // let the node's job end before the node stops
}

// A runner token GitLab refuses at verify reserves no room and asks GitLab
// for no job: with every token refused Run returns ErrTokensRefused (the
// command exits non-zero) naming the runner and what to do, and logs it
// last.
//
// spec: GL-02, RSESS-05
func TestRunRefusedTokenAtVerify(t *testing.T) {
	e := newRunEnv(t, 60)
	e.toks = []string{"glrt-not-a-token-gitlab-knows"}
	var logs testlog.Buffer
	errc := make(chan error, 1)
	go func() {
		errc <- Run(t.Context(), e.cfg, e.toks, slog.New(slog.NewTextHandler(&logs, nil)), Options{Clock: e.clk, Hub: e.hub})
	}()
	var err error
	select {
	case err = <-errc:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return with every token refused")
	}
	if !errors.Is(err, ErrTokensRefused) || !strings.Contains(err.Error(), "r1") || !strings.Contains(err.Error(), "token_file") {
		t.Fatalf("Run = %v, want ErrTokensRefused naming r1 and what to do", err)
	}
	if n := e.hub.Count(client.RouteReserve); n != 0 {
		t.Errorf("%d reservations with a refused token", n)
	}
	if n := len(e.gl.RequestsTo(gitlabfake.RouteJobRequest)); n != 0 {
		t.Errorf("%d job requests with a refused token", n)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, "level=ERROR") || !strings.Contains(last, "vk-gitlab stopped") {
		t.Errorf("last log line = %q, want the error saying the relay stopped", last)
	}
}

// A token GitLab refuses later (403 to a job request) stops its runner;
// with no runner left Run returns ErrTokensRefused instead of nil.
//
// spec: RSESS-05
func TestRunRefusedTokenLater(t *testing.T) {
	e := newRunEnv(t, 60)
	e.gl.InjectFault(gitlabfake.Fault{Route: gitlabfake.RouteJobRequest, Status: http.StatusForbidden, Count: 100})
	errc := make(chan error, 1)
	go func() { errc <- Run(t.Context(), e.cfg, e.toks, testlog.New(t), Options{Clock: e.clk, Hub: e.hub}) }()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrTokensRefused) {
			t.Fatalf("Run = %v, want ErrTokensRefused", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return with its only runner's token refused")
	}
}
