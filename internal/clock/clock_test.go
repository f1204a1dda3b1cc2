package clock

import (
	"testing"
	"time"
)

var start = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestFakeTimerFiresInOrder(t *testing.T) {
	f := NewFake(start)
	a := f.NewTimer(2 * time.Second)
	b := f.NewTimer(1 * time.Second)
	f.Advance(1500 * time.Millisecond)
	select {
	case got := <-b.C():
		if want := start.Add(time.Second); !got.Equal(want) {
			t.Errorf("b fired at %v, want %v", got, want)
		}
	default:
		t.Fatal("b did not fire after 1.5s")
	}
	select {
	case <-a.C():
		t.Fatal("a fired early")
	default:
	}
	f.Advance(time.Second)
	select {
	case <-a.C():
	default:
		t.Fatal("a did not fire after 2.5s")
	}
	if got := f.Now(); !got.Equal(start.Add(2500 * time.Millisecond)) {
		t.Errorf("Now() = %v", got)
	}
}

func TestFakeStopAndReset(t *testing.T) {
	f := NewFake(start)
	tm := f.NewTimer(time.Second)
	if !tm.Stop() {
		t.Fatal("Stop() = false on an armed timer")
	}
	f.Advance(2 * time.Second)
	select {
	case <-tm.C():
		t.Fatal("stopped timer fired")
	default:
	}
	if tm.Reset(time.Second) {
		t.Fatal("Reset() = true on a stopped timer")
	}
	if n := f.Pending(); n != 1 {
		t.Fatalf("Pending() = %d, want 1", n)
	}
	done := make(chan struct{})
	f.AfterFunc(500*time.Millisecond, func() { close(done) })
	f.Advance(time.Second)
	<-done
	select {
	case <-tm.C():
	default:
		t.Fatal("reset timer did not fire")
	}
}

func TestOr(t *testing.T) {
	if _, ok := Or(nil).(Real); !ok {
		t.Fatal("Or(nil) is not Real")
	}
	f := NewFake(start)
	if Or(f) != Clock(f) {
		t.Fatal("Or(f) != f")
	}
}
