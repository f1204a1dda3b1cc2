package relay

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
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

// VerifyEvery is how often runner tokens are verified again (GL-18).
const VerifyEvery = 24 * time.Hour

// ErrTokensRefused is Run's error when GitLab refuses the token of every
// runner, at start or later: the relay has nothing left to do, and exits
// non-zero so that a service manager notices.
var ErrTokensRefused = errors.New("relay: GitLab refused every runner token")

// refusedError is ErrTokensRefused naming the runners and what to do.
func refusedError(gitlabURL string, names []string) error {
	return fmt.Errorf("%w (%s at %s): the runner was deleted in GitLab or its token reset; "+
		"register it again in GitLab, put its new glrt- token in the runner's token_file, then start vk-gitlab again",
		ErrTokensRefused, strings.Join(names, ", "), gitlab.CleanURL(gitlabURL))
}

// Options are what Run needs beyond the configuration; the zero value is
// production's.
type Options struct {
	// Clock drives every timer; nil means real time.
	Clock clock.Clock
	// Hub replaces the hub client (tests); nil means one built from the
	// enrolment.
	Hub loop.Hub
	// NoSession skips the hub session (tests): the approval gate is then
	// opened at once.
	NoSession bool
	// PlaceWithinSecs is the place_within_secs of every job submission, in
	// seconds. Tests only (a no-capacity test need not wait five minutes);
	// 0 means client.RelayPlaceWithinSecs (300, ARB-38), which production
	// always sends: it is deliberately not a configuration key.
	PlaceWithinSecs int
}

// Run is `vk-gitlab run`: it checks the state directory (RELAY-05), loads
// the enrolment, verifies the runners with GitLab (GL-02, GL-18), holds the
// hub session (RSESS-01..07) and runs the request loops and jobs until ctx
// ends (SIGTERM). Then it stops taking jobs and gives running ones, and the
// hub and GitLab calls under way (outcomes, releases, a job request already
// sent), up to cfg.ShutdownTimeout to finish (RELAY-17, RELAY-18). At that
// deadline every goroutine Run started ends, calls in flight are cancelled,
// and Run returns; whatever is left stays recorded for the next start.
// tokens are the runners' tokens, in order (LoadConfig).
func Run(ctx context.Context, cfg Config, tokens []string, log *slog.Logger, opt Options) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With(logkey.Component, "relay")
	clk := clock.Or(opt.Clock)
	if len(tokens) != len(cfg.Runners) {
		return fmt.Errorf("%w: %d tokens for %d runners", ErrConfig, len(tokens), len(cfg.Runners))
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if err := state.CheckDir(cfg.StateDir); err != nil {
		return err
	}
	enrol, err := hubclient.LoadEnrolment(cfg.StateDir)
	if err != nil {
		return fmt.Errorf("relay: %w (run `vk-gitlab join <hub-url> --token -` first)", err)
	}
	if cfg.Hub.URL != "" && strings.TrimRight(cfg.Hub.URL, "/") != strings.TrimRight(enrol.HubURL, "/") {
		return fmt.Errorf("%w: hub.url %s is not the enrolled hub %s", ErrConfig, cfg.Hub.URL, enrol.HubURL)
	}
	log = log.With(logkey.RelayID, enrol.ID)
	systemID, err := state.SystemID(cfg.StateDir)
	if err != nil {
		return err
	}
	var roots *x509.CertPool
	if cfg.GitLab.TLSCAFile != "" {
		pem, err := os.ReadFile(cfg.GitLab.TLSCAFile)
		if err != nil {
			return fmt.Errorf("%w: gitlab.tls_ca_file: %w", ErrConfig, err)
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%w: gitlab.tls_ca_file %s holds no certificate", ErrConfig, cfg.GitLab.TLSCAFile)
		}
	}
	gcfg := gitlab.Config{URL: cfg.GitLab.URL, RootCAs: roots, Logger: log, Clock: opt.Clock}
	var met *relayMetrics
	if cfg.MetricsListen != "" {
		met = newRelayMetrics(cfg.Concurrent)
		gcfg.Doer = met.doer(gitlab.DefaultHTTPClient(roots))
	}
	gl, err := gitlab.New(gcfg)
	if err != nil {
		return err
	}

	// Runners: state files (AUTH-16), verify (GL-02, GL-18).
	var runners []loop.Runner
	reports := make([]client.RunnerReport, len(cfg.Runners))
	var names, refused []string
	for i, rc := range cfg.Runners {
		st, err := state.Open(cfg.StateDir, rc.Name, enrol.ID)
		if err != nil {
			return err
		}
		ca, err := translate.ReadServerCA(rc.TLSCAFile)
		if err != nil {
			return fmt.Errorf("%w: runners[%d].tls_ca_file: %w", ErrConfig, i, err)
		}
		names = append(names, rc.Name)
		id, ok := verify(ctx, gl, tokens[i], systemID, clk, log.With(logkey.RunnerID, rc.Name))
		if !ok {
			refused = append(refused, rc.Name)
		}
		reports[i] = client.RunnerReport{Name: rc.Name, GitLabRunnerID: id, Placement: rc.Placement(), Limit: rc.Limit,
			RequestConcurrency: rc.RequestConcurrency, TokenAccepted: ok}
		// A refused token reserves no room: the hub hears the runner as
		// token_refused, GitLab is asked nothing with it.
		runners = append(runners, loop.Runner{Name: rc.Name, Token: tokens[i], Placement: rc.Placement(), Refused: !ok,
			RequestConcurrency: rc.RequestConcurrency, Limit: rc.Limit, Store: st,
			Translate: translate.Runner{ServerURL: cfg.GitLab.URL, RunnerID: id, ShortToken: gitlab.ShortToken(tokens[i]),
				ServerCAPEM: ca, OutputLimit: rc.OutputLimit.Bytes()}})
	}
	if len(refused) == len(names) && !recordsJobs(runners) {
		err := refusedError(cfg.GitLab.URL, refused)
		log.Error("vk-gitlab stopped: "+err.Error(), "runners", refused)
		return err
	}
	if orphans, err := state.Orphans(cfg.StateDir, names); err == nil {
		for _, o := range orphans {
			log.Warn("state file owned by no configured runner; its jobs are not resumed (was a runner renamed or its token changed? see OPS-08)", "file", o)
		}
	}

	hub := opt.Hub
	var hc *hubclient.Client
	if hub == nil {
		hcfg := enrol.Config()
		hcfg.Clock, hcfg.Log = opt.Clock, log
		hc, err = hubclient.New(hcfg)
		if err != nil {
			return err
		}
		hub = hc
	}
	var retrier *hubclient.Retrier
	if hc != nil {
		retrier = hc.Retrier()
	}
	gate := &loop.Gate{}
	changes := make(chan struct{}, 1)
	mgr, err := loop.New(loop.Config{Hub: hub, Retrier: retrier, GitLab: gl, SystemID: systemID, HubURL: enrol.HubURL,
		Runners: runners, Concurrent: cfg.Concurrent, Gate: gate, Clock: opt.Clock, Log: log, PlaceWithinSecs: opt.PlaceWithinSecs, Observer: met.observer(),
		OnChange: func() {
			select {
			case changes <- struct{}{}:
			default:
			}
		}})
	if err != nil {
		return err
	}

	if met != nil {
		limits := map[string]int{}
		for _, rc := range cfg.Runners {
			limits[rc.Name] = rc.RequestConcurrency
		}
		met.watch(mgr.Heartbeat, limits)
		met.watchPhases(mgr.JobPhases)
		ln, err := net.Listen("tcp", cfg.MetricsListen)
		if err != nil {
			return fmt.Errorf("relay: metrics_listen: %w", err)
		}
		msrv := &http.Server{Handler: met.handler(), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = msrv.Serve(ln) }()
		defer msrv.Close()
		log.Info("metrics listening", "addr", ln.Addr().String())
	}

	host, _ := os.Hostname()
	report := client.RelayReport{Release: version.Version, Host: host, SystemID: systemID, Concurrent: cfg.Concurrent,
		GitLabURL: cfg.GitLab.URL, ServerKeySHA256: serverKeySHA256(ctx, cfg.GitLab.URL, roots), Runners: reports}
	var repMu sync.Mutex
	sessCtx, stopSession := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSession()
	var sessDone sync.WaitGroup
	if opt.NoSession {
		gate.Set(true)
	} else {
		kick := func() {
			select {
			case changes <- struct{}{}:
			default:
			}
		}
		h := &sessionHandler{gate: gate, mgr: mgr, log: log, kick: kick,
			report: func() client.RelayReport { repMu.Lock(); defer repMu.Unlock(); return report }}
		tlsCfg, err := hubTLS(enrol)
		if err != nil {
			return err
		}
		sess, err := hubsession.New(hubsession.Config{URL: sessionURL(enrol.HubURL), RelayID: enrol.ID, Key: enrol.Key,
			TLSConfig: tlsCfg, Release: version.Version, Clock: opt.Clock, Logger: log}, h)
		if err != nil {
			return err
		}
		h.sess = sess
		sessDone.Add(2)
		go func() { defer sessDone.Done(); sess.Run(sessCtx) }()
		// RSESS-06: a change goes out at once, coalesced.
		go func() {
			defer sessDone.Done()
			for {
				select {
				case <-sessCtx.Done():
					return
				case <-changes:
					_ = sess.Send(mgr.Heartbeat())
				}
			}
		}()
	}
	// GL-18: verify again daily.
	sessDone.Add(1)
	go func() {
		defer sessDone.Done()
		for {
			t := clk.NewTimer(VerifyEvery)
			select {
			case <-sessCtx.Done():
				t.Stop()
				return
			case <-t.C():
			}
			for i, rc := range cfg.Runners {
				id, ok := verify(sessCtx, gl, tokens[i], systemID, clk, log.With(logkey.RunnerID, rc.Name))
				repMu.Lock()
				report.Runners[i].TokenAccepted = ok
				if id != 0 {
					report.Runners[i].GitLabRunnerID = id
				}
				repMu.Unlock()
			}
		}
	}()

	// RELAY-17/18: ctx's end stops the loops; jobs get ShutdownTimeout.
	jobCtx, stopJobs := context.WithCancel(context.WithoutCancel(ctx))
	defer stopJobs()
	sessDone.Add(1)
	go func() {
		defer sessDone.Done()
		select {
		case <-ctx.Done():
		case <-sessCtx.Done():
			return
		}
		log.Info("stopping: no new jobs; running jobs get up to shutdown_timeout", "shutdown_timeout", cfg.ShutdownDuration())
		t := clk.NewTimer(cfg.ShutdownDuration())
		defer t.Stop()
		select {
		case <-t.C():
			log.Warn("shutdown_timeout reached; jobs left recorded for the next start")
			stopJobs()
		case <-sessCtx.Done():
		}
	}()
	log.Info("vk-gitlab running", "runners", len(runners), "concurrent", cfg.Concurrent, "gitlab", gitlab.CleanURL(cfg.GitLab.URL))
	err = mgr.Run(ctx, jobCtx)
	stopSession()
	sessDone.Wait()
	if err == nil && ctx.Err() == nil {
		// Every request loop ended on its own: GitLab refused every token.
		err = refusedError(cfg.GitLab.URL, mgr.Refused())
	}
	if err != nil {
		log.Error("vk-gitlab stopped: " + err.Error())
		return err
	}
	log.Info("vk-gitlab stopped")
	return nil
}

// recordsJobs reports whether a runner's state file records a job (one to
// resume even with its token refused).
func recordsJobs(runners []loop.Runner) bool {
	for _, r := range runners {
		if len(r.Store.Jobs()) > 0 {
			return true
		}
	}
	return false
}

// verify calls /runners/verify and logs token expiry (GL-02, GL-18). It
// returns GitLab's runner ID (0 when unknown) and whether the token was
// accepted.
func verify(ctx context.Context, gl *gitlab.Client, token, systemID string, clk clock.Clock, log *slog.Logger) (int64, bool) {
	vctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := gl.VerifyRunner(vctx, token, systemID)
	switch out.Kind {
	case gitlab.VerifyValid:
		exp, left := gitlab.CheckTokenExpiry(out.Response.TokenExpiresAt, clk.Now())
		switch exp {
		case gitlab.TokenExpiring:
			log.Warn("runner token expires soon; vk-gitlab never rotates tokens", "expires_in", left.Round(time.Minute))
		case gitlab.TokenExpired:
			log.Error("runner token expired", "expired_for", (-left).Round(time.Minute))
		}
		return out.Response.ID, true
	case gitlab.VerifyRefused:
		log.Error("GitLab refused the runner token at verify: this runner asks GitLab for nothing and reserves no room (token_refused); register it again and put the new token in its token_file",
			"token", gitlab.ShortToken(token))
		return 0, false
	}
	log.Warn("runner verify failed", logkey.Err, err)
	return 0, true // unknown: the job requests will tell
}

// serverKeySHA256 is the hex SHA-256 of GitLab's certificate public key
// (SubjectPublicKeyInfo DER) for the report (RSESS-02); "" for plain HTTP
// or when GitLab cannot be reached.
func serverKeySHA256(ctx context.Context, rawURL string, roots *x509.CertPool) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "https" {
		return ""
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "443")
	}
	d := tls.Dialer{Config: &tls.Config{ServerName: u.Hostname(), RootCAs: roots, MinVersion: tls.VersionTLS12}}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := d.DialContext(dctx, "tcp", host)
	if err != nil {
		return ""
	}
	defer c.Close()
	certs := c.(*tls.Conn).ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return ""
	}
	sum := sha256.Sum256(certs[0].RawSubjectPublicKeyInfo)
	return hex.EncodeToString(sum[:])
}

// sessionURL turns the hub URL into its session URL (RSESS-01).
func sessionURL(hubURL string) string {
	u := strings.TrimRight(hubURL, "/")
	u = strings.Replace(u, "https://", "wss://", 1)
	return u + "/v1/gitlab/session"
}

func hubTLS(e hubclient.Enrolment) (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(e.CAPEM) {
		return nil, errors.New("relay: the enrolment's hub CA holds no certificate")
	}
	u, err := url.Parse(e.HubURL)
	if err != nil {
		return nil, fmt.Errorf("relay: hub URL: %w", err)
	}
	return &tls.Config{RootCAs: pool, ServerName: u.Hostname(), MinVersion: tls.VersionTLS13, NextProtos: []string{"http/1.1"}}, nil
}

// sessionHandler is the relay's side of the hub session (RSESS-02..07).
type sessionHandler struct {
	sess   *hubsession.Client
	gate   *loop.Gate
	mgr    *loop.Manager
	log    *slog.Logger
	report func() client.RelayReport
	kick   func() // sends a heartbeat now
}

// Connected answers the welcome with the report; the session client has
// logged "hub session up" already.
func (h *sessionHandler) Connected(w client.RelayWelcome) client.RelayReport {
	return h.report()
}

func (h *sessionHandler) ServerStatus(s *client.ServerStatus) {
	h.log.Info("GitLab server status from the hub", "status", s.Status, "approval_url", s.ApprovalURL, "message", s.Message)
	h.gate.Set(h.sess.MayRequestJobs())
	// The status follows the report: restate everything held at once, as
	// the hub grants nothing to a session before its first heartbeat.
	h.kick()
}

func (h *sessionHandler) Update(u *client.Update) {
	h.log.Info("the hub offers an update; updating in place is not built yet", "release", u.Release)
}

func (h *sessionHandler) Disconnected(err error) {
	h.log.Info("hub session lost", logkey.Err, err)
	h.gate.Set(h.sess.MayRequestJobs())
}

func (h *sessionHandler) Heartbeat() client.RelayHeartbeat { return h.mgr.Heartbeat() }
