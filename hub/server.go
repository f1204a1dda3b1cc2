// Package hub is vk's fleet hub (`vk-hub serve`): the client API (hub/api)
// and the node and relay sessions (hub/session) on one TLS 1.3 listener,
// around the scheduling core (sched), which one goroutine owns
// ([Driver], STYLE C1). Job records, claimed admissions and request_id
// answers live in hub/store; job output in hub/output.
//
// [Run] serves until its context ends; [Start] returns a running [Server]
// for tests and the end-to-end harness (Addr, CAPEM, Shutdown).
// docs/hub.md is the operator reference (config keys, endpoints, metrics,
// logs); hub/README.md draws the pipeline.
//
// Choices where the spec is silent (docs/hub.md, docs/defaults.md):
// listener 127.0.0.1:8443 by default; without tls.cert/tls.key the hub
// makes its own CA in <state_dir>/pki and logs its fingerprint; a TLS
// connection carries many requests, each signed over that connection's
// exporter with a new sequence number (AUTH-14, docs/security.md), an
// unauthenticated one a single request, an idle one limits.idle_timeout_secs;
// approvals (API-49, RSESS-07) are enforced only with
// approvals.required; API keys are not built, so POST /v1/clients refuses
// every caller (API-09). The admin socket (hub/admin) and the enrolment
// route (hub/enrol) are served too; the driver implements admin.Backend.
//
// What an unauthenticated peer can make the hub hold is bounded on both
// listeners (internal/connlimit: connection caps per listener and per
// address, header and body deadlines, a body budget; docs/security.md),
// and every error under /v1/ is the API's JSON body (api.JSONErrors).
package hub

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vk-ci/vk/hub/api"
	"github.com/vk-ci/vk/hub/output"
	"github.com/vk-ci/vk/hub/pki"
	"github.com/vk-ci/vk/hub/regtoken"
	"github.com/vk-ci/vk/hub/session"
	"github.com/vk-ci/vk/hub/store"
	_ "github.com/vk-ci/vk/hub/store/boltstore" // the default store
	_ "github.com/vk-ci/vk/hub/store/memstore"  // "mem:"
	"github.com/vk-ci/vk/hub/store/pgstore"     // "postgres:<dsn>"
	"github.com/vk-ci/vk/hub/ui"
	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/connlimit"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

// Options are what [Start] takes besides the config; the zero value is
// usable.
type Options struct {
	// Clock is the hub's clock; nil means real time.
	Clock clock.Clock
	// Output overrides the output store (tests); nil means the store's
	// database with [store] kind = "postgres", else <state_dir>/output.
	Output output.Store
	// WrapStore, when set, wraps the store the hub opened (tests: to
	// inject a concurrent write at a chosen call). The wrapper's Close
	// must close the store it wraps.
	WrapStore func(store.Store) store.Store
	// WrapOutput, when set, wraps the output store the hub opened (tests:
	// to keep what a settle drops). Its Close must close the store it
	// wraps.
	WrapOutput func(output.Store) output.Store
	// BeforeStart, when set, is called with the job's ID on the driver's
	// goroutine just before a start goes to its node (tests: to lose the
	// leader between a job's 201 and a node's accept). It must not wait
	// for the hub.
	BeforeStart func(job string)
	// AbandonAfter bounds the shutdown of [Run] (tests); 0 means the
	// grace plus the record writer's drain and the store's close, plus
	// 5 s.
	AbandonAfter time.Duration
}

// Server is a running hub. Create it with [Start].
//
// Its life is a list of setup steps (see [Start]), each a method that
// registers its own cleanup; [Server.Shutdown] runs the cleanups in
// reverse. A hub with store.lease starts as a standby and leads (the
// [Server.lead] step: driver, client API, relay sessions, admin socket,
// UI) once it holds the lease; a hub without one leads from the start.
type Server struct {
	cfg   Config
	opt   Options
	log   *slog.Logger
	clk   clock.Clock
	pol   *PolicyConfig
	cert  tls.Certificate
	tcfg  *tls.Config
	caPEM []byte
	met   *metrics
	// tokens mints job registry tokens for cfg.Registries (nil: none).
	tokens *regtoken.Minter

	st    store.Store
	pg    *pgstore.Store // nil unless store.kind = "postgres"
	lease *leaseRunner   // nil without store.lease
	out   output.Store

	runCtx context.Context // ends at shutdown
	cancel context.CancelFunc
	wg     sync.WaitGroup

	ln       net.Listener
	apiLimit *connlimit.Listener // limits.max_conns, max_unauth_per_peer
	budget   *connlimit.Budget   // limits.unauth_body_budget_bytes
	http     *http.Server
	nodes    *session.NodeServer
	router   *nodeRouter
	scfg     session.Config

	// Set by lead, under leadMu; read after leading is closed.
	leadMu    sync.Mutex
	drv       *Driver
	relays    *session.RelayServer
	leaderMux atomic.Pointer[http.ServeMux] // the client API, relay sessions, enrolment
	uiLn      net.Listener                  // nil without [ui] addr
	uiHTTP    *http.Server                  // nil without [ui] addr
	uiLimit   *connlimit.Listener           // ui.max_conns, max_conns_per_peer
	leading   chan struct{}                 // closed once this instance leads
	epoch     atomic.Uint64                 // the lease epoch it leads at (0 without a lease)
	metMu     sync.RWMutex                  // held for writing while the driver is built (it sets met.collect)
	cleanups  []func(context.Context) error // guarded by leadMu
	stopping  bool                          // guarded by leadMu
	leaderURL leaderCache                   // what a standby names as the leader

	stopOnce sync.Once
	stopErr  error
	done     chan struct{} // closed (once, by fail) when the hub must stop
	failOnce sync.Once
	// lostLease is set when the hub stops because it lost the lease.
	lostLease atomic.Bool
}

// Run starts the hub and serves until ctx ends, then shuts down
// gracefully (in-flight requests get shutdown_grace_secs).
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	return run(ctx, cfg, log, Options{})
}

// run is [Run] with options. Its shutdown is bounded: past the grace
// plus the record writer's drain and the store's close
// ([Options.AbandonAfter] in tests), it returns with what is left abandoned, so that the process exits
// whatever part still waits (a PostgreSQL gone silent holds node and
// relay sessions in calls that answer only when it comes back). Nothing
// abandoned was acknowledged: every answer waits for durability.
func run(ctx context.Context, cfg Config, log *slog.Logger, opt Options) error {
	s, err := Start(ctx, cfg, log, opt)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-s.done:
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.grace())
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- s.Shutdown(sctx) }()
	limit := cmp.Or(opt.AbandonAfter, cfg.grace()+drainWait+pgstore.CloseWait+5*time.Second)
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case err = <-stopped:
	case <-t.C:
		err = fmt.Errorf("hub: shutdown still unfinished %v after it began; exiting with the rest abandoned", limit)
	}
	if s.lostLease.Load() {
		err = errors.Join(ErrLostLease, err)
	}
	if err != nil {
		log.Error("hub stopped: "+err.Error(), logkey.Component, "hub")
		return err
	}
	log.Info("hub stopped", logkey.Component, "hub")
	return nil
}

// Start validates cfg, opens the store and output, binds the listener,
// starts leading (or, with store.lease, contending for the lease as a
// standby) and serves in the background. It returns once the listener is
// bound and, without a lease, state is restored.
func Start(ctx context.Context, cfg Config, log *slog.Logger, opt Options) (*Server, error) {
	log = cmp.Or(log, slog.New(slog.DiscardHandler))
	s := &Server{cfg: cfg, opt: opt, log: log.With(logkey.Component, "hub"), clk: clock.Or(opt.Clock),
		met: haMetrics(newMetrics()), done: make(chan struct{}), leading: make(chan struct{})}
	steps := []func(context.Context) error{
		s.prepare, s.openStore, s.openOutput, s.startRun, s.listen, s.sessions, s.contend, s.serve,
	}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			s.undo(context.Background())
			return nil, err
		}
	}
	s.log.Info("hub listening", "addr", s.ln.Addr().String(), "state_dir", cfg.StateDir, "leading", s.isLeading())
	return s, nil
}

// onStop registers a cleanup, run in reverse order of registration by
// [Server.Shutdown] (or when a later setup step fails).
func (s *Server) onStop(f func(context.Context) error) {
	s.leadMu.Lock()
	s.cleanups = append(s.cleanups, f)
	s.leadMu.Unlock()
}

// undo runs every registered cleanup, newest first, and returns their
// errors joined; no setup step starts after it.
func (s *Server) undo(ctx context.Context) error {
	s.leadMu.Lock()
	s.stopping = true
	fs := s.cleanups
	s.cleanups = nil
	s.leadMu.Unlock()
	var errs []error
	for i := len(fs) - 1; i >= 0; i-- {
		errs = append(errs, fs[i](ctx))
	}
	return errors.Join(errs...)
}

// prepare validates the config and loads what it names: the capacity
// policy file, the state dir, the TLS certificate. Nothing to clean up.
func (s *Server) prepare(context.Context) error {
	if err := s.cfg.Validate(); err != nil {
		return err
	}
	s.pol = s.cfg.CapacityPolicy
	if s.cfg.CapacityPolicyFile != "" {
		p, err := LoadPolicyFile(s.cfg.CapacityPolicyFile)
		if err != nil {
			return err
		}
		s.pol = &p
	}
	if err := os.MkdirAll(s.cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("hub: state dir: %w", err)
	}
	cert, caPEM, err := serverCert(s.cfg, s.clk.Now(), s.log)
	if err != nil {
		return err
	}
	s.cert, s.caPEM, s.tcfg = cert, caPEM, pki.ServerConfig(cert)
	if len(s.cfg.Registries) > 0 {
		if s.tokens, err = regtoken.New(s.cfg.Registries); err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	return nil
}

// openStore opens the store (fenced, with its lease ready to contend,
// under store.lease); closing it releases a held lease.
func (s *Server) openStore(ctx context.Context) error {
	loc, err := s.cfg.openLocation()
	if err != nil {
		return err
	}
	var st store.Store
	if s.cfg.Store.Kind == StorePostgres && s.cfg.Store.Lease {
		st, s.lease, err = openLeased(ctx, strings.TrimPrefix(loc, "postgres:"), s.cfg.Store, s.log)
	} else {
		st, err = store.Open(ctx, loc)
	}
	if err != nil {
		return fmt.Errorf("hub: store: %w", err)
	}
	s.pg = pgOf(st)
	if s.opt.WrapStore != nil {
		st = s.opt.WrapStore(st)
	}
	s.st = st
	s.onStop(func(context.Context) error { return st.Close() })
	return nil
}

// openOutput opens the job output store: the database's with kind
// postgres (docs/ha.md), else <state_dir>/output.
func (s *Server) openOutput(context.Context) error {
	out := s.opt.Output
	if out == nil && s.pg != nil {
		out = s.pg.Output()
	}
	if out == nil {
		d, err := output.Open(filepath.Join(s.cfg.StateDir, "output"), s.log)
		if err != nil {
			return fmt.Errorf("hub: output: %w", err)
		}
		out = d
	}
	if s.opt.WrapOutput != nil {
		out = s.opt.WrapOutput(out)
	}
	s.out = out
	if st, ok := out.(outputStats); ok {
		s.met.watchOutput(st)
	}
	s.onStop(func(context.Context) error { return out.Close() })
	return nil
}

// startRun makes the context the hub's goroutines run under; its cleanup
// cancels it and waits for them (the driver's last record writes
// included).
func (s *Server) startRun(ctx context.Context) error {
	s.runCtx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	s.onStop(func(context.Context) error {
		s.cancel()
		s.wg.Wait()
		return nil
	})
	return nil
}

// listen binds the API listener with its connection caps.
func (s *Server) listen(context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("hub: listen: %w", err)
	}
	s.ln = ln
	s.apiLimit = connlimit.NewListener(ln, s.cfg.Limits.connLimits())
	s.budget = connlimit.NewBudget(s.cfg.Limits.budget())
	s.onStop(func(context.Context) error {
		if err := ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			return err
		}
		return nil
	})
	return nil
}

// sessions makes the node session server: every instance serves node
// sessions (BS-13), through the router that keeps the fleet picture and
// hands events to the driver once this instance leads.
func (s *Server) sessions(context.Context) error {
	s.scfg = session.Config{Lookup: principalLookup{s.st}, Logger: s.log, Clock: s.clk, Skew: s.cfg.skew(),
		HeartbeatSecs: s.cfg.Sessions.NodeHeartbeatSecs, MissedHeartbeats: s.cfg.Sessions.UnreachableAfterMissed,
		MaxPendingHellos: s.cfg.Limits.MaxPendingHellos}
	s.router = newNodeRouter(s.runCtx, s.log, s.met)
	s.nodes = session.NewNodeServer(s.scfg, s.router)
	return nil
}

// serve starts the API listener's HTTP server: /healthz, /metrics and
// node sessions on every instance; the rest (client API, relay sessions,
// enrolment) from the leader, a standby answering it 503 unavailable
// with the leader's URL. Its cleanup ends the sessions, then waits for
// in-flight requests until the shutdown's context ends.
func (s *Server) serve(context.Context) error {
	base := http.NewServeMux()
	s.everyInstance(base)
	base.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if mux := s.leaderMux.Load(); mux != nil {
			if s.lease != nil && r.URL.Path != client.RouteRelaySession {
				w = &leaseGated{ResponseWriter: w, held: s.lease.l.Held}
			}
			mux.ServeHTTP(w, r)
			return
		}
		s.serveStandby(w, r)
	})
	s.http = &http.Server{
		Handler:           closeUnauthenticated(api.JSONErrors(base)),
		TLSConfig:         s.tcfg,
		ReadHeaderTimeout: s.cfg.Limits.headerTimeout(),
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		BaseContext:       func(net.Listener) context.Context { return s.runCtx },
		ConnContext:       apiConnContext,
		IdleTimeout:       s.cfg.Limits.idleTimeout(),
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		err := s.http.Serve(tls.NewListener(s.apiLimit, s.tcfg))
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("serving stopped", logkey.Err, err)
			s.fail()
		}
	}()
	s.onStop(func(ctx context.Context) error {
		s.nodes.Close()
		if r := s.relayServer(); r != nil {
			r.Close()
		}
		err := s.http.Shutdown(ctx)
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			err = s.http.Close()
		}
		return err
	})
	return nil
}

// everyInstance registers what a standby serves as well as the leader:
// /healthz, /metrics and node sessions. The leader's mux has them too, so
// that a wrong method there is a 405.
func (s *Server) everyInstance(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", s.serveHealth)
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		s.metMu.RLock()
		defer s.metMu.RUnlock()
		s.met.ServeHTTP(w, r)
	})
	mux.Handle(dispatch.RouteNodeSession, s.nodes)
}

func (s *Server) relayServer() *session.RelayServer {
	s.leadMu.Lock()
	defer s.leadMu.Unlock()
	return s.relays
}

// UIURL returns the web UI's base URL as approval_url uses it: ui_url,
// or the UI listener's https URL; "" when neither is set.
func (s *Server) UIURL() string {
	if d := s.Driver(); d != nil {
		return d.cfg.UIURL
	}
	return s.cfg.UIURL
}

// UIAddr returns the web UI listener's address (host:port); "" when the
// UI is off.
func (s *Server) UIAddr() string {
	s.leadMu.Lock()
	defer s.leadMu.Unlock()
	if s.uiLn == nil {
		return ""
	}
	return s.uiLn.Addr().String()
}

// metaUICSRFKey is the store meta key of the web UI's CSRF key, made once
// so forms survive a restart.
const metaUICSRFKey = "ui.csrf_key"

// startUI binds the web UI's listener when cfg.UI.Addr is set: BasicAuth
// with ui.token, else loopback peers only; the CSRF key persisted in the
// store. It returns nils when the UI is off.
func startUI(ctx context.Context, cfg Config, st store.Store, drv *Driver, clk clock.Clock, log *slog.Logger, tcfg *tls.Config) (net.Listener, *http.Server, error) {
	if cfg.UI.Addr == "" {
		return nil, nil, nil
	}
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		return nil, nil, fmt.Errorf("hub: ui: %w", err)
	}
	key, err := st.InitMeta(ctx, metaUICSRFKey, fresh)
	if err != nil {
		return nil, nil, fmt.Errorf("hub: ui: csrf key: %w", err)
	}
	var auth ui.Auth = ui.LoopbackOnly{}
	if cfg.UI.Token != "" {
		auth = ui.BasicAuth{User: cfg.UI.User, Token: cfg.UI.Token}
	}
	ucfg := ui.Config{Backend: drv, Store: st, Log: log, Clock: clk, CSRFKey: key, Operators: auth,
		Updates: relayUpdates{rs: newReleaseStore(cfg.StateDir, st, clk), d: drv}}
	if !cfg.Trace.Disabled {
		ucfg.TraceDir = cfg.Trace.WithDefaults(cfg.StateDir).Dir // the policy page's dry run replays it
	}
	h, err := ui.New(ucfg)
	if err != nil {
		return nil, nil, fmt.Errorf("hub: ui: %w", err)
	}
	ln, err := net.Listen("tcp", cfg.UI.Addr)
	if err != nil {
		return nil, nil, fmt.Errorf("hub: ui listen: %w", err)
	}
	// The UI reads only small forms: one deadline covers handshake,
	// headers and body; idle browser connections are closed after a
	// minute.
	return ln, &http.Server{Handler: h, TLSConfig: tcfg, ReadHeaderTimeout: cfg.Limits.headerTimeout(),
		ReadTimeout: cfg.Limits.headerTimeout() + cfg.Limits.bodyPerMiB(), IdleTimeout: time.Minute,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}, nil
}

// caDER returns the DER of the first certificate in pemData (nil if none).
func caDER(pemData []byte) []byte {
	b, _ := pem.Decode(pemData)
	if b == nil {
		return nil
	}
	return b.Bytes
}

// serverCert loads the configured certificate, or ensures the self-made CA
// and serving certificate in <state_dir>/pki (printing the fingerprint).
func serverCert(cfg Config, now time.Time, log *slog.Logger) (tls.Certificate, []byte, error) {
	if cfg.TLS.Cert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLS.Cert, cfg.TLS.Key)
		if err != nil {
			return tls.Certificate{}, nil, fmt.Errorf("hub: tls: %w", err)
		}
		// The chain's last certificate is what joining relays and nodes
		// pin (the operator's CA when the file carries the chain).
		last := cert.Certificate[len(cert.Certificate)-1]
		return cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: last}), nil
	}
	names := append([]string{}, cfg.TLS.Names...)
	if host, _, err := net.SplitHostPort(cfg.Addr); err == nil && host != "" {
		names = append(names, host)
	}
	b, err := pki.Ensure(filepath.Join(cfg.StateDir, "pki"), names, now)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	log.Info("hub CA", "fingerprint_sha256", pki.FormatFingerprint(b.Fingerprint), "created", b.CreatedCA,
		"ca_file", filepath.Join(cfg.StateDir, "pki", pki.CACertFile))
	return b.Server, b.CACertPEM, nil
}

// pruneAnswers forgets request_id answers older than two TTLs, hourly
// (API-42: answers expire after 24 h and read as expired a day longer).
func (s *Server) pruneAnswers(ctx context.Context, clk clock.Clock) {
	for {
		n, err := s.st.PruneAnswers(ctx, clk.Now().Add(-2*store.AnswerTTL))
		if err != nil && ctx.Err() == nil {
			s.log.Warn("pruning request_id answers failed", logkey.Err, err)
		} else if n > 0 {
			s.log.Info("request_id answers pruned", "count", n)
		}
		t := clk.NewTimer(time.Hour)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// ConnStats returns the API listener's and the UI listener's connection
// counts (the UI's zero without a UI).
func (s *Server) ConnStats() (apiStats, uiStats connlimit.Stats) {
	apiStats = s.apiLimit.Stats()
	if s.uiLimit != nil {
		uiStats = s.uiLimit.Stats()
	}
	return apiStats, uiStats
}

// Addr returns the listener's address (host:port).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL returns https://<addr>.
func (s *Server) URL() string { return "https://" + s.Addr() }

// CAPEM returns the CA certificate (PEM) relays and nodes pin: the
// self-made CA, or the last certificate of the operator's chain.
func (s *Server) CAPEM() []byte { return s.caPEM }

// Driver returns the server's driver (its node and relay methods are the
// seam tests use to play sessions); nil while a standby.
func (s *Server) Driver() *Driver {
	s.leadMu.Lock()
	defer s.leadMu.Unlock()
	return s.drv
}

// OutputStore returns the server's job output store.
func (s *Server) OutputStore() output.Store { return s.out }

// Store returns the server's store (tests enrol principals there).
func (s *Server) Store() store.Store { return s.st }

// Shutdown stops accepting, ends sessions, waits for in-flight requests
// until ctx ends, stops the driver and closes the stores (releasing a
// held lease). Safe to call more than once.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stopOnce.Do(func() { s.stopErr = s.undo(ctx) })
	return s.stopErr
}
