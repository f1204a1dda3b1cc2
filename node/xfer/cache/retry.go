package cache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/vk-ci/vk/internal/clock"
	"oras.land/oras-go/v2/registry/remote/errcode"
)

// Retry windows (XFER-10) and the request bound (XFER-11).
const (
	// DefaultConnRetryWindow is how long lost or refused connections are
	// retried.
	DefaultConnRetryWindow = 90 * time.Second
	// DefaultBusyRetryWindow is how long 503 and 429 answers are retried.
	DefaultBusyRetryWindow = 3 * time.Minute
	// DefaultRequestTimeout is CACHE_REQUEST_TIMEOUT's default (10 min).
	DefaultRequestTimeout = 10 * time.Minute
	minBackoff            = 500 * time.Millisecond
	maxBackoff            = 10 * time.Second
)

var (
	// ErrRequestTimeout is returned (wrapped) when one registry request
	// ran into CACHE_REQUEST_TIMEOUT; it is never retried.
	ErrRequestTimeout = errors.New("cache: registry request timed out")
	// ErrUnavailable is returned (wrapped) when the registry stayed
	// unreachable or busy for the whole retry window.
	ErrUnavailable = errors.New("cache: registry unavailable")
)

// errClass says how a request failure is retried.
type errClass int

const (
	permanent errClass = iota // not retried
	connLost                  // retried within the connection window
	busy                      // 503/429: retried within the busy window
)

func classify(err error) errClass {
	var er *errcode.ErrorResponse
	if errors.As(err, &er) {
		if er.StatusCode == http.StatusServiceUnavailable || er.StatusCode == http.StatusTooManyRequests {
			return busy
		}
		return permanent
	}
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return connLost
	case errors.As(err, &ne):
		return connLost
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return connLost
	}
	return permanent
}

// retrier runs one logical registry request with XFER-10/11 semantics.
type retrier struct {
	clock   clock.Clock
	conn    time.Duration // window for connLost
	busy    time.Duration // window for busy
	timeout time.Duration // per attempt
	// onRetry, when set, is called after the wait's timer is armed and
	// before waiting; tests use it to act on the outage.
	onRetry func(attempt int, wait time.Duration, err error)
}

// do runs op until it succeeds, fails permanently, times out, or its class's
// window (measured from the first failure of that class) is spent.
func (r *retrier) do(ctx context.Context, what string, op func(ctx context.Context) error) error {
	clk := clock.Or(r.clock)
	var first time.Time
	backoff := minBackoff
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeoutCause(ctx, r.timeout, ErrRequestTimeout)
		err := op(actx)
		timedOut := errors.Is(context.Cause(actx), ErrRequestTimeout)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if timedOut {
			return fmt.Errorf("%s: %w after %v", what, ErrRequestTimeout, r.timeout)
		}
		class := classify(err)
		if class == permanent {
			return fmt.Errorf("%s: %w", what, err)
		}
		window := r.conn
		if class == busy {
			window = r.busy
		}
		now := clk.Now()
		if first.IsZero() {
			first = now
		}
		if now.Sub(first) >= window {
			return fmt.Errorf("%s: %w for %v: %v", what, ErrUnavailable, now.Sub(first).Round(time.Second), err)
		}
		wait := backoff
		if rest := window - now.Sub(first); wait > rest {
			wait = rest
		}
		t := clk.NewTimer(wait)
		if r.onRetry != nil {
			r.onRetry(attempt, wait, err)
		}
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C():
		}
		backoff *= 2
		if backoff > maxBackoff {
			backoff = maxBackoff
		}
	}
}
