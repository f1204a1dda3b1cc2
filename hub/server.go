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
// connection carries one request (keep-alives off: signatures bind to a
// connection, AUTH-14); approvals (API-49, RSESS-07) are enforced only with
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

	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/hub/api"
	"github.com/vk-ci/vk/hub/enrol"
	"github.com/vk-ci/vk/hub/output"
	"github.com/vk-ci/vk/hub/pki"
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
}

// Server is a running hub. Create it with [Start].
type Server struct {
	cfg    Config
	log    *slog.Logger
	ln     net.Listener
	http   *http.Server
	st     store.Store
	out    output.Store
	drv    *Driver
	met    *metrics
	caPEM  []byte
	cancel context.CancelFunc
	nodes  *session.NodeServer
	relays *session.RelayServer
	uiLn   net.Listener // nil without [ui] addr
	uiHTTP *http.Server // nil without [ui] addr
	// apiLimit and uiLimit enforce the connection caps (limits.max_conns,
	// max_unauth_per_peer; ui.max_conns, max_conns_per_peer).
	apiLimit *connlimit.Listener
	uiLimit  *connlimit.Listener // nil without [ui] addr
	budget   *connlimit.Budget   // limits.unauth_body_budget_bytes

	wg       sync.WaitGroup
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
	s, err := Start(ctx, cfg, log, Options{})
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-s.done:
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.grace())
	defer cancel()
	err = s.Shutdown(sctx)
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

// Start validates cfg, opens the store and output in state_dir, restores
// state, binds the listener and serves in the background. It returns once
// the listener is bound.
func Start(ctx context.Context, cfg Config, log *slog.Logger, opt Options) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With(logkey.Component, "hub")
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pol := cfg.CapacityPolicy
	if cfg.CapacityPolicyFile != "" {
		p, err := LoadPolicyFile(cfg.CapacityPolicyFile)
		if err != nil {
			return nil, err
		}
		pol = &p
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("hub: state dir: %w", err)
	}
	clk := clock.Or(opt.Clock)
	cert, caPEM, err := serverCert(cfg, clk.Now(), log)
	if err != nil {
		return nil, err
	}
	loc, err := cfg.openLocation()
	if err != nil {
		return nil, err
	}
	var (
		st       store.Store
		pg       *pgstore.Store
		leaseEnd <-chan struct{} // closed when a held lease is lost
	)
	if cfg.Store.Kind == StorePostgres && cfg.Store.Lease {
		st, pg, leaseEnd, err = openLeased(ctx, strings.TrimPrefix(loc, "postgres:"), cfg.Store, log)
	} else {
		st, err = store.Open(ctx, loc)
		pg, _ = st.(*pgstore.Store)
	}
	if err != nil {
		return nil, fmt.Errorf("hub: store: %w", err)
	}
	out := opt.Output
	if pg != nil && out == nil {
		out = pg.Output() // job output in the same database (docs/ha.md)
	}
	if opt.WrapStore != nil {
		st = opt.WrapStore(st)
	}
	if out == nil {
		d, err := output.Open(filepath.Join(cfg.StateDir, "output"), log)
		if err != nil {
			st.Close()
			return nil, fmt.Errorf("hub: output: %w", err)
		}
		out = d
	}
	met := newMetrics()
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	drv, err := newDriver(runCtx, cfg, pol, st, out, clk, log, met)
	if err != nil {
		cancel()
		out.Close()
		st.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		cancel()
		drv.w.close()
		out.Close()
		st.Close()
		return nil, fmt.Errorf("hub: listen: %w", err)
	}
	s := &Server{cfg: cfg, log: log, st: st, out: out, drv: drv, met: met, caPEM: caPEM, cancel: cancel, done: make(chan struct{})}
	// abort undoes what is built from here on and returns err: each
	// failure below has all of it to undo (the admin listener once
	// bound). The earlier failures have less, so they undo by hand.
	var admLn net.Listener
	abort := func(err error) (*Server, error) {
		cancel()
		drv.w.close()
		ln.Close()
		if admLn != nil {
			admLn.Close()
		}
		out.Close()
		st.Close()
		return nil, err
	}

	scfg := session.Config{Lookup: principalLookup{st}, Logger: log, Clock: clk, Skew: cfg.skew(),
		HeartbeatSecs: cfg.Sessions.NodeHeartbeatSecs, MissedHeartbeats: cfg.Sessions.UnreachableAfterMissed,
		MaxPendingHellos: cfg.Limits.MaxPendingHellos}
	h := sessionHandler{d: drv, ctx: runCtx}
	s.nodes = session.NewNodeServer(scfg, h)
	s.relays = session.NewRelayServer(scfg, h)

	mux := http.NewServeMux()
	budget := connlimit.NewBudget(cfg.Limits.budget())
	s.budget = budget
	api.New(api.Config{Backend: drv, Store: st, Output: out, Clock: clk, Log: log, Skew: cfg.skew(),
		MaxBody: cfg.Limits.MaxBodyBytes, BodyPerMiB: cfg.Limits.bodyPerMiB(), Budget: budget, Observe: met.observe}).Register(mux)
	mux.Handle("GET /v1/node/session", s.nodes)
	mux.Handle(client.RouteRelaySession, s.relays)
	enr, err := enrol.New(enrol.Config{Store: st, CAPEM: caPEM, Clock: clk, Log: log, BodyTimeout: cfg.Limits.bodyPerMiB(), Budget: budget})
	if err != nil {
		return abort(fmt.Errorf("hub: enrolment: %w", err))
	}
	enr.Register(mux) // the join route (AUTH-08)
	adm, err := admin.NewServer(admin.Config{Store: st, Backend: drv, Enroller: enr, CAFingerprint: pki.Fingerprint(caDER(caPEM)), Clock: clk, Log: log})
	if err != nil {
		return abort(fmt.Errorf("hub: admin socket: %w", err))
	}
	admLn, err = adm.Listen(admin.SocketPath(cfg.StateDir))
	if err != nil {
		return abort(err) // admLn is nil: nothing of it to close
	}
	tcfg := pki.ServerConfig(cert)
	uiLn, uiSrv, err := startUI(ctx, cfg, st, drv, clk, log, tcfg)
	if err != nil {
		return abort(err)
	}
	if uiLn != nil && cfg.UIURL == "" {
		// approval_url links (API-56) point at the UI just bound.
		drv.cfg.UIURL = "https://" + uiLn.Addr().String()
	}
	s.uiLn, s.uiHTTP = uiLn, uiSrv
	s.apiLimit = connlimit.NewListener(ln, cfg.Limits.connLimits())
	if uiLn != nil {
		s.uiLimit = connlimit.NewListener(uiLn, cfg.UI.connLimits())
	}
	mux.Handle("GET /metrics", met)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })

	s.http = &http.Server{
		Handler:           api.JSONErrors(mux),
		TLSConfig:         tcfg,
		ReadHeaderTimeout: cfg.Limits.headerTimeout(),
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		BaseContext:       func(net.Listener) context.Context { return runCtx },
		ConnContext:       connlimit.ConnContext,
	}
	// One request per TLS connection: signatures bind to the connection's
	// exporter (AUTH-14).
	s.http.SetKeepAlivesEnabled(false)

	if s.uiHTTP != nil {
		s.uiHTTP.BaseContext = func(net.Listener) context.Context { return runCtx }
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			err := s.uiHTTP.Serve(tls.NewListener(s.uiLimit, tcfg))
			if err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("web UI stopped", logkey.Err, err)
			}
		}()
		log.Info("web UI listening", "addr", uiLn.Addr().String(), "url", drv.cfg.UIURL, "basic_auth", cfg.UI.Token != "")
	}
	s.wg.Add(4)
	go func() {
		defer s.wg.Done()
		if err := adm.ServeOn(runCtx, admLn); err != nil {
			log.Error("admin socket stopped", logkey.Err, err)
		}
	}()
	go func() {
		defer s.wg.Done()
		drv.Run(runCtx)
	}()
	go func() {
		defer s.wg.Done()
		s.pruneAnswers(runCtx, clk)
	}()
	go func() {
		defer s.wg.Done()
		err := s.http.Serve(tls.NewListener(s.apiLimit, tcfg))
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("serving stopped", logkey.Err, err)
			s.fail()
		}
	}()
	if leaseEnd != nil {
		go s.watchLease(runCtx, leaseEnd)
	}
	s.ln = ln
	log.Info("hub listening", "addr", ln.Addr().String(), "state_dir", cfg.StateDir)
	return s, nil
}

// UIURL returns the web UI's base URL as approval_url uses it: ui_url,
// or the UI listener's https URL; "" when neither is set.
func (s *Server) UIURL() string { return s.drv.cfg.UIURL }

// UIAddr returns the web UI listener's address (host:port); "" when the
// UI is off.
func (s *Server) UIAddr() string {
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
	h, err := ui.New(ui.Config{Backend: drv, Store: st, Log: log, Clock: clk, CSRFKey: key, Operators: auth})
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
// seam tests use to play sessions).
func (s *Server) Driver() *Driver { return s.drv }

// Store returns the server's store (tests enrol principals there).
func (s *Server) Store() store.Store { return s.st }

// Shutdown stops accepting, ends sessions, waits for in-flight requests
// until ctx ends, stops the driver and closes the stores. Safe to call
// more than once.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stopOnce.Do(func() {
		s.nodes.Close()
		s.relays.Close()
		err := s.http.Shutdown(ctx)
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			err = s.http.Close()
		}
		if s.uiHTTP != nil {
			if uerr := s.uiHTTP.Shutdown(ctx); uerr != nil {
				s.uiHTTP.Close()
			}
		}
		s.cancel()
		s.wg.Wait()
		s.stopErr = errors.Join(err, s.out.Close(), s.st.Close())
	})
	return s.stopErr
}
