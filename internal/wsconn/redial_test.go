package wsconn

import (
	"testing"
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
