package loop

import (
	"context"
	"testing"
	"testing/synctest"

	"pgregory.net/rapid"
)

// Property: whatever the sequence of acquisitions and releases, no runner
// holds more than its limit and all runners together never more than
// concurrent; a release always makes room again.
//
// spec: ARB-25, RELAY-10
func TestSlotsProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		concurrent := rapid.IntRange(1, 6).Draw(rt, "concurrent")
		limits := map[string]int{"a": rapid.IntRange(0, 4).Draw(rt, "limit a"), "b": rapid.IntRange(0, 4).Draw(rt, "limit b")}
		s := NewSlots(concurrent)
		held := map[string]int{}
		for range rapid.IntRange(1, 60).Draw(rt, "ops") {
			r := rapid.SampledFrom([]string{"a", "b"}).Draw(rt, "runner")
			if rapid.Bool().Draw(rt, "acquire") {
				room := held["a"]+held["b"] < concurrent && (limits[r] == 0 || held[r] < limits[r])
				if got := s.TryAcquire(r, limits[r]); got != room {
					rt.Fatalf("TryAcquire(%s) = %v with %v held, want %v", r, got, held, room)
				}
				if room {
					held[r]++
				}
			} else if held[r] > 0 {
				s.Release(r)
				held[r]--
			}
			if hr, all := s.Held(r); hr != held[r] || all != held["a"]+held["b"] {
				rt.Fatalf("Held(%s) = %d, %d; model %v", r, hr, all, held)
			}
		}
	})
}

// The gate blocks until opened and wakes every waiter.
//
// spec: RSESS-07
func TestGateWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var g Gate
		done := make(chan error, 2)
		for range 2 {
			go func() { done <- g.Wait(context.Background()) }()
		}
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("Wait returned while the gate is closed")
		default:
		}
		g.Set(true)
		for range 2 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		g.Set(false)
		ctx, cancel := context.WithCancel(context.Background())
		go func() { done <- g.Wait(ctx) }()
		synctest.Wait()
		cancel()
		if err := <-done; err == nil {
			t.Error("Wait on a closed gate with a cancelled context = nil")
		}
	})
}
