package hubclient

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/proto/client"
)

// Backoff bounds of RELAY-13.
const (
	// MinBackoff is the first retry's backoff.
	MinBackoff = 1 * time.Second
	// MaxBackoff caps the backoff (jitter comes on top).
	MaxBackoff = 30 * time.Second
	// MaxRetryAfter caps a hub's retry_after_secs, against a bogus value.
	MaxRetryAfter = 10 * time.Minute
	// MaxPaced bounds how many unavailable answers in a row may set the
	// pace of the retries without the backoff growing (see [Retrier.Do]):
	// thirty waits of about a second cover a hub failover (a lease's TTL,
	// an election and the relay's session to the new leader) many times.
	MaxPaced = 30
)

// Retrier retries hub requests per RELAY-13/14/16 (see the package doc).
// Its zero value is usable (real clock, random jitter, the spec's bounds).
// Safe for concurrent use.
type Retrier struct {
	// Clock runs the backoff timers; nil means real time.
	Clock clock.Clock
	// Rand draws jitter; nil means one seeded from crypto/rand. Guarded by
	// the Retrier, so it may be shared with nothing else.
	Rand *rand.Rand
	// Min and Max bound the exponential backoff; 0 means [MinBackoff] and
	// [MaxBackoff].
	Min, Max time.Duration
	// MaxAttempts bounds the attempts (first included); 0 means until the
	// context ends.
	MaxAttempts int
	// Log receives one Info line per retry; nil discards.
	Log *slog.Logger

	mu sync.Mutex // guards Rand
}

// Do runs op until it succeeds, fails for good, or ctx ends (RELAY-13):
// errors for which [Retryable] is true are retried after [Retrier.Delay];
// any other error is returned at once. name labels log lines.
//
// An answer coded unavailable that names its wait (retry_after_secs) is
// the hub saying it will be ready soon: a standby that knows no leader
// yet, or a new leader whose session with this relay is not up. Such an
// answer is retried after its own wait and does not make the backoff
// grow, up to [MaxPaced] times in a row; the backoff then goes on from
// where transport errors and other answers left it. Growing it for them
// made a relay that met a failover's leaderless seconds wait out 2 s,
// 4 s and 8 s steps after the new leader was up (docs/ha.md).
func (r *Retrier) Do(ctx context.Context, name string, op func(context.Context) error) error {
	return r.loop(ctx, name, op, Retryable)
}

// DoUntilAccepted runs op until it succeeds or the hub answers 400 or 404,
// retrying after every other failure — transport errors, 401, 403, 409 and
// 5xx alike (RELAY-14, RELAY-16: job cancels and settles; a settle
// answered 409 repeats until the job ends). It also stops when ctx ends.
func (r *Retrier) DoUntilAccepted(ctx context.Context, name string, op func(context.Context) error) error {
	return r.loop(ctx, name, op, retryUntilAccepted)
}

// Retryable reports whether RELAY-13 retries err: a transport error (not
// an answer, not [ErrConfig], [ErrProtocol] or a context error), or an
// answer whose code is retryable ([client.StatusError.Retryable]: internal,
// no_capacity, unavailable, an unknown code on a 5xx). No other 4xx.
func Retryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var se *client.StatusError
	if errors.As(err, &se) {
		return se.Retryable()
	}
	return !errors.Is(err, ErrConfig) && !errors.Is(err, ErrProtocol) && !errors.Is(err, ErrPastEnd)
}

func retryUntilAccepted(err error) bool {
	var se *client.StatusError
	if errors.As(err, &se) {
		return se.Status != http.StatusBadRequest && se.Status != http.StatusNotFound
	}
	return !errors.Is(err, ErrConfig)
}

func (r *Retrier) loop(ctx context.Context, name string, op func(context.Context) error, retry func(error) bool) error {
	clk := clock.Or(r.Clock)
	step, paced := 0, 0 // the backoff's exponent; unavailable answers that set the pace
	for attempt := 0; ; attempt++ {
		err := op(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return errors.Join(err, ctx.Err())
		}
		if !retry(err) || (r.MaxAttempts > 0 && attempt+1 >= r.MaxAttempts) {
			return err
		}
		var d time.Duration
		if pacedAnswer(err) && paced < MaxPaced {
			paced++
			d = r.Delay(0, retryAfter(err))
		} else {
			d = r.Delay(step, retryAfter(err))
			step++
		}
		if r.Log != nil {
			r.Log.InfoContext(ctx, "hub request failed; retrying", "op", name, "attempt", attempt+1,
				"delay", d, logkey.Err, err)
		}
		t := clk.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		case <-t.C():
		}
	}
}

// pacedAnswer reports whether err is an answer coded unavailable that
// names its wait.
func pacedAnswer(err error) bool {
	var se *client.StatusError
	return errors.As(err, &se) && se.Body.Code == client.CodeUnavailable && se.Body.RetryAfterSecs > 0
}

// retryAfter returns the answer's retry_after_secs as a duration, 0 if
// none.
func retryAfter(err error) time.Duration {
	var se *client.StatusError
	if errors.As(err, &se) && se.Body.RetryAfterSecs > 0 {
		return time.Duration(se.Body.RetryAfterSecs) * time.Second
	}
	return 0
}

// Delay returns the wait before retry number attempt+1 (attempt 0 is the
// first retry): the backoff b = min(Max, Min·2^attempt) plus jitter
// uniform in [0, b/2); or, when the hub asked for a longer wait
// (retryAfter, capped at [MaxRetryAfter]), that wait plus jitter uniform
// in [0, retryAfter/10).
func (r *Retrier) Delay(attempt int, retryAfter time.Duration) time.Duration {
	lo, hi := r.Min, r.Max
	if lo <= 0 {
		lo = MinBackoff
	}
	if hi <= 0 {
		hi = MaxBackoff
	}
	hi = max(hi, lo)
	b := lo
	for i := 0; i < attempt && b < hi; i++ {
		b *= 2
	}
	b = min(b, hi)
	retryAfter = min(retryAfter, MaxRetryAfter)
	if retryAfter > b {
		return retryAfter + r.jitter(retryAfter/10)
	}
	return b + r.jitter(b/2)
}

// jitter returns a uniform duration in [0, n); 0 when n <= 0.
func (r *Retrier) jitter(n time.Duration) time.Duration {
	if n <= 0 {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.Rand == nil {
		var seed [16]byte
		_, _ = crand.Read(seed[:])
		r.Rand = rand.New(rand.NewPCG(binary.LittleEndian.Uint64(seed[:8]), binary.LittleEndian.Uint64(seed[8:])))
	}
	return time.Duration(r.Rand.Int64N(int64(n)))
}
