package memstore

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vk-ci/vk/hub/store"
)

// The helpers below carry every method's plumbing; the conformance suite
// (memstore_test.go) covers them through the methods, these tests pin
// their own contracts.

func TestLocked(t *testing.T) {
	s := New()
	got, err := locked(t.Context(), s, func() (int, error) {
		if s.mu.TryLock() {
			t.Error("fn ran without mu held")
		}
		return 7, nil
	})
	if got != 7 || err != nil {
		t.Fatalf("locked = %d, %v; want 7, nil", got, err)
	}
	if !s.mu.TryLock() {
		t.Fatal("mu still held after locked returned")
	}
	s.mu.Unlock()

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	called := false
	fn := func() (int, error) { called = true; return 7, nil }
	if got, err := locked(ctx, s, fn); got != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("locked(done ctx) = %d, %v; want 0, context.Canceled", got, err)
	}
	if err := s.lockedDo(ctx, func() error { called = true; return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("lockedDo(done ctx) = %v, want context.Canceled", err)
	}
	s.Close()
	if got, err := locked(t.Context(), s, fn); got != 0 || !errors.Is(err, store.ErrClosed) {
		t.Fatalf("locked(closed) = %d, %v; want 0, ErrClosed", got, err)
	}
	if err := s.lockedDo(t.Context(), func() error { called = true; return nil }); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("lockedDo(closed) = %v, want ErrClosed", err)
	}
	if called {
		t.Fatal("fn ran although ctx was done or the store closed")
	}
	errFn := errors.New("fn")
	if err := New().lockedDo(t.Context(), func() error { return errFn }); err != errFn {
		t.Fatalf("lockedDo = %v, want fn's error as is", err)
	}
}

func TestLookup(t *testing.T) {
	m := map[string][]byte{"k": []byte("v")}
	got, err := lookup(m, "k", slices.Clone, func() string { return `meta "k"` })
	if err != nil || string(got) != "v" {
		t.Fatalf("lookup(k) = %q, %v; want v, nil", got, err)
	}
	got[0] = 'X'
	if string(m["k"]) != "v" {
		t.Fatal("lookup's copy shares memory with the map")
	}
	if got, _ := lookup(m, "k", nil, func() string { return `meta "k"` }); &got[0] != &m["k"][0] {
		t.Fatal("lookup with nil cp copied")
	}
	got, err = lookup(m, "none", slices.Clone, func() string { return `meta "none"` })
	if got != nil || !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("lookup(none) = %q, %v; want nil, ErrNotFound", got, err)
	}
	if want := `memstore: meta "none": store: not found`; err.Error() != want {
		t.Fatalf("lookup(none) error %q, want %q", err, want)
	}
}

func TestInsert(t *testing.T) {
	m := map[string]int{}
	if err := insert(m, "a", 1, func() string { return "job a" }); err != nil || m["a"] != 1 {
		t.Fatalf("insert(a) = %v, map %v", err, m)
	}
	err := insert(m, "a", 2, func() string { return "job a" })
	if !errors.Is(err, store.ErrConflict) || m["a"] != 1 {
		t.Fatalf("insert(a again) = %v, map %v; want ErrConflict and the first value kept", err, m)
	}
	if want := "memstore: job a exists: store: conflict"; err.Error() != want {
		t.Fatalf("insert(a again) error %q, want %q", err, want)
	}
}

func TestSortedValues(t *testing.T) {
	m := map[string][]byte{"c": []byte("3"), "a": []byte("1"), "b": []byte("2")}
	all := sortedValues(m, nil, slices.Clone)
	if d := cmp.Diff([][]byte{[]byte("1"), []byte("2"), []byte("3")}, all); d != "" {
		t.Fatalf("sortedValues (-want +got):\n%s", d)
	}
	all[0][0] = 'X'
	if string(m["a"]) != "1" {
		t.Fatal("sortedValues' copies share memory with the map")
	}
	odd := sortedValues(m, func(v []byte) bool { return v[0] != '2' }, nil)
	if d := cmp.Diff([][]byte{[]byte("1"), []byte("3")}, odd); d != "" {
		t.Fatalf("sortedValues filtered (-want +got):\n%s", d)
	}
	if none := sortedValues(m, func([]byte) bool { return false }, nil); none != nil {
		t.Fatalf("sortedValues with nothing kept = %#v, want nil", none)
	}
}
