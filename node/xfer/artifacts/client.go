// Package artifacts moves job artifacts between the node and GitLab with the
// job's own tokens: uploads (`POST /api/v4/jobs/:id/artifacts`, XFER-01..05)
// and dependency downloads (`GET /api/v4/jobs/<dep id>/artifacts` with the
// dependency's token, XFER-06, AUTH-04).
//
// Uploads stream: the archive (zip or gzip) is written straight into the
// multipart body through an io.Pipe and regenerated from the tree when a
// retry or a 307 needs the body again, so no upload touches disk; the
// stream is still capped at [fileset.MaxArchiveBytes] (XFER-25). A
// downloaded zip is spooled to a temp file (zip needs random access) under
// the same cap, then extracted safely.
//
// Redirects: an upload follows only 307 and 308 (so a POST stays a POST), a
// download any redirect (GitLab sends object storage links); a
// redirect from https to http is refused; the JOB-TOKEN header goes only to
// GitLab's own origin (scheme, host and port of [Client.BaseURL]) — unlike
// gitlab-runner (XFER-03).
//
// Retries (choices documented here, the spec names only 413 and 503):
// 503 is retried after Retry-After (seconds or HTTP date; 5 s when absent;
// each wait capped at 60 s) up to 6 attempts in all; connection errors and
// 500/502/504 up to 3 attempts 1 s apart; 401, 403, 404 and 413 are final
// (413 → outcome too_large) (XFER-04).
package artifacts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/node/xfer/fileset"
)

var (
	// ErrInsecureRedirect is returned when GitLab redirects an https
	// request to http.
	ErrInsecureRedirect = errors.New("artifacts: refusing redirect from https to http")
	// ErrTooManyRedirects is returned after 10 redirects.
	ErrTooManyRedirects = errors.New("artifacts: too many redirects")
	// ErrStatus is wrapped by errors describing an unexpected HTTP status.
	ErrStatus = errors.New("artifacts: unexpected status")
)

// Retry policy defaults; see the package doc.
const (
	maxAttempts503      = 6
	maxAttemptsOther    = 3
	defaultRetryAfter   = 5 * time.Second
	maxRetryAfter       = 60 * time.Second
	otherRetryDelay     = time.Second
	maxRedirects        = 10
	responseHeaderLimit = 10 * time.Minute
)

// Client talks to one GitLab instance. The zero value is not usable: set
// BaseURL.
type Client struct {
	// BaseURL is GitLab's URL (e.g. "https://gitlab.example.com" or with a
	// relative path "https://example.com/gitlab"); API paths are appended
	// to it, and its origin is the only one that receives job tokens.
	BaseURL string
	// Transport carries the requests; nil means a clone of
	// http.DefaultTransport. Set TLSClientConfig.RootCAs there for a
	// private GitLab CA.
	Transport http.RoundTripper
	// Clock times retry waits; nil means real time.
	Clock clock.Clock
	// Log receives debug lines; nil discards.
	Log *slog.Logger

	// maxArchive overrides fileset.MaxArchiveBytes in tests.
	maxArchive int64
}

func (c *Client) archiveCap() int64 {
	if c.maxArchive > 0 {
		return c.maxArchive
	}
	return fileset.MaxArchiveBytes
}

func (c *Client) log() *slog.Logger {
	if c.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return c.Log
}

func (c *Client) endpoint(jobID int64, q url.Values) (*url.URL, error) {
	u, err := url.Parse(strings.TrimRight(c.BaseURL, "/"))
	if err != nil {
		return nil, fmt.Errorf("artifacts: base url: %w", err)
	}
	u.Path += "/api/v4/jobs/" + strconv.FormatInt(jobID, 10) + "/artifacts"
	u.RawQuery = q.Encode()
	return u, nil
}

func sameOrigin(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(hostPort(a), hostPort(b))
}

func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return strings.ToLower(u.Host)
	}
	switch strings.ToLower(u.Scheme) {
	case "https":
		return strings.ToLower(u.Hostname()) + ":443"
	case "http":
		return strings.ToLower(u.Hostname()) + ":80"
	}
	return strings.ToLower(u.Host)
}

// httpClient builds the client that enforces the redirect rules for
// requests carrying token.
func (c *Client) httpClient() (*http.Client, error) {
	base, err := url.Parse(c.BaseURL)
	if err != nil {
		return nil, fmt.Errorf("artifacts: base url: %w", err)
	}
	tr := c.Transport
	if tr == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.ResponseHeaderTimeout = responseHeaderLimit
		tr = t
	}
	return &http.Client{
		Transport: tr,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= maxRedirects {
				return ErrTooManyRedirects
			}
			prev := via[len(via)-1]
			if via[0].Method != http.MethodGet && req.Response != nil && req.Response.StatusCode != http.StatusTemporaryRedirect && req.Response.StatusCode != http.StatusPermanentRedirect {
				// 301/302/303 would turn the POST into a GET: stop and
				// report the status instead.
				return http.ErrUseLastResponse
			}
			if strings.EqualFold(prev.URL.Scheme, "https") && !strings.EqualFold(req.URL.Scheme, "https") {
				return fmt.Errorf("%w: %s", ErrInsecureRedirect, redactURL(req.URL))
			}
			if !sameOrigin(base, req.URL) {
				req.Header.Del("JOB-TOKEN")
			}
			return nil
		},
	}, nil
}

func redactURL(u *url.URL) string {
	v := *u
	v.RawQuery, v.User = "", nil
	return v.String()
}

// retryAfter parses a Retry-After header (seconds or HTTP date) relative to
// now, defaulting and capping per the package policy.
func retryAfter(h string, now time.Time) time.Duration {
	d := defaultRetryAfter
	if h != "" {
		if s, err := strconv.Atoi(strings.TrimSpace(h)); err == nil && s >= 0 {
			d = time.Duration(s) * time.Second
		} else if t, err := http.ParseTime(h); err == nil {
			d = t.Sub(now)
		}
	}
	if d < 0 {
		d = 0
	}
	if d > maxRetryAfter {
		d = maxRetryAfter
	}
	return d
}

func sleep(ctx context.Context, clk clock.Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := clock.Or(clk).NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}

// shortToken is the token form gitlab-runner prints: known prefixes
// ("glcbt-", "glrt-", …) dropped, then the first 8 characters. For tokens
// under 16 characters nothing is printed, so a short token never appears
// whole.
func shortToken(tok string) string {
	if len(tok) < 16 {
		return ""
	}
	for _, p := range []string{"glcbt-", "glrtr-", "glrt-", "GR1348941"} {
		if strings.HasPrefix(tok, p) && len(tok)-len(p) >= 16 {
			tok = tok[len(p):]
			break
		}
	}
	return tok[:8]
}

func drain(r io.ReadCloser) {
	io.Copy(io.Discard, io.LimitReader(r, 64<<10))
	r.Close()
}
