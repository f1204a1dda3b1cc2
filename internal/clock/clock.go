// Package clock gives the shells (hub, node, relay) an injectable source of
// time. Components hold a Clock field that defaults to [Real] when nil; tests
// pass a [Fake] (or run under testing/synctest with Real). The scheduling
// core never imports this package: it receives time as an argument.
package clock

import "time"

// Clock is the time a component sees.
type Clock interface {
	// Now returns the current time. Real's carries a monotonic reading.
	Now() time.Time
	// NewTimer returns a timer that fires once after d.
	NewTimer(d time.Duration) Timer
	// AfterFunc calls f in its own goroutine after d.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is the part of *time.Timer that components use.
type Timer interface {
	// C is the channel the time is delivered on; nil for AfterFunc timers.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it stopped it.
	Stop() bool
	// Reset changes the timer to fire after d; it reports whether the timer
	// had been active.
	Reset(d time.Duration) bool
}

// Or returns c, or Real when c is nil. Use it as `clock.Or(x.Clock).Now()`.
func Or(c Clock) Clock {
	if c == nil {
		return Real{}
	}
	return c
}

// Real is the wall and monotonic clock of the machine.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// NewTimer returns a real timer.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

// AfterFunc returns a real AfterFunc timer.
func (Real) AfterFunc(d time.Duration, f func()) Timer { return realTimer{time.AfterFunc(d, f)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }
