package boltstore

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
)

func gatherStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "hub.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func (g *groupCommit) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.commits
}

// spec: FAIL-19
// A gathering's writes, made at once from their own goroutines, commit in
// one transaction, also when some slots write nothing (their callers are
// only done); each write is durable when its call returns.
func TestGatherOneCommit(t *testing.T) {
	for _, writers := range []int{2, 5, 16} {
		t.Run(fmt.Sprint(writers), func(t *testing.T) {
			s := gatherStore(t)
			ctx := t.Context()
			before := s.group.count()
			ga := s.Gather(writers + 1) // one slot makes no write
			var wg sync.WaitGroup
			for i := range writers {
				wg.Go(func() {
					defer ga.Done(i)
					if err := s.PutMeta(ga.Context(ctx, i), fmt.Sprint("k", i), []byte("v")); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Go(func() { ga.Done(writers) })
			wg.Wait()
			if n := s.group.count() - before; n != 1 {
				t.Fatalf("%d writes of one gathering took %d transactions, want 1", writers, n)
			}
			for i := range writers {
				if v, err := s.GetMeta(ctx, fmt.Sprint("k", i)); err != nil || string(v) != "v" {
					t.Fatalf("k%d = %q, %v", i, v, err)
				}
			}
		})
	}
}

// A write outside the gathering (another caller's, or a gathering
// caller's own write under another context) does not wait for the
// gathering: it commits at once, and takes along the gathering's writes
// queued so far. Without that, a caller writing under the wrong context
// would wait for its own slot forever.
func TestGatherOutsiderDoesNotWait(t *testing.T) {
	s := gatherStore(t)
	ctx := t.Context()
	ga := s.Gather(2)
	slot0 := make(chan error, 1)
	go func() { slot0 <- s.PutMeta(ga.Context(ctx, 0), "in", []byte("v")) }()
	until(t, "the gathering's first write queues", func() bool {
		s.group.mu.Lock()
		defer s.group.mu.Unlock()
		return len(s.group.pending) == 1
	})
	// Slot 1's caller writes under a plain context: not its slot's write.
	if err := s.PutMeta(context.WithoutCancel(ctx), "out", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := <-slot0; err != nil {
		t.Fatalf("the queued gathering write, taken along: %v", err)
	}
	ga.Done(1)
	ga.Done(0)
	s.group.mu.Lock()
	holds, running, pending := s.group.holds, s.group.running, len(s.group.pending)
	s.group.mu.Unlock()
	if holds != 0 || running || pending != 0 {
		t.Fatalf("after the gathering: holds %d, running %v, %d queued; want 0, false, 0", holds, running, pending)
	}
}

// In solo mode (a transaction per write) a gathering changes nothing.
func TestGatherSolo(t *testing.T) {
	s := gatherStore(t)
	SetSolo(s, true)
	ga := s.Gather(3)
	for i := range 3 {
		if err := s.PutMeta(ga.Context(t.Context(), i), fmt.Sprint("k", i), nil); err != nil {
			t.Fatal(err)
		}
		ga.Done(i)
	}
	if s.group.holds != 0 {
		t.Fatalf("solo store holds %d gatherings", s.group.holds)
	}
}
