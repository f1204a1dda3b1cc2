package clock

import (
	"sort"
	"sync"
	"time"
)

// Fake is a manually advanced clock for tests that use real sockets (where
// testing/synctest cannot be used). Its zero value is not usable; call
// [NewFake]. Safe for concurrent use.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	seq    int
	timers []*fakeTimer
}

// NewFake returns a Fake clock set to start (use a fixed UTC time).
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

// Now returns the fake current time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Advance moves the clock forward by d, firing every timer that comes due,
// in deadline order.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	target := f.now.Add(d)
	for {
		var due *fakeTimer
		for _, t := range f.timers {
			if t.active && !t.when.After(target) && (due == nil || t.when.Before(due.when) || (t.when.Equal(due.when) && t.seq < due.seq)) {
				due = t
			}
		}
		if due == nil {
			break
		}
		due.active = false
		f.now = due.when
		f.mu.Unlock()
		due.fire(due.when)
		f.mu.Lock()
	}
	f.now = target
	f.gcLocked()
	f.mu.Unlock()
}

// Pending returns how many timers are armed, for tests that wait until a
// component has set its timer before advancing.
func (f *Fake) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, t := range f.timers {
		if t.active {
			n++
		}
	}
	return n
}

// NewTimer returns a fake timer.
func (f *Fake) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{f: f, c: make(chan time.Time, 1)}
	t.fire = func(now time.Time) {
		select {
		case t.c <- now:
		default:
		}
	}
	f.arm(t, d)
	return t
}

// AfterFunc returns a fake timer that runs fn in a new goroutine when due.
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	t := &fakeTimer{f: f}
	t.fire = func(time.Time) { go fn() }
	f.arm(t, d)
	return t
}

func (f *Fake) arm(t *fakeTimer, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	t.seq = f.seq
	t.when = f.now.Add(d)
	if !t.active {
		t.active = true
		if !t.listed {
			t.listed = true
			f.timers = append(f.timers, t)
		}
	}
}

func (f *Fake) gcLocked() {
	kept := f.timers[:0]
	for _, t := range f.timers {
		if t.active {
			kept = append(kept, t)
		} else {
			t.listed = false
		}
	}
	f.timers = kept
	sort.SliceStable(f.timers, func(i, j int) bool { return f.timers[i].seq < f.timers[j].seq })
}

type fakeTimer struct {
	f      *Fake
	c      chan time.Time
	fire   func(time.Time)
	when   time.Time
	seq    int
	active bool // guarded by f.mu
	listed bool // guarded by f.mu
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	was := t.active
	t.active = false
	return was
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.f.mu.Lock()
	was := t.active
	t.f.mu.Unlock()
	t.f.arm(t, d)
	return was
}
