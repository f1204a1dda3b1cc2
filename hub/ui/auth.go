package ui

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"log/slog"
	"net"
	"net/http"
	"net/netip"

	"github.com/vk-ci/vk/internal/logkey"
)

// Auth decides who may use the UI. Authenticate returns the operator's
// name (for the audit log) and true, or false to refuse the request. It
// is called for every request, concurrently.
type Auth interface {
	Authenticate(r *http.Request) (operator string, ok bool)
}

// challenger is an Auth that asks the browser for credentials when it
// refuses (401 with WWW-Authenticate) instead of answering 403.
type challenger interface {
	challenge() string
}

// LoopbackOnly admits requests whose peer address is loopback (127.0.0.0/8
// or ::1) and refuses all others (403). It trusts the TCP peer only, never
// X-Forwarded-For: behind a reverse proxy on the same host every request
// looks local, so use [BasicAuth] there. The zero value is ready to use.
type LoopbackOnly struct {
	// Operator is the name written to the audit log; empty means
	// "operator@loopback".
	Operator string
}

// Authenticate implements [Auth].
func (a LoopbackOnly) Authenticate(r *http.Request) (string, bool) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.Unmap().IsLoopback() {
		return "", false
	}
	return cmp.Or(a.Operator, "operator@loopback"), true
}

// BasicAuth admits requests whose HTTP Basic password is Token, compared
// in constant time (of SHA-256 digests, so the length leaks neither);
// others are answered 401 with a Basic challenge. The user name is the
// operator's name in the audit log ("operator" when empty); with User
// set it must match too. An empty Token admits nobody.
type BasicAuth struct {
	// User, when set, is the only user name accepted.
	User string
	// Token is the shared secret; never logged (see LogValue).
	Token string
	// Realm is shown by the browser; empty means "vk-hub".
	Realm string
}

// Authenticate implements [Auth].
func (a BasicAuth) Authenticate(r *http.Request) (string, bool) {
	user, pass, ok := r.BasicAuth()
	if !ok || a.Token == "" {
		return "", false
	}
	want, got := sha256.Sum256([]byte(a.Token)), sha256.Sum256([]byte(pass))
	good := subtle.ConstantTimeCompare(want[:], got[:]) == 1
	if a.User != "" {
		wu, gu := sha256.Sum256([]byte(a.User)), sha256.Sum256([]byte(user))
		good = subtle.ConstantTimeCompare(wu[:], gu[:]) == 1 && good
	}
	if !good {
		return "", false
	}
	return cmp.Or(user, "operator"), true
}

// LogValue keeps the token out of logs.
func (a BasicAuth) LogValue() slog.Value {
	return slog.GroupValue(slog.String("user", a.User), slog.String("token", "REDACTED"))
}

func (a BasicAuth) challenge() string {
	return `Basic realm="` + cmp.Or(a.Realm, "vk-hub") + `", charset="UTF-8"`
}

type operatorKey struct{}

// operatorOf returns the operator Authenticate admitted.
func operatorOf(ctx context.Context) string {
	op, _ := ctx.Value(operatorKey{}).(string)
	return op
}

// authenticate admits a request through the configured Auth, or refuses
// it before any page or form runs.
func (s *server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		securityHeaders(w.Header())
		op, ok := s.cfg.Operators.Authenticate(r)
		if !ok {
			status := http.StatusForbidden
			if c, isC := s.cfg.Operators.(challenger); isC {
				w.Header().Set("WWW-Authenticate", c.challenge())
				status = http.StatusUnauthorized
			}
			// Routine: a browser's first request carries no credentials
			// and gets the Basic challenge.
			s.log.InfoContext(r.Context(), "ui request refused", "remote", r.RemoteAddr, "path", r.URL.Path, logkey.Status, status)
			http.Error(w, http.StatusText(status), status)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), operatorKey{}, op)))
	})
}

// securityHeaders forbid scripts, framing and foreign form targets, and
// caching of pages.
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
}
