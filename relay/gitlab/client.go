package gitlab

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/internal/version"
)

// Header names of GitLab's runner API, in canonical form.
const (
	HeaderRunnerToken    = "Runner-Token"                   // runner token: verify and job requests only
	HeaderJobToken       = "Job-Token"                      // job token: per-job endpoints
	HeaderRequestID      = "X-Request-Id"                   // correlation ID, both directions
	HeaderLastUpdate     = "X-Gitlab-Last-Update"           // queue version for long polling
	HeaderBuildsPolling  = "Gitlab-Ci-Builds-Polling"       // "yes": Workhorse long-polls job requests
	HeaderJobStatus      = "Job-Status"                     // the job's state in GitLab
	HeaderUpdateInterval = "X-Gitlab-Trace-Update-Interval" // trace update interval, seconds
	HeaderRetryAfter     = "Retry-After"                    // wait before retrying, seconds
	HeaderRateLimitReset = "Ratelimit-Resettime"            // end of a rate limit, HTTP date
)

// correlationKey is the log attribute for GitLab's X-Request-Id; it has no
// internal/logkey constant (logkey.RequestID names hub idempotency keys).
const correlationKey = "correlation_id"

// maxErrorBody bounds how much of a non-2xx body is read for its message,
// and maxJobBody how much of a 201 job body is read at all.
const (
	maxErrorBody = 64 << 10
	maxJobBody   = 32 << 20
)

// Errors returned by the client. Outcomes that are answers GitLab is
// documented to give (204, 403, 429, …) are not errors; see each method.
var (
	// ErrBadURL: Config.URL is not an absolute http or https URL.
	ErrBadURL = errors.New("gitlab: bad GitLab URL")
	// ErrUnexpectedStatus: GitLab answered a status the endpoint's table
	// does not list. The error is a *StatusError.
	ErrUnexpectedStatus = errors.New("gitlab: unexpected status")
)

// StatusError is an answer outside an endpoint's table. errors.Is(err,
// ErrUnexpectedStatus) is true for it.
type StatusError struct {
	// Method and Path of the request, e.g. "PUT", "jobs/42".
	Method, Path string
	// Status is the HTTP status code.
	Status int
	// Message is GitLab's {"message": …} text, or "" when none.
	Message string
}

// Error implements error.
func (e *StatusError) Error() string {
	s := fmt.Sprintf("gitlab: %s %s: %d %s", e.Method, e.Path, e.Status, http.StatusText(e.Status))
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Is reports whether target is ErrUnexpectedStatus.
func (e *StatusError) Is(target error) bool { return target == ErrUnexpectedStatus }

// Doer sends one HTTP request. *http.Client implements it; [RetryDoer]
// decorates one.
type Doer interface {
	Do(req *http.Request) (*http.Response, error)
}

// Config configures a [Client]. Only URL is required.
type Config struct {
	// URL is the GitLab URL as configured, e.g. "https://gitlab.example.com"
	// or ".../ci"; a trailing "/" and "/ci" are dropped and "/api/v4/" is
	// appended, as gitlab-runner does.
	URL string
	// Doer sends requests; nil means an *http.Client with gitlab-runner's
	// timeouts (dial 30 s, TLS handshake 10 s, response headers 10 min,
	// whole request 60 min) trusting RootCAs. Wrap it in a [RetryDoer] for
	// gitlab-runner's retry layer.
	Doer Doer
	// RootCAs are the CAs trusted for GitLab (the runner's tls_ca_file);
	// nil means the system roots. Ignored when Doer is set.
	RootCAs *x509.CertPool
	// Info is sent with verify, job requests and updates; nil means
	// [DefaultInfo].
	Info *Info
	// Logger receives request logs; nil discards them.
	Logger *slog.Logger
	// UserAgent; "" means "vk-gitlab <version> (<go version>; <os>/<arch>)".
	UserAgent string
	// Clock reads the time for RateLimit-ResetTime; nil means the real clock.
	Clock clock.Clock
}

// Client speaks GitLab's runner API for one GitLab server (GL-01). Every
// method takes the caller's ctx and returns a typed outcome and an error
// (STYLE C11). It is safe for concurrent use.
//
// The runner token goes only to /runners/verify and /jobs/request
// (RUNNER-TOKEN header and body); per-job endpoints get the job token only
// (JOB-TOKEN header, and body for PUT) (AUTH-01, AUTH-03).
type Client struct {
	base *url.URL // .../api/v4/
	doer Doer
	info Info
	log  *slog.Logger
	ua   string
	clk  clock.Clock

	mu         sync.Mutex
	lastUpdate map[string]string // runner token → last X-GitLab-Last-Update; guarded by mu
}

// New returns a Client for cfg. It fails with ErrBadURL when cfg.URL is
// not an absolute http or https URL.
func New(cfg Config) (*Client, error) {
	base, err := apiBase(cfg.URL)
	if err != nil {
		return nil, err
	}
	c := &Client{
		base:       base,
		doer:       cfg.Doer,
		log:        cfg.Logger,
		ua:         cfg.UserAgent,
		clk:        clock.Or(cfg.Clock),
		lastUpdate: map[string]string{},
	}
	if c.doer == nil {
		c.doer = defaultHTTPClient(cfg.RootCAs)
	}
	if cfg.Info != nil {
		c.info = *cfg.Info
	} else {
		c.info = DefaultInfo()
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.ua == "" {
		c.ua = fmt.Sprintf("%s %s (%s; %s/%s)", InfoName, version.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	}
	return c, nil
}

// apiBase turns a configured GitLab URL into its API base.
func apiBase(raw string) (*url.URL, error) {
	s := strings.TrimRight(raw, "/")
	s = strings.TrimSuffix(s, "/ci")
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrBadURL, raw, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: %q: only absolute http or https URLs are supported", ErrBadURL, raw)
	}
	u.Path = strings.TrimRight(u.Path, "/") + "/api/v4/"
	u.RawPath = ""
	u.RawQuery, u.Fragment = "", ""
	return u, nil
}

// DefaultHTTPClient is the Doer New uses when Config.Doer is nil, for a
// caller that wraps it (the relay counts requests for its metrics).
func DefaultHTTPClient(roots *x509.CertPool) *http.Client { return defaultHTTPClient(roots) }

// MaxIdleConnsPerHost is how many idle connections to GitLab the default
// client keeps for later requests. The relay has many requests to GitLab
// in flight at once (each runner's request loops, each job's trace
// patches and updates); Go's default of 2 closed all but two of them
// whenever they ended together, so a job's commit often paid a new TCP
// and TLS handshake on the hand-off's path. Idle connections still close
// after the transport's idle timeout (90 s).
const MaxIdleConnsPerHost = 64

func defaultHTTPClient(roots *x509.CertPool) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	tr.MaxIdleConnsPerHost = MaxIdleConnsPerHost
	tr.TLSHandshakeTimeout = 10 * time.Second
	tr.ResponseHeaderTimeout = 10 * time.Minute
	if roots != nil {
		tr.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: tr, Timeout: 60 * time.Minute}
}

func (c *Client) now() time.Time { return c.clk.Now() }

// BaseURL returns the API base URL, ending in "/api/v4/".
func (c *Client) BaseURL() string { return c.base.String() }

// Info returns the runner info the client sends.
func (c *Client) Info() Info { return c.info }

// LastUpdate returns the X-GitLab-Last-Update last seen for the runner
// with this token, or "" before any (GL-03). Memory only: after a restart
// the first request goes without it, as gitlab-runner's does.
func (c *Client) LastUpdate(runnerToken string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastUpdate[runnerToken]
}

// SetLastUpdate records v as the runner's last_update; "" is ignored (an
// answer without the header keeps the previous value).
func (c *Client) SetLastUpdate(runnerToken, v string) {
	if v == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastUpdate[runnerToken] = v
}

// newCorrelationID returns 32 random hex digits, the shape of
// gitlab-runner's X-Request-Id (a UUIDv4 without dashes).
func newCorrelationID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return hex.EncodeToString(b[:])
}

// call is one request to the API.
type call struct {
	method      string
	path        string // relative to the API base, e.g. "jobs/42/trace"
	query       url.Values
	body        []byte
	contentType string
	accept      string
	header      http.Header // auth headers and extras
}

// answer is what came back.
type answer struct {
	status        int
	header        http.Header
	body          []byte // read up to the call's limit
	correlationID string // the server's X-Request-Id, else ours
	duration      time.Duration
}

// send performs cl and reads at most limit bytes of the body. It returns
// an error only when no answer was had (transport error, ctx ended).
func (c *Client) send(ctx context.Context, cl call, limit int64) (answer, error) {
	u := *c.base
	u.Path += cl.path
	u.RawQuery = cl.query.Encode()
	req, err := http.NewRequestWithContext(ctx, cl.method, u.String(), bytes.NewReader(cl.body))
	if err != nil {
		return answer{}, fmt.Errorf("gitlab: %s %s: %w", cl.method, cl.path, err)
	}
	if cl.body == nil {
		req.Body, req.GetBody, req.ContentLength = http.NoBody, nil, 0
	}
	for k, vs := range cl.header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	ours := newCorrelationID()
	req.Header.Set(HeaderRequestID, ours)
	req.Header.Set("User-Agent", c.ua)
	if cl.contentType != "" {
		req.Header.Set("Content-Type", cl.contentType)
	}
	if cl.accept != "" {
		req.Header.Set("Accept", cl.accept)
	}
	start := time.Now()
	resp, err := c.doer.Do(req)
	if err != nil {
		c.log.LogAttrs(ctx, slog.LevelWarn, "gitlab request failed",
			slog.String("method", cl.method), slog.String("path", cl.path),
			slog.String(correlationKey, ours), slog.Any(logkey.Err, err))
		return answer{}, fmt.Errorf("gitlab: %s %s: %w", cl.method, cl.path, err)
	}
	defer resp.Body.Close()
	body, rerr := io.ReadAll(io.LimitReader(resp.Body, limit))
	a := answer{
		status:        resp.StatusCode,
		header:        resp.Header,
		body:          body,
		correlationID: resp.Header.Get(HeaderRequestID),
		duration:      time.Since(start),
	}
	if a.correlationID == "" {
		a.correlationID = ours
	}
	c.log.LogAttrs(ctx, slog.LevelDebug, "gitlab request",
		slog.String("method", cl.method), slog.String("path", cl.path),
		slog.Int(logkey.Status, a.status), slog.String(correlationKey, a.correlationID),
		slog.String("request_correlation_id", ours), slog.Duration("duration", a.duration))
	if rerr != nil && a.status >= 200 && a.status < 300 {
		return a, fmt.Errorf("gitlab: %s %s: reading body: %w", cl.method, cl.path, rerr)
	}
	return a, nil
}

// statusError builds the *StatusError for an answer outside the table,
// with GitLab's {"message": …} when there is one.
func statusError(cl call, a answer) *StatusError {
	return &StatusError{Method: cl.method, Path: cl.path, Status: a.status, Message: errorMessage(a.body)}
}

// errorMessage extracts GitLab's {"message": string | {field: [msgs]}}.
func errorMessage(body []byte) string {
	var m struct {
		Message json.RawMessage `json:"message"`
	}
	if json.Unmarshal(body, &m) != nil || len(m.Message) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(m.Message, &s) == nil {
		return s
	}
	var fields map[string][]string
	if json.Unmarshal(m.Message, &fields) == nil {
		var parts []string
		for k, v := range fields {
			parts = append(parts, k+" "+strings.Join(v, ", "))
		}
		return strings.Join(parts, "; ")
	}
	return string(m.Message)
}

func runnerTokenHeader(token string) http.Header {
	h := http.Header{}
	h.Set(HeaderRunnerToken, token)
	return h
}

func jobTokenHeader(token string) http.Header {
	h := http.Header{}
	h.Set(HeaderJobToken, token)
	return h
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		// Only our own request types are encoded here; they always encode.
		panic(fmt.Sprintf("gitlab: encoding %T: %v", v, err))
	}
	return b
}

func isJSON(h http.Header) bool {
	ct := h.Get("Content-Type")
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return strings.EqualFold(strings.TrimSpace(ct), "application/json")
}

// CleanURL returns rawURL without user info, query and fragment, for logs
// (gitlab-runner's url_helpers.CleanURL); "" when it does not parse.
func CleanURL(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return ""
	}
	u.User = nil
	u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = "", false, "", ""
	return u.String()
}

// StripCredentials returns rawURL without its user info (the
// gitlab-ci-token:<job token>@ of git_info.repo_url), everything else kept
// (SPEC-07). It fails when rawURL does not parse as a URL.
func StripCredentials(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Parse's error quotes the URL, token included: keep only the cause.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return "", fmt.Errorf("gitlab: repository URL does not parse: %w", err)
	}
	u.User = nil
	return u.String(), nil
}
