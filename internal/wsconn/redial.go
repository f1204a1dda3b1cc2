package wsconn

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/vk-ci/vk/internal/clock"
)

// Redial delays, shared by every session client (node, relay).
const (
	MinBackoff     = time.Second      // first redial delay, and after a session that was welcomed
	MaxBackoff     = 30 * time.Second // the delay doubles up to this
	Jitter         = 0.25             // each delay is scaled by a factor in [1-Jitter, 1+Jitter)
	VersionBackoff = time.Minute      // redial delay after a version refusal (±10%)
	versionJitter  = 0.10
	// MaxPaced bounds how many failed dials in a row that Redialer.Paced
	// accepts may leave the backoff where it is.
	MaxPaced = 30
)

// Redialer holds a session until ctx ends: it calls Once, and when a
// connection ends it waits and calls it again, with exponential backoff from
// [MinBackoff] to [MaxBackoff] (reset after a welcomed session) and ±[Jitter],
// or about [VersionBackoff] after a refusal wrapping VersionErr.
type Redialer struct {
	// Once runs one connection; welcomed reports whether the peer welcomed
	// it (the backoff then starts over).
	Once func(ctx context.Context) (welcomed bool, err error)
	// VersionErr is the sentinel of a version refusal.
	VersionErr error
	// VersionMsg is logged (at Error) after a version refusal.
	VersionMsg string
	// Clock times the waits; nil means real time.
	Clock clock.Clock
	// Rand returns a uniform number in [0, 1) for jitter. Required.
	Rand func() float64
	// Log receives one line per lost session.
	Log *slog.Logger
	// Paced, when set, reports a failure after which the backoff does not
	// grow (up to [MaxPaced] in a row): one that says the peer will soon
	// be ready, such as a standby hub instance that knows no leader yet.
	Paced func(error) bool
}

// Run redials until ctx ends and returns ctx's error.
func (r Redialer) Run(ctx context.Context) error {
	clk := clock.Or(r.Clock)
	backoff := MinBackoff
	paced := 0 // failures in a row that left the backoff as it was
	for {
		welcomed, err := r.Once(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if welcomed {
			backoff, paced = MinBackoff, 0
		}
		wait := jitter(backoff, Jitter, r.Rand())
		if r.VersionErr != nil && errors.Is(err, r.VersionErr) {
			wait = jitter(VersionBackoff, versionJitter, r.Rand())
			r.Log.Error(r.VersionMsg, slog.Any("reason", err), "redial_in", wait)
		} else {
			r.Log.Info("hub session lost; redialing", slog.Any("reason", err), "redial_in", wait)
			switch {
			case welcomed:
			case r.Paced != nil && paced < MaxPaced && r.Paced(err):
				paced++
			default:
				backoff = nextBackoff(backoff)
			}
		}
		t := clk.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C():
		}
	}
}

// nextBackoff doubles d up to MaxBackoff.
func nextBackoff(d time.Duration) time.Duration { return min(2*d, MaxBackoff) }

// jitter returns d scaled by a factor in [1-f, 1+f) from r in [0, 1).
func jitter(d time.Duration, f, r float64) time.Duration {
	return time.Duration(float64(d) * (1 - f + 2*f*r))
}
