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
	"net/url"
	"strings"
	"time"

	"github.com/vk-ci/vk/hubclient"
	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/relay/gitlab"
	"github.com/vk-ci/vk/relay/hubsession"
	"github.com/vk-ci/vk/relay/loop"
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
	// update installs an offered release; nil when [hub] allow does not
	// list update.
	update func(client.Update)
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
	if h.update == nil {
		h.log.Warn("the hub offers an update; refused: "+errNoUpdates.Error(), "release", u.Release)
		return
	}
	h.log.Info("the hub offers an update", "release", u.Release)
	h.update(*u)
}

func (h *sessionHandler) Disconnected(err error) {
	h.log.Info("hub session lost", logkey.Err, err)
	h.gate.Set(h.sess.MayRequestJobs())
}

func (h *sessionHandler) Heartbeat() client.RelayHeartbeat { return h.mgr.Heartbeat() }
