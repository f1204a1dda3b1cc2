package relay

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vk-ci/vk/hubclient"
	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/internal/version"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/relay/gitlab"
	"github.com/vk-ci/vk/relay/hubsession"
	"github.com/vk-ci/vk/relay/loop"
	"github.com/vk-ci/vk/relay/state"
	"github.com/vk-ci/vk/relay/translate"
)

// Server is one vk-gitlab relay: [New] checks the configuration, the
// state directory and the enrolment; [Server.Run] starts the parts in
// order and stops them in reverse. Each step of setup is a method of its
// own, and registers what undoes it.
type Server struct {
	cfg    Config
	tokens []string
	log    *slog.Logger
	opt    Options
	clk    clock.Clock

	enrol    hubclient.Enrolment
	systemID string
	roots    *x509.CertPool // GitLab's CA; nil means the system's
	gl       *gitlab.Client
	met      *relayMetrics // nil without metrics_listen

	runners []loop.Runner
	mgr     *loop.Manager
	gate    *loop.Gate
	changes chan struct{} // coalesced "send a heartbeat now"

	repMu  sync.Mutex
	report client.RelayReport // what the session's welcome is answered with

	upd       *updater                // nil unless [hub] allow lists update
	restart   atomic.Pointer[Restart] // set once an update was installed
	session   atomic.Pointer[hubsession.Client]
	runCtx    context.Context    // Run's context: ended by SIGTERM or an update
	cancelRun context.CancelFunc // ends Run's context (an update)
	stopJobs  context.CancelFunc // ends the jobs' context at once

	bg   sync.WaitGroup // the goroutines Run started
	undo []func()       // cleanups of the steps run so far, in order
}

// Run is [New] then [Server.Run].
func Run(ctx context.Context, cfg Config, tokens []string, log *slog.Logger, opt Options) error {
	s, err := New(cfg, tokens, log, opt)
	if err != nil {
		return err
	}
	return s.Run(ctx)
}

// New checks what the relay needs before it talks to anyone: the
// configuration, the state directory (RELAY-05), the enrolment (which
// `vk-gitlab join` wrote) and GitLab's CA. tokens are the runners'
// tokens, in order (LoadConfig).
func New(cfg Config, tokens []string, log *slog.Logger, opt Options) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, tokens: tokens, log: log.With(logkey.Component, "relay"), opt: opt,
		clk: clock.Or(opt.Clock), gate: &loop.Gate{}, changes: make(chan struct{}, 1)}
	for _, step := range []func() error{s.checkConfig, s.loadEnrolment, s.prepareUpdates, s.newGitLab} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Run verifies the runners with GitLab (GL-02, GL-18), holds the hub
// session and runs the request loops and jobs until ctx ends (SIGTERM).
// Then it stops taking jobs and gives running ones, and the hub and GitLab
// calls under way (outcomes, releases, a job request already sent), up to
// the shutdown timeout to finish (RELAY-17, RELAY-18). At that deadline
// every goroutine Run started ends, calls in flight are cancelled, and Run
// returns; whatever is left stays recorded for the next start. Run may be
// called once.
func (s *Server) Run(ctx context.Context) error {
	defer s.stop()
	ctx, s.cancelRun = context.WithCancel(ctx)
	defer s.cancelRun()
	s.runCtx = ctx
	if err := s.openRunners(ctx); err != nil {
		return err
	}
	if err := s.newManager(); err != nil {
		return err
	}
	if err := s.serveMetrics(); err != nil {
		return err
	}
	s.report = s.relayReport(ctx)
	// The background goroutines outlive ctx: they stop when Run is done
	// with the manager, not at SIGTERM.
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	s.onStop(func() { stopBG(); s.bg.Wait() })
	jobCtx := s.jobContext(ctx, bg) // before the session: an update may stop the jobs
	if err := s.startSession(bg); err != nil {
		return err
	}
	s.bg.Go(func() { s.reverifyDaily(bg) })
	s.log.Info("vk-gitlab running", "release", version.Version, "runners", len(s.runners), "concurrent", s.cfg.Concurrent, "gitlab", gitlab.CleanURL(s.cfg.GitLab.URL))
	err := s.mgr.Run(ctx, jobCtx)
	s.stop()
	if r := s.restart.Load(); r != nil {
		s.log.Info("vk-gitlab stopped for the update", "release", r.Release)
		return r
	}
	if err == nil && ctx.Err() == nil {
		// Every request loop ended on its own: GitLab refused every token.
		err = refusedError(s.cfg.GitLab.URL, s.mgr.Refused())
	}
	if err != nil {
		s.log.Error("vk-gitlab stopped: " + err.Error())
		return err
	}
	s.log.Info("vk-gitlab stopped")
	return nil
}

// onStop registers f to run when Run ends, before the cleanups registered
// earlier.
func (s *Server) onStop(f func()) { s.undo = append(s.undo, f) }

// stop runs the registered cleanups, last first, once each.
func (s *Server) stop() {
	for len(s.undo) > 0 {
		f := s.undo[len(s.undo)-1]
		s.undo = s.undo[:len(s.undo)-1]
		f()
	}
}

// kick asks for a heartbeat to go out now; kicks coalesce.
func (s *Server) kick() {
	select {
	case s.changes <- struct{}{}:
	default:
	}
}

func (s *Server) checkConfig() error {
	if len(s.tokens) != len(s.cfg.Runners) {
		return fmt.Errorf("%w: %d tokens for %d runners", ErrConfig, len(s.tokens), len(s.cfg.Runners))
	}
	if err := s.cfg.Validate(); err != nil {
		return err
	}
	return state.CheckDir(s.cfg.StateDir)
}

// loadEnrolment reads the relay's identity at the hub and the system ID
// it reports to GitLab.
func (s *Server) loadEnrolment() error {
	enrol, err := hubclient.LoadEnrolment(s.cfg.StateDir)
	if err != nil {
		return fmt.Errorf("relay: %w (run `vk-gitlab join <hub-url> --token -` first)", err)
	}
	if s.cfg.Hub.URL != "" && strings.TrimRight(s.cfg.Hub.URL, "/") != strings.TrimRight(enrol.HubURL, "/") {
		return fmt.Errorf("%w: hub.url %s is not the enrolled hub %s", ErrConfig, s.cfg.Hub.URL, enrol.HubURL)
	}
	if urls := s.cfg.HubURLs(enrol.HubURL); !slices.Contains(urls, strings.TrimRight(enrol.HubURL, "/")) {
		return fmt.Errorf("%w: hub.urls %v does not list the enrolled hub %s", ErrConfig, s.cfg.Hub.URLs, enrol.HubURL)
	}
	s.enrol = enrol
	s.log = s.log.With(logkey.RelayID, enrol.ID)
	s.systemID, err = state.SystemID(s.cfg.StateDir)
	return err
}

// newGitLab builds the GitLab client, trusting gitlab.tls_ca_file when
// set and counting requests when metrics are served.
func (s *Server) newGitLab() error {
	if f := s.cfg.GitLab.TLSCAFile; f != "" {
		pem, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("%w: gitlab.tls_ca_file: %w", ErrConfig, err)
		}
		s.roots = x509.NewCertPool()
		if !s.roots.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%w: gitlab.tls_ca_file %s holds no certificate", ErrConfig, f)
		}
	}
	gcfg := gitlab.Config{URL: s.cfg.GitLab.URL, RootCAs: s.roots, Logger: s.log, Clock: s.opt.Clock}
	if s.cfg.MetricsListen != "" {
		s.met = newRelayMetrics(s.cfg.Concurrent)
		gcfg.Doer = s.met.doer(gitlab.DefaultHTTPClient(s.roots))
	}
	var err error
	s.gl, err = gitlab.New(gcfg)
	return err
}

// openRunners opens each runner's state file (AUTH-16) and verifies its
// token with GitLab. A refused token reserves no room: the hub hears the
// runner as token_refused and GitLab is asked nothing with it. When every
// token is refused and no state file records a job to resume, the relay
// has nothing to do and stops.
func (s *Server) openRunners(ctx context.Context) error {
	reports := make([]client.RunnerReport, len(s.cfg.Runners))
	var names, refused []string
	for i, rc := range s.cfg.Runners {
		st, err := state.Open(s.cfg.StateDir, rc.Name, s.enrol.ID)
		if err != nil {
			return err
		}
		ca, err := translate.ReadServerCA(rc.TLSCAFile)
		if err != nil {
			return fmt.Errorf("%w: runners[%d].tls_ca_file: %w", ErrConfig, i, err)
		}
		names = append(names, rc.Name)
		id, ok := verify(ctx, s.gl, s.tokens[i], s.systemID, s.clk, s.log.With(logkey.RunnerID, rc.Name))
		if !ok {
			refused = append(refused, rc.Name)
		}
		reports[i] = client.RunnerReport{Name: rc.Name, GitLabRunnerID: id, Placement: rc.Placement(), Limit: rc.Limit,
			RequestConcurrency: rc.RequestConcurrency, TokenAccepted: ok}
		s.runners = append(s.runners, loop.Runner{Name: rc.Name, Token: s.tokens[i], Placement: rc.Placement(), Refused: !ok,
			RequestConcurrency: rc.RequestConcurrency, Limit: rc.Limit, Store: st,
			Translate: translate.Runner{ServerURL: s.cfg.GitLab.URL, RunnerID: id, ShortToken: gitlab.ShortToken(s.tokens[i]),
				ServerCAPEM: ca, OutputLimit: rc.OutputLimit.Bytes()}})
	}
	s.report.Runners = reports
	if len(refused) == len(names) && !recordsJobs(s.runners) {
		err := refusedError(s.cfg.GitLab.URL, refused)
		s.log.Error("vk-gitlab stopped: "+err.Error(), "runners", refused)
		return err
	}
	if orphans, err := state.Orphans(s.cfg.StateDir, names); err == nil {
		for _, o := range orphans {
			s.log.Warn("state file owned by no configured runner; its jobs are not resumed (was a runner renamed or its token changed? see OPS-08)", "file", o)
		}
	}
	return nil
}

// newManager builds the hub client (unless a test gave one) and the
// manager of the request loops and jobs.
func (s *Server) newManager() error {
	hub := s.opt.Hub
	var retrier *hubclient.Retrier
	if hub == nil {
		hcfg := s.enrol.Config()
		urls := s.cfg.HubURLs(s.enrol.HubURL)
		hcfg.HubURL, hcfg.Others = urls[0], urls[1:]
		hcfg.Clock, hcfg.Log = s.opt.Clock, s.log
		hc, err := hubclient.New(hcfg)
		if err != nil {
			return err
		}
		hub, retrier = hc, hc.Retrier()
	}
	var err error
	s.mgr, err = loop.New(loop.Config{Hub: hub, Retrier: retrier, GitLab: s.gl, SystemID: s.systemID, HubURL: s.enrol.HubURL,
		Runners: s.runners, Concurrent: s.cfg.Concurrent, Gate: s.gate, Clock: s.opt.Clock, Log: s.log,
		PlaceWithinSecs: s.opt.PlaceWithinSecs, Observer: s.met.observer(), OnChange: s.onChange, HubVersion: s.hubVersion})
	return err
}

// hubVersion is the relay session version negotiated with the hub, 0
// while there is no session.
func (s *Server) hubVersion() int {
	if c := s.session.Load(); c != nil {
		return c.Version()
	}
	return 0
}

// serveMetrics serves /metrics on metrics_listen, when set, until Run ends.
func (s *Server) serveMetrics() error {
	if s.met == nil {
		return nil
	}
	limits := map[string]int{}
	for _, rc := range s.cfg.Runners {
		limits[rc.Name] = rc.RequestConcurrency
	}
	s.met.watch(s.mgr.Heartbeat, limits)
	s.met.watchPhases(s.mgr.JobPhases)
	ln, err := net.Listen("tcp", s.cfg.MetricsListen)
	if err != nil {
		return fmt.Errorf("relay: metrics_listen: %w", err)
	}
	srv := &http.Server{Handler: s.met.handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	s.onStop(func() { _ = srv.Close() })
	s.log.Info("metrics listening", "addr", ln.Addr().String())
	return nil
}

// relayReport is what the relay tells the hub about itself when the
// session opens (RSESS-02); the runners' part was filled by openRunners.
func (s *Server) relayReport(ctx context.Context) client.RelayReport {
	host, _ := os.Hostname()
	rep := client.RelayReport{Release: version.Version, Host: host, SystemID: s.systemID, Concurrent: s.cfg.Concurrent,
		GitLabURL: s.cfg.GitLab.URL, ServerKeySHA256: serverKeySHA256(ctx, s.cfg.GitLab.URL, s.roots), Runners: s.report.Runners}
	if s.upd != nil {
		rep.Allow = []string{client.RelayAllowUpdate}
	}
	return rep
}

func (s *Server) currentReport() client.RelayReport {
	s.repMu.Lock()
	defer s.repMu.Unlock()
	return s.report
}

// startSession holds the hub session until bg ends, and sends a heartbeat
// whenever the manager's state changes, coalesced (RSESS-06). Without a
// session (tests) the gate to GitLab opens at once.
func (s *Server) startSession(bg context.Context) error {
	if s.opt.NoSession {
		s.gate.Set(true)
		return nil
	}
	h := &sessionHandler{gate: s.gate, mgr: s.mgr, log: s.log, kick: s.kick, report: s.currentReport}
	if s.upd != nil {
		s.upd.bg = s.bg.Go
		s.upd.restart = s.restartInto
		h.update = func(u client.Update) { s.upd.offer(bg, u) }
	}
	tlsCfg, err := hubTLS(s.enrol)
	if err != nil {
		return err
	}
	var others []string
	urls := s.cfg.HubURLs(s.enrol.HubURL)
	for _, u := range urls[1:] {
		others = append(others, sessionURL(u))
	}
	sess, err := hubsession.New(hubsession.Config{URL: sessionURL(urls[0]), Others: others, RelayID: s.enrol.ID, Key: s.enrol.Key,
		TLSConfig: tlsCfg, Release: version.Version, Clock: s.opt.Clock, Logger: s.log}, h)
	if err != nil {
		return err
	}
	h.sess = sess
	s.session.Store(sess)
	s.bg.Go(func() { sess.Run(bg) })
	s.bg.Go(func() {
		for {
			select {
			case <-bg.Done():
				return
			case <-s.changes:
				_ = sess.Send(s.mgr.Heartbeat())
			}
		}
	})
	return nil
}

// reverifyDaily verifies every runner's token again every VerifyEvery
// until bg ends, and keeps the report's token state current (GL-18).
func (s *Server) reverifyDaily(bg context.Context) {
	for {
		t := s.clk.NewTimer(VerifyEvery)
		select {
		case <-bg.Done():
			t.Stop()
			return
		case <-t.C():
		}
		for i, rc := range s.cfg.Runners {
			id, ok := verify(bg, s.gl, s.tokens[i], s.systemID, s.clk, s.log.With(logkey.RunnerID, rc.Name))
			s.repMu.Lock()
			s.report.Runners[i].TokenAccepted = ok
			if id != 0 {
				s.report.Runners[i].GitLabRunnerID = id
			}
			s.repMu.Unlock()
		}
	}
}

// jobContext is the context running jobs and the calls under way run in:
// it outlives ctx by the shutdown timeout, so that at SIGTERM the loops
// stop taking jobs while running ones get that long to finish (RELAY-17,
// RELAY-18).
func (s *Server) jobContext(ctx, bg context.Context) context.Context {
	jobCtx, stopJobs := context.WithCancel(context.WithoutCancel(ctx))
	s.onStop(stopJobs)
	s.stopJobs = stopJobs
	s.bg.Go(func() {
		select {
		case <-ctx.Done():
		case <-bg.Done():
			return
		}
		if s.restart.Load() != nil {
			return // an update stopped the jobs already
		}
		s.log.Info("stopping: no new jobs; running jobs get up to shutdown_timeout", "shutdown_timeout", s.cfg.ShutdownDuration())
		t := s.clk.NewTimer(s.cfg.ShutdownDuration())
		defer t.Stop()
		select {
		case <-t.C():
			s.log.Warn("shutdown_timeout reached; jobs left recorded for the next start")
			stopJobs()
		case <-bg.Done():
		}
	})
	return jobCtx
}
