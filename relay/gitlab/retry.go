package gitlab

import (
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/logkey"
)

// Retry defaults, as gitlab-runner's network/retry_requester.go.
const (
	DefaultRetryAttempts   = 5                      // tries in all, the first included
	DefaultRetryBackoffMin = 100 * time.Millisecond // first backoff without a server hint
	DefaultRetryBackoffMax = 60 * time.Second       // backoff cap
)

// RetryableStatus reports the statuses gitlab-runner's retry layer
// retries: 408, 429, 500, 502, 503, 504 and any status ≥ 512.
func RetryableStatus(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusInternalServerError,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return status >= 512
}

// RetryDoer is a [Doer] that repeats requests GitLab answered with a
// retryable status ([RetryableStatus]), waiting as GitLab asks: until
// RateLimit-ResetTime (an HTTP date) when it is in the future, else
// Retry-After (integer seconds), else exponential backoff from
// DefaultRetryBackoffMin doubling to DefaultRetryBackoffMax with jitter.
// Transport errors are not retried (the caller's loop handles them). The
// last retryable answer is returned as is, so its Retry-After still
// reaches the caller's outcome.
//
// A request is repeated only when its body can be regenerated
// (http.Request.GetBody, set for in-memory bodies). Waits end early when
// the request's context ends; Do then returns the context's error.
type RetryDoer struct {
	// Next sends each attempt. Required.
	Next Doer
	// Attempts is the most tries in all; 0 means DefaultRetryAttempts.
	Attempts int
	// MaxWait caps one wait: an answer asking for longer is returned to
	// the caller at once (a job request should not sit out a long
	// Retry-After while its reservation's lease runs). 0 means no cap.
	MaxWait time.Duration
	// Clock times the waits; nil means the real clock.
	Clock clock.Clock
	// Jitter randomises a computed backoff; nil means uniformly within
	// ±25 %. Server-given waits are never jittered.
	Jitter func(time.Duration) time.Duration
	// Logger receives a line per retry; nil discards.
	Logger *slog.Logger
}

// Do implements Doer.
func (d *RetryDoer) Do(req *http.Request) (*http.Response, error) {
	attempts := d.Attempts
	if attempts <= 0 {
		attempts = DefaultRetryAttempts
	}
	clk := clock.Or(d.Clock)
	backoff := DefaultRetryBackoffMin
	for try := 1; ; try++ {
		resp, err := d.Next.Do(req)
		if err != nil || !RetryableStatus(resp.StatusCode) || try >= attempts {
			return resp, err
		}
		wait, fromServer := serverWait(resp.Header, clk.Now())
		if !fromServer {
			wait = d.jitter(backoff)
			backoff = min(backoff*2, DefaultRetryBackoffMax)
		}
		if d.MaxWait > 0 && wait > d.MaxWait {
			return resp, nil
		}
		if req.Body != nil && req.Body != http.NoBody {
			if req.GetBody == nil {
				return resp, nil
			}
			body, gerr := req.GetBody()
			if gerr != nil {
				return resp, nil
			}
			req.Body = body
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		resp.Body.Close()
		if d.Logger != nil {
			d.Logger.LogAttrs(req.Context(), slog.LevelWarn, "gitlab answered a retryable status; retrying",
				slog.String("method", req.Method), slog.String("path", req.URL.Path),
				slog.Int(logkey.Status, resp.StatusCode), slog.Int("attempt", try),
				slog.Duration("wait", wait), slog.String(correlationKey, resp.Header.Get(HeaderRequestID)))
		}
		t := clk.NewTimer(wait)
		select {
		case <-req.Context().Done():
			t.Stop()
			return nil, req.Context().Err()
		case <-t.C():
		}
	}
}

func (d *RetryDoer) jitter(b time.Duration) time.Duration {
	if d.Jitter != nil {
		return d.Jitter(b)
	}
	return b - b/4 + rand.N(b/2+1)
}

// serverWait returns how long GitLab asks the client to wait: until
// RateLimit-ResetTime (RFC 1123) when in the future, else Retry-After as
// integer seconds (the HTTP-date form is ignored, as gitlab-runner
// ignores it). ok is false when GitLab gave neither.
func serverWait(h http.Header, now time.Time) (d time.Duration, ok bool) {
	if v := h.Get(HeaderRateLimitReset); v != "" {
		if t, err := http.ParseTime(v); err == nil && t.After(now) {
			return t.Sub(now), true
		}
	}
	if v := strings.TrimSpace(h.Get(HeaderRetryAfter)); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			return time.Duration(n) * time.Second, true
		}
	}
	return 0, false
}
