package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"oras.land/oras-go/v2/registry/remote/auth"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/internal/version"
	"github.com/vk-ci/vk/node/exec"
	"github.com/vk-ci/vk/node/journal"
	"github.com/vk-ci/vk/node/ledger"
	"github.com/vk-ci/vk/node/session"
	"github.com/vk-ci/vk/node/stage"
	"github.com/vk-ci/vk/node/xfer"
)

// Run starts the node agent and holds it until ctx ends, then shuts it
// down gracefully within [NodeSection.ShutdownTimeoutSecs]: no new offers,
// running jobs finish, then the rest are interrupted (FAIL-08).
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	a, err := Start(ctx, cfg, log, Options{})
	if err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Duration(cfg.Node.ShutdownTimeoutSecs)*time.Second)
	defer cancel()
	return a.Shutdown(sctx)
}

// Start is [New] then [Agent.Start]: it returns a running agent.
func Start(ctx context.Context, cfg Config, log *slog.Logger, opts Options) (*Agent, error) {
	a, err := New(cfg, log, opts)
	if err != nil {
		return nil, err
	}
	if err := a.Start(ctx); err != nil {
		return nil, err
	}
	return a, nil
}

// New builds an agent from its configuration without starting it: the
// identity and the hub's address, the capacity ledger, the executors, the
// stage runner and the (not yet dialled) hub session. It opens nothing
// that needs closing, so an agent that is never started needs no
// Shutdown.
func New(cfg Config, log *slog.Logger, opts Options) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Agent{
		cfg: cfg, opts: opts, baseLog: log, log: log.With(logkey.Component, "node"), clk: clock.Or(opts.Clock),
		jobs: map[string]*jobRun{}, changed: make(chan struct{}),
		rearm: make(chan struct{}, 1), stopped: make(chan struct{}),
		spools: filepath.Join(cfg.Node.StateDir, "spool"),
		retry:  cmpOr(opts.ResultRetry, DefaultResultRetry),
	}
	a.t0 = a.clk.Now()
	for _, step := range []func() error{a.loadIdentity, a.newLedger, a.newExecutors, a.newRunner, a.newSession} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	a.metrics = newMetrics(a)
	return a, nil
}

// loadIdentity takes the node's identity from the options or the state
// dir, and the hub's URL from [node] hub when set there.
func (a *Agent) loadIdentity() error {
	if a.opts.Identity != nil {
		a.ident = *a.opts.Identity
	} else {
		id, err := LoadIdentity(a.cfg.Node.StateDir)
		if err != nil {
			return err
		}
		a.ident = id
	}
	if a.cfg.Node.Hub != "" {
		a.ident.HubURL = a.cfg.Node.Hub
	}
	if a.ident.HubURL == "" {
		return fmt.Errorf("%w: no hub URL in [node] hub or the state dir", ErrConfig)
	}
	return nil
}

// newLedger sizes the ledger from the configured resources and whether a
// local gitlab-runner shares the host.
func (a *Agent) newLedger() error {
	total, err := a.cfg.capacity()
	if err != nil {
		return err
	}
	a.capTotal = total
	a.led = ledger.New(ledger.Capacity{Total: total, MaxConcurrency: a.cfg.Executor.Schedule.MaxConcurrency})
	detect := a.opts.DetectRunner
	if detect == nil {
		detect = func() bool { return DetectLocalRunner(RunnerUnits) }
	}
	a.runnerOn = a.cfg.localRunner(detect)
	a.led.SetRunner(a.runnerOn)
	if a.runnerOn {
		a.log.Warn("a local gitlab-runner is present: refusing new offers with runner (PLACE-08); set [node] runner = \"none\" if the host takes placed jobs only")
	}
	return nil
}

// newExecutors builds the configured backends.
func (a *Agent) newExecutors() error {
	be, err := a.newBackends()
	a.be = be
	return err
}

// newRunner builds the stage runner on the default backend, with the
// transfers when the node has them.
func (a *Agent) newRunner() error {
	var tr stage.Transfers
	if xc, ok := a.xferConfig(); ok {
		tr = xfer.Stage{T: xfer.New(xc)}
	}
	name := a.cfg.Node.Name
	if name == "" {
		name, _ = os.Hostname()
	}
	def := a.be.process
	if def == nil {
		def = refuseExecutor{fmt.Errorf("%w: no executor chosen", exec.ErrConfiguration)}
	}
	var err error
	a.runner, err = stage.New(stage.Config{
		Executor: def, ExecutorName: BackendProcess, Transfers: tr,
		Ceiling:  exec.Size{CPUs: int(a.capTotal.CPUs), MemMiB: a.capTotal.MemBytes >> 20},
		NodeName: name, SystemID: a.ident.NodeID, Clock: a.opts.Clock, Log: a.log,
		OnStage: a.onStage,
	})
	return err
}

// newSession builds the hub session: its URL from the hub's, one more
// for every further hub instance in [node] hubs (docs/ha.md), TLS pinned
// to the identity's CA unless the options give a config.
func (a *Agent) newSession() error {
	wsURL, err := sessionURL(a.ident.HubURL)
	if err != nil {
		return err
	}
	var moreURLs []string
	for _, h := range a.cfg.Node.Hubs {
		u, err := sessionURL(h)
		if err != nil {
			return err
		}
		if u != wsURL {
			moreURLs = append(moreURLs, u)
		}
	}
	tlsCfg := a.opts.TLSConfig
	if tlsCfg == nil {
		if tlsCfg, err = clientTLS(a.ident.CAPEM); err != nil {
			return err
		}
	}
	a.sess, err = session.New(session.Config{
		URL: wsURL, URLs: moreURLs, NodeID: a.ident.NodeID, Key: a.ident.Key, TLSConfig: tlsCfg,
		Release: version.Version, Clock: a.opts.SessionClock, Logger: a.baseLog,
	}, handler{a})
	return err
}

// startStep is one step of [Agent.Start]. do sets a part up; undo takes
// down what do set up, also after do failed halfway.
type startStep struct {
	do   func() error
	undo func()
}

// Start opens the journal and spools, recovers the jobs a previous run
// left (FAIL-08: unfinished ones end interrupted, finished ones resend
// their result), opens the control socket and the metrics listener, and
// dials the hub. It returns once the agent runs; ctx only bounds the
// start-up (its values live on), the agent lives until [Agent.Shutdown].
// When a step fails, Start undoes the steps it began, last first, and the
// agent is stopped: it cannot be started again.
func (a *Agent) Start(ctx context.Context) error {
	select {
	case <-a.stopped:
		return ErrStopped
	default:
	}
	a.mu.Lock()
	started := a.runCtx != nil
	if !started {
		a.runCtx, a.runCancel = context.WithCancel(context.WithoutCancel(ctx))
		a.jobsCtx, a.jobsStop = context.WithCancel(a.runCtx)
	}
	a.mu.Unlock()
	if started {
		return errors.New("node: agent already started")
	}
	steps := []startStep{
		{a.openState, a.closeState},
		{a.recoverJobs, a.closeSpools},
		// From here steps start goroutines: undone, they end before the
		// spools and the journal close.
		{func() error { return nil }, a.endGoroutines},
		{a.serveControl, a.closeControl},
		{a.openMetrics, a.closeMetrics},
	}
	for i, st := range steps {
		if err := st.do(); err != nil {
			for j := i; j >= 0; j-- {
				steps[j].undo()
			}
			a.stopOnce.Do(func() { close(a.stopped) })
			return err
		}
	}
	a.runLoops()
	a.log.Info("node agent started", logkey.NodeID, a.ident.NodeID, "hub", a.ident.HubURL,
		"mem", a.capTotal.MemBytes, "disk", a.capTotal.DiskBytes, "cpus", a.capTotal.CPUs, "local_runner", a.runnerOn)
	return nil
}

// endGoroutines ends the agent's lifetime and waits for what runs in it.
func (a *Agent) endGoroutines() {
	a.jobsStop()
	a.runCancel()
	a.bg.Wait()
	a.jobsWG.Wait()
}

// openState makes the spool directory and opens the journal.
func (a *Agent) openState() error {
	if err := os.MkdirAll(a.spools, 0o700); err != nil {
		return fmt.Errorf("node: spool dir: %w", err)
	}
	j, err := journal.Open(filepath.Join(a.cfg.Node.StateDir, "journal"), a.log)
	if err != nil {
		return err
	}
	a.journal = j
	return nil
}

// closeState closes the journal, if open.
func (a *Agent) closeState() {
	if a.journal != nil {
		a.journal.Close()
	}
}

// recoverJobs removes what a previous run's jobs left on the host and
// takes up the jobs its journal holds.
func (a *Agent) recoverJobs() error {
	a.cleanLeftovers()
	return a.recover()
}

// closeSpools closes the spools of the jobs the agent holds.
func (a *Agent) closeSpools() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, jr := range a.jobs {
		jr.sp.Close()
	}
}

// openMetrics opens the metrics listener when [node] metrics_listen asks
// for one.
func (a *Agent) openMetrics() error {
	if a.cfg.Node.MetricsListen == "" {
		return nil
	}
	return a.serveMetrics(a.cfg.Node.MetricsListen)
}

// closeMetrics closes the metrics server, if serving.
func (a *Agent) closeMetrics() {
	if a.httpSrv != nil {
		a.httpSrv.Close()
	}
}

// runLoops follows the recovered jobs and starts the session, the lease
// timer and, with images, the image cache's sweeps.
func (a *Agent) runLoops() {
	a.mu.Lock()
	for _, jr := range a.jobs {
		a.follow(jr)
	}
	a.mu.Unlock()
	a.bg.Add(2)
	go func() { defer a.bg.Done(); a.sess.Run(a.runCtx) }()
	go func() { defer a.bg.Done(); a.leaseLoop() }()
	if a.be.images != nil {
		every := imageGCEvery(a.cfg.imageIdle())
		first := a.clk.NewTimer(every)
		a.bg.Add(1)
		go func() { defer a.bg.Done(); a.imageGCLoop(a.be.images, every, first) }()
	}
}

// sessionURL turns https://host:port into wss://host:port/v1/node/session.
func sessionURL(hub string) (string, error) {
	u, err := url.Parse(hub)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "wss") {
		return "", fmt.Errorf("%w: hub URL %q: want https://host:port", ErrConfig, hub)
	}
	return "wss://" + u.Host + "/v1/node/session", nil
}

// clientTLS pins caPEM (TLS 1.3); nil caPEM means the system roots.
func clientTLS(caPEM []byte) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS13}
	if caPEM != nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, fmt.Errorf("%w: hub CA: no certificate in PEM", ErrConfig)
		}
		c.RootCAs = pool
	}
	return c, nil
}

// xferConfig returns the transfers' config; ok is false when neither
// sources nor caches can be moved (never: git checkouts need no registry).
func (a *Agent) xferConfig() (xfer.Config, bool) {
	r := a.cfg.Registry
	xc := xfer.Config{TempDir: a.cfg.buildsDir(), Clock: a.opts.Clock, Log: a.log}
	if r.URL != "" {
		// Under guest_credential = "job" the transfers reach the
		// registry only with a job's own token (a start's cache
		// registry, XFER-13): they are built without the node's
		// credential, and a start without one never calls them
		// (withoutCaches, XFER-15).
		u, _ := url.Parse(r.URL)
		xc.Registry = u.Host
		xc.RegistryPlainHTTP = r.PlainHTTP || u.Scheme == "http"
		xc.RegistryPrefix = r.RepositoryPrefix
		if r.GuestCredential != GuestCredentialJob && (r.Username != "" || r.Password != "") {
			xc.RegistryCredential = auth.Credential{Username: r.Username, Password: string(r.Password)}
		}
	}
	return xc, true
}

func (a *Agent) serveMetrics(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("node: metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", a.metrics.handler())
	a.httpSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	a.httpLn = ln
	a.bg.Add(1)
	go func() { defer a.bg.Done(); a.httpSrv.Serve(ln) }()
	return nil
}

// Shutdown stops the agent (STYLE C7): it stops taking offers (draining),
// lets running jobs finish until ctx ends, then interrupts the rest
// (FAIL-08), waits up to ResultGrace for their results to be recorded,
// and closes the session and the journal. Unrecorded results are resent
// by the next start.
func (a *Agent) Shutdown(ctx context.Context) error {
	select {
	case <-a.stopped:
		return ErrStopped
	default:
	}
	a.mu.Lock()
	started := a.runCtx != nil
	a.mu.Unlock()
	if !started { // built by New, never started: nothing runs
		a.stopOnce.Do(func() { close(a.stopped) })
		return nil
	}
	a.mu.Lock()
	if st := a.led.Snapshot(a.now()).State; st == ledger.StateReady {
		a.led.SetState(ledger.StateDraining)
	}
	a.broadcastLocked()
	a.mu.Unlock()
	a.log.Info("node shutting down: draining")
	if !a.waitJobs(ctx, func() bool { return a.unfinishedLocked() == 0 }) {
		a.log.Warn("shutdown timeout: interrupting running jobs")
		a.jobsStop()
		a.waitJobs(context.Background(), func() bool { return a.unfinishedLocked() == 0 })
	}
	gctx, cancel := context.WithTimeout(context.Background(), cmpOr(a.opts.ResultGrace, ResultGrace))
	defer cancel()
	a.waitJobs(gctx, func() bool { return len(a.jobs) == 0 })
	a.stop()
	return nil
}

// waitJobs polls cond (under mu) on every job change until true or ctx
// ends; it reports cond.
func (a *Agent) waitJobs(ctx context.Context, cond func() bool) bool {
	for {
		a.mu.Lock()
		ok := cond()
		ch := a.changed
		a.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

// stop ends every goroutine and closes the journal and the spools.
func (a *Agent) stop() {
	a.stopOnce.Do(func() {
		a.jobsStop()
		a.runCancel()
		if a.httpSrv != nil {
			a.httpSrv.Close()
		}
		a.bg.Wait()
		a.jobsWG.Wait()
		a.mu.Lock()
		for _, jr := range a.jobs {
			jr.sp.Close()
		}
		a.mu.Unlock()
		a.journal.Close()
		a.log.Info("node agent stopped")
		close(a.stopped)
	})
}

// Done is closed once the agent has stopped.
func (a *Agent) Done() <-chan struct{} { return a.stopped }
