package wsconn

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"pgregory.net/rapid"
)

// Property: jitter stays within ±25% of the period, and the backoff
// doubles from 1 s and never exceeds 30 s.
func TestBackoffProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		d := time.Duration(rapid.Int64Range(int64(time.Second), int64(time.Minute)).Draw(t, "d"))
		r := rapid.Float64Range(0, 1).Filter(func(f float64) bool { return f < 1 }).Draw(t, "r")
		j := jitter(d, Jitter, r)
		if float64(j) < 0.75*float64(d)-1 || float64(j) > 1.25*float64(d)+1 {
			t.Fatalf("jitter(%v, %v) = %v", d, r, j)
		}
		b := MinBackoff
		for range rapid.IntRange(0, 20).Draw(t, "steps") {
			nb := nextBackoff(b)
			if nb > MaxBackoff || (b < MaxBackoff/2 && nb != 2*b) {
				t.Fatalf("nextBackoff(%v) = %v", b, nb)
			}
			b = nb
		}
	})
}

// A failure that Paced accepts leaves the redial backoff where it was (a
// standby without a leader, around a failover), for MaxPaced failures in
// a row; any other failure doubles it, and a welcomed session starts it
// over.
//
// spec: RSESS-01, BS-12
func TestRedialPaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		errPaced, errOther := errors.New("503 standby"), errors.New("refused")
		type step struct {
			welcomed bool
			err      error
		}
		steps := []step{{true, errOther}, {false, errOther}, {false, errPaced}, {false, errPaced}, {false, errOther}}
		for range MaxPaced - 2 {
			steps = append(steps, step{false, errPaced})
		}
		steps = append(steps, step{false, errPaced}, step{false, errOther}, step{true, errOther})
		// The wait before each next dial is the backoff as the failures
		// before it left it: 1 s after the welcomed session and after the
		// first refusal (which doubles it), 2 s through the paced failures
		// and after the second refusal (which doubles it again), 4 s through
		// the rest of the pacing and after the first failure past it (which
		// doubles it), and 1 s after the welcomed session.
		want := []time.Duration{1, 1, 2, 2, 2}
		for range MaxPaced - 2 {
			want = append(want, 4)
		}
		// The paced failure past MaxPaced doubles it to 8 s, the wait after
		// the refusal that follows; the welcomed session after that starts
		// it over at 1 s.
		want = append(want, 4, 8, 1)
		ctx, cancel := context.WithCancel(t.Context())
		var at []time.Time
		i := 0
		Redialer{
			Once: func(context.Context) (bool, error) {
				at = append(at, time.Now())
				if i == len(steps) {
					cancel()
					return false, ctx.Err()
				}
				i++
				return steps[i-1].welcomed, steps[i-1].err
			},
			Rand:  func() float64 { return 0.5 }, // no jitter: a factor of exactly 1
			Log:   slog.New(slog.DiscardHandler),
			Paced: func(err error) bool { return errors.Is(err, errPaced) },
		}.Run(ctx)
		if len(at) != len(want)+1 {
			t.Fatalf("%d dials, want %d", len(at), len(want)+1)
		}
		for k := 1; k < len(at); k++ {
			if got := at[k].Sub(at[k-1]); got != want[k-1]*time.Second {
				t.Errorf("wait before dial %d = %v, want %v", k+1, got, want[k-1]*time.Second)
			}
		}
	})
}
