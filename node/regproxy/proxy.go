package regproxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/logkey"
)

// Host is the name the guest reaches the proxy by on its switch network.
const Host = "registry.vk"

// URL is the proxy's base URL as the job's steps see it (XFER-22).
const URL = "http://" + Host

// Forwarded path prefixes (XFER-20).
const (
	PrefixDistribution = "/v2/"
	PrefixLock         = "/lock/"
	PrefixFiles        = "/dav/files/"
)

// FileMethods are the methods that pass under [PrefixFiles] (XFER-21), in
// the order the Allow header of a 405 lists them.
var FileMethods = []string{
	http.MethodGet, http.MethodHead, "PROPFIND", http.MethodPut, "MKCOL",
	http.MethodDelete, http.MethodOptions,
}

// Refusal reasons. A refusing proxy answers every request 403 with the
// reason's text in the body; they are also returned by [Proxy.Refusal].
var (
	// ErrNoToken: the job has no registry token (XFER-19).
	ErrNoToken = errors.New("regproxy: job has no registry token")
	// ErrLocalRunner: the job came from a local gitlab-runner, which under
	// guest_credential = "job" reaches the registry only by its own
	// means (XFER-19).
	ErrLocalRunner = errors.New("regproxy: jobs from a local gitlab-runner get no registry access")
	// ErrTokenExpired: the job registry token is past its expiry.
	ErrTokenExpired = errors.New("regproxy: job registry token expired")
)

// Configuration and forwarding errors.
var (
	// ErrBadUpstream is returned by [New] when Config.Upstream is not an
	// http(s) URL of a registry's root.
	ErrBadUpstream = errors.New("regproxy: bad upstream registry URL")
	// ErrRedirectDowngrade: a redirect from https to http was refused.
	ErrRedirectDowngrade = errors.New("regproxy: redirect from https to http refused")
	// ErrTooManyRedirects: more than [MaxRedirects] cross-origin hops.
	ErrTooManyRedirects = errors.New("regproxy: too many redirects")
)

// MaxRedirects bounds the cross-origin redirects the proxy follows for one
// GET or HEAD.
const MaxRedirects = 5

// Token is a job registry token. It logs as "[redacted]".
type Token string

// LogValue implements [slog.LogValuer]: a token is never logged.
func (Token) LogValue() slog.Value { return slog.StringValue("[redacted]") }

// Config configures a job's proxy.
type Config struct {
	// Upstream is the node's registry base URL ([registry] url), e.g.
	// https://registry.example.com: http or https, the registry's root,
	// no query. User info in it is stripped and never sent.
	Upstream string
	// Token is the job's registry token, sent as a bearer token on every
	// forwarded request. "" means the job has none: [New] returns a
	// proxy refusing everything with [ErrNoToken].
	Token Token
	// Expires is when the token stops working; from then on every request
	// is refused with [ErrTokenExpired]. Zero means no known expiry.
	Expires time.Time
	// Transport carries forwarded requests; nil means a clone of
	// http.DefaultTransport. It must not add credentials of its own.
	Transport http.RoundTripper
	// Clock tells the time for Expires; nil means real time.
	Clock clock.Clock
	// Log receives refusals (Debug) and upstream failures (Warn); nil
	// discards. Give it the job's attributes (logkey.JobID).
	Log *slog.Logger
}

// Proxy is one job's guest registry proxy. It is safe for concurrent use.
// The zero value refuses every request with [ErrNoToken].
type Proxy struct {
	refusal  error // non-nil: every request is refused with it
	upstream *url.URL
	token    Token
	expires  time.Time
	clock    clock.Clock
	log      *slog.Logger
	rp       *httputil.ReverseProxy
}

// Refusing returns a proxy that answers every request 403 with reason
// (normally [ErrNoToken] or [ErrLocalRunner]; nil means ErrNoToken).
func Refusing(reason error, log *slog.Logger) *Proxy {
	if reason == nil {
		reason = ErrNoToken
	}
	return &Proxy{refusal: reason, log: log}
}

// New returns the proxy for a job. With an empty cfg.Token it is
// Refusing(ErrNoToken, cfg.Log) and cfg.Upstream is not looked at;
// otherwise a bad Upstream is an error wrapping [ErrBadUpstream].
func New(cfg Config) (*Proxy, error) {
	if cfg.Token == "" {
		return Refusing(ErrNoToken, cfg.Log), nil
	}
	up, err := parseUpstream(cfg.Upstream)
	if err != nil {
		return nil, err
	}
	p := &Proxy{upstream: up, token: cfg.Token, expires: cfg.Expires, clock: cfg.Clock, log: cfg.Log}
	tr := cfg.Transport
	if tr == nil {
		tr = http.DefaultTransport.(*http.Transport).Clone()
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite:        p.rewrite,
		Transport:      &follower{next: tr, origin: origin(up)},
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.upstreamError,
		ErrorLog:       log.New(logWriter{p.logger()}, "", 0),
	}
	return p, nil
}

func parseUpstream(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		// Not err itself: a url.Error repeats the URL, user info and all.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("%w: %v", ErrBadUpstream, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("%w: %q: scheme must be http or https", ErrBadUpstream, redactURL(u))
	case u.Host == "":
		return nil, fmt.Errorf("%w: %q: no host", ErrBadUpstream, redactURL(u))
	case u.Path != "" && u.Path != "/":
		return nil, fmt.Errorf("%w: %q: must be the registry's root, not a path", ErrBadUpstream, redactURL(u))
	case u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
		return nil, fmt.Errorf("%w: %q: no query or fragment", ErrBadUpstream, redactURL(u))
	}
	return &url.URL{Scheme: u.Scheme, Host: u.Host}, nil // user info dropped
}

func redactURL(u *url.URL) string {
	c := *u
	c.User = nil
	return c.String()
}

// origin is u's lower-case scheme://host[:port], without a default port.
func origin(u *url.URL) string {
	host := strings.ToLower(u.Host)
	switch scheme := strings.ToLower(u.Scheme); {
	case scheme == "http" && strings.HasSuffix(host, ":80"), scheme == "https" && strings.HasSuffix(host, ":443"):
		host = host[:strings.LastIndexByte(host, ':')]
	}
	return strings.ToLower(u.Scheme) + "://" + host
}

func (p *Proxy) logger() *slog.Logger {
	if p.log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return p.log
}

// Refusal returns why the proxy refuses every request right now (the
// reason it was built with, or [ErrTokenExpired] once the token expired),
// or nil when it forwards.
func (p *Proxy) Refusal() error {
	switch {
	case p.refusal != nil:
		return p.refusal
	case p.rp == nil:
		return ErrNoToken // zero value
	case !p.expires.IsZero() && !clock.Or(p.clock).Now().Before(p.expires):
		return ErrTokenExpired
	}
	return nil
}

// ServeHTTP refuses or forwards one guest request; see the package doc for
// the rules.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := p.Refusal(); err != nil {
		p.refuse(w, r, http.StatusForbidden, err.Error(), nil)
		return
	}
	status, msg, allow := check(r.Method, r.URL.Path)
	if status != 0 {
		p.refuse(w, r, status, msg, allow)
		return
	}
	p.rp.ServeHTTP(w, r)
}

// check decides a request by its method and decoded path alone: 0 means
// forward; otherwise the status, message and (for 405) allowed methods.
func check(method, p string) (status int, msg string, allow []string) {
	if method == http.MethodConnect || method == http.MethodTrace {
		return http.StatusMethodNotAllowed, method + " is not proxied", nil
	}
	if !canonical(p) {
		return http.StatusBadRequest, "not a canonical path", nil
	}
	switch {
	case strings.HasPrefix(p, PrefixDistribution), strings.HasPrefix(p, PrefixLock):
		return 0, "", nil
	case strings.HasPrefix(p, PrefixFiles):
		for _, m := range FileMethods {
			if method == m {
				return 0, "", nil
			}
		}
		return http.StatusMethodNotAllowed, method + " is not allowed under " + PrefixFiles, FileMethods
	}
	return http.StatusNotFound, "only " + PrefixDistribution + ", " + PrefixLock + " and " + PrefixFiles + " are proxied", nil
}

// canonical reports whether p is an absolute, clean path: no dot
// segments, no empty segments (but a trailing slash), no backslashes or
// control bytes.
func canonical(p string) bool {
	if !strings.HasPrefix(p, "/") {
		return false
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c < 0x20 || c == 0x7f || c == '\\' {
			return false
		}
	}
	trimmed := p
	if len(p) > 1 {
		trimmed = strings.TrimSuffix(p, "/")
	}
	return path.Clean(p) == trimmed
}

// refuse answers a request the proxy does not forward.
func (p *Proxy) refuse(w http.ResponseWriter, r *http.Request, status int, msg string, allow []string) {
	msg = "vk registry proxy: " + strings.TrimPrefix(msg, "regproxy: ")
	p.logger().Debug("registry proxy refused a request", "method", r.Method, "path", r.URL.Path, logkey.Status, status, "reason", msg)
	h := w.Header()
	if allow != nil {
		h.Set("Allow", strings.Join(allow, ", "))
	}
	h.Set("X-Content-Type-Options", "nosniff")
	if strings.HasPrefix(r.URL.Path, PrefixDistribution) {
		code := map[int]string{
			http.StatusForbidden:        "DENIED",
			http.StatusMethodNotAllowed: "UNSUPPORTED",
			http.StatusBadRequest:       "UNSUPPORTED",
		}[status]
		if code == "" {
			code = "UNKNOWN"
		}
		type detail struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		}
		body, _ := json.Marshal(struct {
			Errors []detail `json:"errors"`
		}{[]detail{{code, msg}}})
		h.Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(status)
		w.Write(append(body, '\n'))
		return
	}
	h.Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		fmt.Fprintln(w, msg)
	}
}

// rewrite builds the outbound request: upstream origin, the checked path,
// the job's token and nothing of the guest's credentials.
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	in := pr.In
	pr.Out.URL = &url.URL{
		Scheme:   p.upstream.Scheme,
		Host:     p.upstream.Host,
		Path:     in.URL.Path,
		RawQuery: in.URL.RawQuery,
	}
	pr.Out.Host = ""
	pr.Out.Trailer = nil // the guest's trailers could carry anything
	h := pr.Out.Header
	for _, k := range []string{"Authorization", "Proxy-Authorization", "Cookie", "Connection", "Upgrade", "Destination", "Forwarded"} {
		h.Del(k)
	}
	h.Set("Authorization", "Bearer "+string(p.token))
}

// modifyResponse rewrites headers naming the registry's origin to
// [URL], so the guest keeps talking to the proxy. The guest's Host header
// is not used: nothing the guest sends is reflected.
func (p *Proxy) modifyResponse(resp *http.Response) error {
	g := URL
	up := origin(p.upstream)
	for _, k := range []string{"Location", "Content-Location"} {
		if v := resp.Header.Get(k); v != "" {
			resp.Header.Set(k, rewriteURL(v, up, g))
		}
	}
	if links := resp.Header.Values("Link"); len(links) > 0 {
		out := make([]string, len(links))
		for i, l := range links {
			out[i] = rewriteLink(l, up, g)
		}
		resp.Header["Link"] = out
	}
	return nil
}

// rewriteURL returns v with the upstream origin replaced by the guest's;
// other URLs (relative, other origins) are returned unchanged.
func rewriteURL(v, up, guest string) string {
	u, err := url.Parse(v)
	if err != nil || u.Host == "" {
		return v
	}
	if origin(u) != up {
		return v
	}
	u.User = nil
	return guest + u.RequestURI()
}

// rewriteLink rewrites the <URL> parts of one Link header value.
func rewriteLink(v, up, guest string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(v, '<')
		if i < 0 {
			break
		}
		j := strings.IndexByte(v[i:], '>')
		if j < 0 {
			break
		}
		b.WriteString(v[:i+1])
		b.WriteString(rewriteURL(v[i+1:i+j], up, guest))
		b.WriteByte('>')
		v = v[i+j+1:]
	}
	b.WriteString(v)
	return b.String()
}

func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return // the guest went away
	}
	p.logger().Warn("registry proxy: upstream request failed", "method", r.Method, "path", r.URL.Path, logkey.Err, err)
	msg := "registry unreachable"
	switch {
	case errors.Is(err, ErrRedirectDowngrade):
		msg = ErrRedirectDowngrade.Error()
	case errors.Is(err, ErrTooManyRedirects):
		msg = ErrTooManyRedirects.Error()
	}
	p.refuse(w, r, http.StatusBadGateway, msg, nil)
}

// logWriter sends ReverseProxy's own log lines (body copy errors) to slog.
type logWriter struct{ l *slog.Logger }

func (w logWriter) Write(b []byte) (int, error) {
	w.l.Warn("registry proxy: " + strings.TrimSpace(string(b)))
	return len(b), nil
}
