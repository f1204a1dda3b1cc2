package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
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
	"github.com/vk-ci/vk/proto/dispatch"
)

// Result repeats (NSESS-16) and the shutdown grace.
const (
	// DefaultResultRetry is the first interval at which an unrecorded
	// result is repeated; it doubles up to MaxResultRetry.
	DefaultResultRetry = 5 * time.Second
	// MaxResultRetry is the longest interval between repeats.
	MaxResultRetry = time.Minute
	// ResultGrace is how long Shutdown waits, after the last job ended,
	// for the hub to record results before it stops anyway (the journal
	// resends them after the restart).
	ResultGrace = 10 * time.Second
)

// Errors.
var (
	// ErrStopped is returned by Shutdown after the agent already stopped.
	ErrStopped = errors.New("node: agent stopped")
)

// Options are the parts of an [Agent] that are not configuration: the
// wiring tests and an in-process fleet replace. The zero value is
// production.
type Options struct {
	// Identity overrides the state dir's (from `vk node join`).
	Identity *Identity
	// TLSConfig overrides the client TLS config built from the identity's
	// CA.
	TLSConfig *tls.Config
	// Clock drives leases, result repeats and job timers; nil means real
	// time.
	Clock clock.Clock
	// SessionClock drives the session's redial backoff and heartbeats; nil
	// means real time.
	SessionClock clock.Clock
	// DetectRunner reports a local gitlab-runner when [NodeSection.Runner]
	// is unset; nil means [DetectLocalRunner] with [RunnerUnits].
	DetectRunner func() bool
	// Executor replaces the process backend (the oci backend, when
	// configured, still runs jobs with an image).
	Executor exec.Executor
	// ResultRetry is the first repeat interval of a result; 0 means
	// DefaultResultRetry.
	ResultRetry time.Duration

	// ResultGrace bounds Shutdown's wait for results to be recorded once
	// the jobs ended; 0 means [ResultGrace].
	ResultGrace time.Duration

	// egressSource, when set (tests), measures every job's egress in
	// place of the oci backend's network namespace.
	egressSource func(jobID string) egressSource
	// egressSampled, when set (tests), is called after each egress sample
	// with whether a frame was sent.
	egressSampled func(jobID string, sent bool)

	// imageSwept, when set (tests), is called after each image cache
	// sweep with the images it removed.
	imageSwept func(removed []string)

	// leaseArmed, when set (tests), is called each time the lease timer is
	// armed, with the deadline on the ledger's clock.
	leaseArmed func(at time.Duration)
}

// Agent is a running node: ledger, journal, spools, stage runner and hub
// session. Create it with [Start]; stop it with [Agent.Shutdown].
//
//	Start ──▶ running ──Shutdown──▶ draining ──jobs ended or ctx──▶ interrupting ──▶ stopped
type Agent struct {
	cfg     Config
	opts    Options
	log     *slog.Logger
	clk     clock.Clock
	t0      time.Time // the monotonic origin of ledger time
	ident   Identity
	journal *journal.Journal
	runner  *stage.Runner
	be      *backends
	sess    *session.Client
	spools  string // directory of the spools
	retry   time.Duration
	metrics *metrics
	httpSrv *http.Server
	httpLn  net.Listener
	ctlLn   net.Listener // the control socket

	runCtx    context.Context // the agent's lifetime: session, senders, lease timer
	runCancel context.CancelFunc
	jobsCtx   context.Context // ending it interrupts running jobs (FAIL-08)
	jobsStop  context.CancelFunc
	bg        sync.WaitGroup // session, lease timer, metrics
	jobsWG    sync.WaitGroup // job goroutines and senders
	rearm     chan struct{}  // capacity 1: the lease timer recomputes
	stopOnce  sync.Once
	stopped   chan struct{}

	mu          sync.Mutex
	led         *ledger.Ledger     // guarded by mu
	jobs        map[string]*jobRun // unrecorded jobs; guarded by mu
	connected   bool               // guarded by mu
	sessVersion int                // the session's negotiated version; guarded by mu
	pools       []string           // applied from settings; nil until then; guarded by mu
	hasPools    bool               // guarded by mu
	capTotal    ledger.Envelope    // guarded by mu (immutable after Start)
	runnerOn    bool               // a local runner is present; guarded by mu
	changed     chan struct{}      // closed and replaced when a job changes; guarded by mu
}

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

// Start opens the journal and spools, recovers the jobs a previous run
// left (FAIL-08: unfinished ones end interrupted, finished ones resend
// their result), and dials the hub. It returns once the agent runs; ctx
// only bounds the start-up, the agent lives until [Agent.Shutdown].
func Start(ctx context.Context, cfg Config, log *slog.Logger, opts Options) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	base := log
	log = log.With(logkey.Component, "node")
	a := &Agent{
		cfg: cfg, opts: opts, log: log, clk: clock.Or(opts.Clock),
		jobs: map[string]*jobRun{}, changed: make(chan struct{}),
		rearm: make(chan struct{}, 1), stopped: make(chan struct{}),
		spools: filepath.Join(cfg.Node.StateDir, "spool"),
		retry:  cmpOr(opts.ResultRetry, DefaultResultRetry),
	}
	a.t0 = a.clk.Now()
	if opts.Identity != nil {
		a.ident = *opts.Identity
	} else {
		id, err := LoadIdentity(cfg.Node.StateDir)
		if err != nil {
			return nil, err
		}
		a.ident = id
	}
	if cfg.Node.Hub != "" {
		a.ident.HubURL = cfg.Node.Hub
	}
	if a.ident.HubURL == "" {
		return nil, fmt.Errorf("%w: no hub URL in [node] hub or the state dir", ErrConfig)
	}
	wsURL, err := sessionURL(a.ident.HubURL)
	if err != nil {
		return nil, err
	}
	var moreURLs []string // further hub instances (docs/ha.md)
	for _, h := range cfg.Node.Hubs {
		u, err := sessionURL(h)
		if err != nil {
			return nil, err
		}
		if u != wsURL {
			moreURLs = append(moreURLs, u)
		}
	}
	tlsCfg := opts.TLSConfig
	if tlsCfg == nil {
		if tlsCfg, err = clientTLS(a.ident.CAPEM); err != nil {
			return nil, err
		}
	}
	total, err := cfg.capacity()
	if err != nil {
		return nil, err
	}
	a.capTotal = total
	a.led = ledger.New(ledger.Capacity{Total: total, MaxConcurrency: cfg.Executor.Schedule.MaxConcurrency})
	detect := opts.DetectRunner
	if detect == nil {
		detect = func() bool { return DetectLocalRunner(RunnerUnits) }
	}
	a.runnerOn = cfg.localRunner(detect)
	a.led.SetRunner(a.runnerOn)
	if a.runnerOn {
		log.Warn("a local gitlab-runner is present: refusing new offers with runner (PLACE-08); set [node] runner = \"none\" if the host takes placed jobs only")
	}

	if a.be, err = a.newBackends(); err != nil {
		return nil, err
	}
	var tr stage.Transfers
	if xc, ok := a.xferConfig(); ok {
		tr = xfer.Stage{T: xfer.New(xc)}
	}
	name := cfg.Node.Name
	if name == "" {
		name, _ = os.Hostname()
	}
	def := a.be.process
	if def == nil {
		def = refuseExecutor{fmt.Errorf("%w: no executor chosen", exec.ErrConfiguration)}
	}
	a.runner, err = stage.New(stage.Config{
		Executor: def, ExecutorName: BackendProcess, Transfers: tr,
		Ceiling:  exec.Size{CPUs: int(total.CPUs), MemMiB: total.MemBytes >> 20},
		NodeName: name, SystemID: a.ident.NodeID, Clock: opts.Clock, Log: log,
		OnStage: a.onStage,
	})
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(a.spools, 0o700); err != nil {
		return nil, fmt.Errorf("node: spool dir: %w", err)
	}
	a.journal, err = journal.Open(filepath.Join(cfg.Node.StateDir, "journal"), log)
	if err != nil {
		return nil, err
	}
	a.runCtx, a.runCancel = context.WithCancel(context.WithoutCancel(ctx))
	a.jobsCtx, a.jobsStop = context.WithCancel(a.runCtx)
	a.metrics = newMetrics(a)
	fail := func(err error) (*Agent, error) {
		a.runCancel()
		for _, jr := range a.jobs {
			jr.sp.Close()
		}
		a.journal.Close()
		return nil, err
	}
	a.cleanLeftovers()
	if err := a.recover(); err != nil {
		return fail(err)
	}
	a.sess, err = session.New(session.Config{
		URL: wsURL, URLs: moreURLs, NodeID: a.ident.NodeID, Key: a.ident.Key, TLSConfig: tlsCfg,
		Release: version.Version, Clock: opts.SessionClock, Logger: base,
	}, handler{a})
	if err != nil {
		return fail(err)
	}
	if err := a.serveControl(); err != nil {
		return fail(err)
	}
	if cfg.Node.MetricsListen != "" {
		if err := a.serveMetrics(cfg.Node.MetricsListen); err != nil {
			return fail(err)
		}
	}
	a.mu.Lock()
	for _, jr := range a.jobs {
		a.follow(jr)
	}
	a.mu.Unlock()
	a.bg.Add(2)
	go func() { defer a.bg.Done(); a.sess.Run(a.runCtx) }()
	go func() { defer a.bg.Done(); a.leaseLoop() }()
	if a.be.images != nil {
		every := imageGCEvery(cfg.imageIdle())
		first := a.clk.NewTimer(every)
		a.bg.Add(1)
		go func() { defer a.bg.Done(); a.imageGCLoop(a.be.images, every, first) }()
	}
	log.Info("node agent started", logkey.NodeID, a.ident.NodeID, "hub", a.ident.HubURL,
		"mem", total.MemBytes, "disk", total.DiskBytes, "cpus", total.CPUs, "local_runner", a.runnerOn)
	return a, nil
}

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
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
	if r.URL != "" && r.GuestCredential != GuestCredentialJob {
		u, _ := url.Parse(r.URL)
		xc.Registry = u.Host
		xc.RegistryPlainHTTP = r.PlainHTTP || u.Scheme == "http"
		xc.RegistryPrefix = r.RepositoryPrefix
		if r.Username != "" || r.Password != "" {
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

// MetricsAddr returns the metrics listener's address, "" without one.
func (a *Agent) MetricsAddr() string {
	if a.httpLn == nil {
		return ""
	}
	return a.httpLn.Addr().String()
}

// WriteMetrics writes the node's metrics in the Prometheus text format
// (what the metrics listener serves at /metrics).
func (a *Agent) WriteMetrics(w io.Writer) error { return a.metrics.write(w) }

// now is the ledger's monotonic time.
func (a *Agent) now() time.Duration { return a.clk.Now().Sub(a.t0) }

// send queues m for the hub; a failure is logged (the durable mechanisms
// resend what matters).
func (a *Agent) send(m dispatch.Message) {
	if err := a.sess.Send(m); err != nil && !errors.Is(err, session.ErrStopped) {
		a.log.Warn("send to hub failed", "type", m.FrameType(), "kind", m.FrameKind(), logkey.Err, err)
	}
}

func (a *Agent) kickLease() {
	select {
	case a.rearm <- struct{}{}:
	default:
	}
}

// leaseLoop drops reservations whose lease ran out on the monotonic clock
// and tells the hub (NODE-03): one timer, armed at the ledger's next
// expiry.
func (a *Agent) leaseLoop() {
	for {
		a.mu.Lock()
		now := a.now()
		for _, id := range a.led.Expire(now) {
			a.metrics.leaseGone.WithLabelValues(string(dispatch.GoneExpired)).Inc()
			a.send(&dispatch.Lease{Reservation: id, State: dispatch.LeaseGone, Why: dispatch.GoneExpired})
			a.log.Info("lease expired", logkey.Reservation, id)
		}
		a.wakeLocked()
		a.checkDrainedLocked()
		at, ok := a.led.NextExpiry()
		a.mu.Unlock()
		var t clock.Timer
		var tc <-chan time.Time
		if ok {
			t = a.clk.NewTimer(max(at-now, 0))
			tc = t.C()
			if a.opts.leaseArmed != nil {
				a.opts.leaseArmed(at)
			}
		}
		select {
		case <-a.runCtx.Done():
			if t != nil {
				t.Stop()
			}
			return
		case <-a.rearm:
		case <-tc:
		}
		if t != nil {
			t.Stop()
		}
	}
}

// SetState moves the node to state s (operators: drain, quarantine,
// ready). Quarantine releases held reservations and tells the hub
// (NODE-05).
func (a *Agent) SetState(s ledger.State) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, id := range a.led.SetState(s) {
		a.metrics.leaseGone.WithLabelValues(string(dispatch.GoneReleased)).Inc()
		a.send(&dispatch.Lease{Reservation: id, State: dispatch.LeaseGone, Why: dispatch.GoneReleased})
	}
	a.wakeLocked()
	a.checkDrainedLocked()
	a.broadcastLocked()
	a.log.Info("node state", "state", s)
}

// State returns the node's admission state.
func (a *Agent) State() ledger.State {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.led.Snapshot(a.now()).State
}

// checkDrainedLocked moves a draining node with nothing left to drained.
func (a *Agent) checkDrainedLocked() {
	s := a.led.Snapshot(a.now())
	if s.State == ledger.StateDraining && len(s.Jobs) == 0 && len(s.Reservations) == 0 {
		a.led.SetState(ledger.StateDrained)
	}
}

// unfinishedLocked counts jobs without a result.
func (a *Agent) unfinishedLocked() int {
	n := 0
	for _, jr := range a.jobs {
		if jr.result == nil {
			n++
		}
	}
	return n
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

// heldLocked is the held message (NSESS-11, NSESS-24).
func (a *Agent) heldLocked() *dispatch.Held {
	s := a.led.Snapshot(a.now())
	h := &dispatch.Held{}
	for _, r := range s.Reservations {
		h.Reservations = append(h.Reservations, dispatch.HeldReservation{
			Reservation: r.ID, Envelope: toWire(r.Envelope), RemainingSecs: r.RemainingSecs})
	}
	ids := make([]string, 0, len(a.jobs))
	for id := range a.jobs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		jr := a.jobs[id]
		if jr.recorded {
			continue
		}
		h.Jobs = append(h.Jobs, dispatch.HeldJob{Job: id, Finished: jr.result != nil, Spooled: jr.sp.Status().Produced})
	}
	return h
}

// reportLocked is the inventory (XFER-17, PLACE-04, PLACE-08).
func (a *Agent) reportLocked() *dispatch.Report {
	host, _ := os.Hostname()
	pools := a.cfg.Node.Pools
	if a.hasPools {
		pools = a.pools
	}
	return &dispatch.Report{
		Release: version.Version, Host: host, Name: a.cfg.Node.Name,
		Resources:      dispatch.Resources{Mem: toWire(a.capTotal).Mem, Disk: toWire(a.capTotal).Disk, CPUs: int(a.capTotal.CPUs)},
		Labels:         a.cfg.Node.Labels,
		Pools:          pools,
		Registry:       a.cfg.Registry.URL,
		MaxConcurrency: a.cfg.Executor.Schedule.MaxConcurrency,
		Executor:       a.be.reported(),
		LocalRunner:    a.runnerOn,
	}
}

// heartbeat is the periodic state, with the 1-minute load average.
func (a *Agent) heartbeat() dispatch.Heartbeat {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.led.Snapshot(a.now())
	free := toWire(s.Total)
	u := toWire(s.Used)
	free.Mem, free.Disk, free.CPUs = max(free.Mem-u.Mem, 0), max(free.Disk-u.Disk, 0), max(free.CPUs-u.CPUs, 0)
	return dispatch.Heartbeat{
		State: dispatch.NodeState(s.State), Load1: load1(),
		Jobs: a.unfinishedLocked(), Reservations: len(s.Reservations),
		Free: &dispatch.Resources{Mem: free.Mem, Disk: free.Disk, CPUs: free.CPUs},
	}
}
