package hubclient

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/reqsign"
)

// Sentinel errors.
var (
	// ErrConfig: [Config] is missing something or holds a bad value.
	ErrConfig = errors.New("hubclient: bad config")
	// ErrProtocol: the hub answered a status the endpoint does not define
	// for success, or a success body that does not decode. Not retried.
	ErrProtocol = errors.New("hubclient: unexpected answer")
	// ErrPastEnd: an output read's offset is past the output's current end
	// (416, API-38); the returned [Output] carries the length.
	ErrPastEnd = errors.New("hubclient: output offset past the end")
	// ErrTimeout: the hub did not answer within the request's own bound
	// (Config.Timeout plus any long-poll wait) while the caller's context
	// was still live. A transport error: retried (RELAY-13).
	ErrTimeout = errors.New("hubclient: no answer in time")
)

// DefaultTimeout bounds a request without a long poll; a long poll gets
// its wait on top.
const DefaultTimeout = 30 * time.Second

// maxAnswer bounds a success or error body read from the hub: an output
// read is at most 1 MiB (API-37), JSON answers far less.
const maxAnswer = client.MaxOutputRead + 64<<10

// Config configures a [Client].
type Config struct {
	// HubURL is the hub's base URL, "https://host:port" (an optional path
	// prefix is kept). Required; only https.
	HubURL string
	// Others are further hub instances' base URLs (optional; docs/ha.md):
	// when the instance in use cannot be reached, the next request goes to
	// the next of HubURL, Others... in turn, so a client whose first
	// instance died still finds the new leader.
	Others []string
	// CAPEM is the hub's CA certificate(s), PEM; the only roots trusted.
	// Required.
	CAPEM []byte
	// ServerName overrides the TLS server name; empty means the URL's host.
	ServerName string
	// Key signs every request (AUTH-11). Required.
	Key ed25519.PrivateKey
	// Principal is the enrolled ID sent in vk-relay. Required.
	Principal string
	// Clock gives the signing time and the retry timers; nil means real.
	Clock clock.Clock
	// Log receives one Debug line per request; nil discards.
	Log *slog.Logger
	// Rand draws retry jitter; nil means a generator seeded from
	// crypto/rand. Not safe for concurrent use by itself: the client
	// guards it.
	Rand *rand.Rand
	// Timeout bounds each request beyond its long-poll wait; 0 means
	// [DefaultTimeout].
	Timeout time.Duration
	// Dialer dials TCP; nil means a net.Dialer with a 30 s timeout.
	Dialer *net.Dialer
	// MaxIdleConns bounds the idle connections kept for later requests
	// (reqsign.Pool); 0 means reqsign.DefaultMaxIdle (16), negative keeps
	// none: a new connection per request.
	MaxIdleConns int
}

// Client talks to one hub as one principal. Create it with [New]. Safe for
// concurrent use.
type Client struct {
	bases   []*url.URL              // the configured hub URL, then the other instances configured
	next    atomic.Int32            // the index into bases used while no leader is followed
	leader  atomic.Pointer[url.URL] // the leader a standby named; nil: bases[next]
	http    *http.Client
	clk     clock.Clock
	log     *slog.Logger
	timeout time.Duration
	retrier *Retrier
}

// New checks cfg and returns a Client. Errors wrap [ErrConfig].
func New(cfg Config) (*Client, error) {
	u, err := parseHubURL(cfg.HubURL)
	if err != nil {
		return nil, err
	}
	if len(cfg.Key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("%w: Key is not an ed25519 private key", ErrConfig)
	}
	if cfg.Principal == "" {
		return nil, fmt.Errorf("%w: Principal missing", ErrConfig)
	}
	bases := []*url.URL{u}
	for _, o := range cfg.Others {
		ou, err := parseHubURL(o)
		if err != nil {
			return nil, err
		}
		bases = append(bases, ou)
	}
	tcfg, err := tlsConfig(cfg.CAPEM, cfg.ServerName)
	if err != nil {
		return nil, err
	}
	clk := clock.Or(cfg.Clock)
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	tr := &reqsign.Pool{Key: cfg.Key, Principal: cfg.Principal, TLSConfig: tcfg, Dialer: cfg.Dialer, Now: clk.Now,
		MaxIdle: cfg.MaxIdleConns}
	c := &Client{
		bases: bases,
		http: &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse // a redirect would change what was signed
		}},
		clk:     clk,
		log:     log.With(logkey.RelayID, cfg.Principal),
		timeout: timeout,
	}
	c.retrier = &Retrier{Clock: clk, Rand: cfg.Rand, Log: log}
	return c, nil
}

// CloseIdleConnections closes the connections kept for later requests;
// the next request dials anew.
func (c *Client) CloseIdleConnections() { c.http.CloseIdleConnections() }

// Retrier returns a [Retrier] sharing the client's clock, random source
// and logger, with the spec's bounds (1–30 s).
func (c *Client) Retrier() *Retrier { return c.retrier }

func parseHubURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%w: hub URL %q: %v", ErrConfig, s, err)
	}
	if u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("%w: hub URL %q: want https://host[:port]", ErrConfig, s)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("%w: hub URL %q: no query, fragment or user info allowed", ErrConfig, s)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

// sessionCacheSize is how many TLS sessions a client keeps: one per hub
// server name is what it uses.
const sessionCacheSize = 16

// tlsConfig returns a TLS 1.3-only configuration trusting only caPEM, with
// a session cache so that each new connection resumes the hub's last
// session instead of a full handshake (the signature's binding to its
// connection is unaffected: each resumed connection has its own exporter,
// AUTH-14).
func tlsConfig(caPEM []byte, serverName string) (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%w: CAPEM holds no certificate", ErrConfig)
	}
	return &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool, ServerName: serverName,
		ClientSessionCache: tls.NewLRUClientSessionCache(sessionCacheSize)}, nil
}

// answer is a raw answer: status, headers and the (bounded) body.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// do sends one request: path is under the base URL (already escaped),
// query may be nil, in is JSON-encoded when not nil. wait extends the
// request's deadline for long polls.
//
// A hub instance that is a standby answers 503 unavailable naming the
// leader (docs/ha.md): the request is sent there at once (the standby
// did nothing with it), and later requests go there until it cannot be
// reached. They then go back to the configured URLs (whose name may
// resolve to every instance), and from a configured URL that cannot be
// reached to the next one (Config.Others). A request that failed is not
// sent again here: the caller's retry goes to the next instance.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, in any, wait time.Duration) (*answer, error) {
	n := c.next.Load()
	base := c.bases[n]
	if l := c.leader.Load(); l != nil {
		base = l
	}
	a, err := c.doAt(ctx, base, method, path, query, in, wait)
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, ErrProtocol) { // an instance that answered was reached
			c.unreachable(base, n)
		}
		return nil, err
	}
	if l := a.standbyLeader(); l != nil && l.Host != base.Host {
		c.log.InfoContext(ctx, "hub instance is a standby; following the leader", "leader", l.String())
		c.leader.Store(l)
		return c.doAt(ctx, l, method, path, query, in, wait)
	}
	return a, nil
}

// unreachable moves later requests past base, which could not be
// reached: from a leader followed back to the configured URL in use
// (bases[n]), and from that to the next.
func (c *Client) unreachable(base *url.URL, n int32) {
	c.leader.CompareAndSwap(base, nil)
	if len(c.bases) > 1 && c.bases[n].Host == base.Host &&
		c.next.CompareAndSwap(n, (n+1)%int32(len(c.bases))) {
		c.log.Info("hub instance unreachable; trying the next one", "next", c.bases[(n+1)%int32(len(c.bases))].String())
	}
}

// standbyLeader is the leader a standby's 503 names, with the configured
// URL's path prefix; nil for any other answer.
func (a *answer) standbyLeader() *url.URL {
	if a.status != http.StatusServiceUnavailable {
		return nil
	}
	var e client.Error
	if json.Unmarshal(a.body, &e) != nil || e.Code != client.CodeUnavailable || e.Leader == "" {
		return nil
	}
	u, err := parseHubURL(e.Leader)
	if err != nil {
		return nil
	}
	return u
}

// doAt is do against one hub base URL.
func (c *Client) doAt(ctx context.Context, baseURL *url.URL, method, path string, query url.Values, in any, wait time.Duration) (*answer, error) {
	u := *baseURL
	u.RawPath = baseURL.EscapedPath() + path // path's segments are escaped already
	if p, err := url.PathUnescape(u.RawPath); err == nil {
		u.Path = p
	}
	if len(query) > 0 {
		u.RawQuery = query.Encode()
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("hubclient: encode %s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, c.timeout+wait)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, fmt.Errorf("hubclient: %s %s: %w", method, path, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	start := c.clk.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		c.log.DebugContext(ctx, "hub request failed", "method", method, "path", path, logkey.Err, err)
		return nil, c.timedOut(parent, ctx, fmt.Errorf("hubclient: %s %s: %w", method, path, err))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return nil, c.timedOut(parent, ctx, fmt.Errorf("hubclient: %s %s: read answer: %w", method, path, err))
	}
	if len(b) > maxAnswer {
		return nil, fmt.Errorf("%w: %s %s: answer over %d bytes", ErrProtocol, method, path, maxAnswer)
	}
	c.log.DebugContext(ctx, "hub request", "method", method, "path", path, logkey.Status, resp.StatusCode,
		"elapsed", c.clk.Now().Sub(start))
	return &answer{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// timedOut replaces err by an [ErrTimeout] error when the request's own
// deadline ended it while the caller's context is live, so that it reads
// as a transport error rather than the caller's cancellation.
func (c *Client) timedOut(parent, reqCtx context.Context, err error) error {
	if parent.Err() == nil && reqCtx.Err() != nil {
		return fmt.Errorf("%w (%v): %v", ErrTimeout, c.timeout, err)
	}
	return err
}

// DecodeError turns an error answer into a [*client.StatusError]: the
// body is decoded leniently (unknown fields ignored, unknown codes read as
// other, API-55); a missing or unreadable body gives code other and the
// status text as message. A Retry-After header in seconds fills
// RetryAfterSecs when the body has none. Never fails; header may be nil.
func DecodeError(status int, header http.Header, body []byte) *client.StatusError {
	se := &client.StatusError{Status: status}
	var e client.Error
	if err := json.Unmarshal(body, &e); err != nil || e.Code == "" {
		e = client.Error{Error: http.StatusText(status), Code: client.CodeOther}
		if t := strings.TrimSpace(string(body)); t != "" && err != nil {
			e.Error = fmt.Sprintf("%s: %.200q", http.StatusText(status), t)
		}
	}
	if e.RetryAfterSecs < 0 {
		e.RetryAfterSecs = 0
	}
	if e.RetryAfterSecs == 0 && header != nil {
		if n, err := strconv.Atoi(strings.TrimSpace(header.Get("Retry-After"))); err == nil && n > 0 {
			e.RetryAfterSecs = n
		}
	}
	se.Body = e
	return se
}

// expect returns nil when a's status is one of ok, else the decoded error
// answer (a 4xx/5xx) or an ErrProtocol error (anything else).
func (a *answer) expect(what string, ok ...int) error {
	for _, s := range ok {
		if a.status == s {
			return nil
		}
	}
	if a.status >= 400 {
		return fmt.Errorf("hubclient: %s: %w", what, DecodeError(a.status, a.header, a.body))
	}
	return fmt.Errorf("%w: %s: status %d", ErrProtocol, what, a.status)
}

// decode decodes a success body leniently (API-55: unknown fields ignored).
func (a *answer) decode(what string, v any) error {
	if err := json.Unmarshal(a.body, v); err != nil {
		return fmt.Errorf("%w: %s: status %d body: %v", ErrProtocol, what, a.status, err)
	}
	return nil
}

// seg escapes one path segment (an ID from the hub or the caller).
func seg(s string) string { return url.PathEscape(s) }

// waitQuery returns ?wait=<secs> (capped at 60, API-10) plus extra pairs.
func waitQuery(wait time.Duration, kv ...string) url.Values {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	if secs := waitSecs(wait); secs > 0 {
		q.Set("wait", strconv.Itoa(secs))
	}
	return q
}

// waitSecs rounds wait up to whole seconds, capped at 60 (API-10).
func waitSecs(wait time.Duration) int {
	if wait <= 0 {
		return 0
	}
	return min(int((wait+time.Second-1)/time.Second), client.MaxWaitSecs)
}
