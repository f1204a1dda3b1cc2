package hub

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/hub/store/memstore"
	"github.com/vk-ci/vk/internal/testlog"
)

// countingStore counts UpdateJob calls (the writer's job saves).
type countingStore struct {
	store.Store
	updates atomic.Int32
}

func (s *countingStore) UpdateJob(ctx context.Context, id string, fn func(*store.Job) error) (store.Job, error) {
	s.updates.Add(1)
	return s.Store.UpdateJob(ctx, id, fn)
}

// do queues fn without a key, ordered against every other write.
func (w *recWriter) do(fn func(ctx context.Context) error) <-chan error {
	return w.enqueue(&wop{fn: fn})
}

// TestRecWriterOrderAndCoalesce checks recWriter's contract: writes apply
// in queue order; a second save of a job whose save has not started joins
// it (one store write, the latest record, both waiters answered, the
// first save's place in the queue); after close, writes fail at once.
func TestRecWriterOrderAndCoalesce(t *testing.T) {
	st := &countingStore{Store: memstore.New()}
	ctx := t.Context()
	if err := st.CreateJob(ctx, store.Job{ID: "j1", Revision: 1}); err != nil {
		t.Fatal(err)
	}
	w := newRecWriter(ctx, st, testlog.New(t))
	release, started := make(chan struct{}), make(chan struct{})
	w.do(func(context.Context) error { close(started); <-release; return nil })
	<-started // the writer is busy: what follows stays queued

	first := w.saveJob(store.Job{ID: "j1", Revision: 2})
	var seen uint64
	between := w.do(func(ctx context.Context) error {
		j, err := st.GetJob(ctx, "j1")
		seen = j.Revision
		return err
	})
	second := w.saveJob(store.Job{ID: "j1", Revision: 3})
	close(release)
	for name, ch := range map[string]<-chan error{"first save": first, "write between": between, "second save": second} {
		if err := <-ch; err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if n := st.updates.Load(); n != 1 {
		t.Fatalf("store saw %d job saves, want 1 (coalesced)", n)
	}
	if seen != 3 {
		t.Fatalf("the write queued between the saves saw revision %d, want 3 (the joined save kept the first's place)", seen)
	}
	w.close()
	if err := <-w.saveJob(store.Job{ID: "j1", Revision: 4}); !errors.Is(err, errStopped) {
		t.Fatalf("saveJob after close = %v, want errStopped", err)
	}
	if err := <-w.do(func(context.Context) error { return nil }); !errors.Is(err, errStopped) {
		t.Fatalf("do after close = %v, want errStopped", err)
	}
}

// Keyed writes of different keys queued together reach the store at
// once, and none is answered before the whole batch is durable; a second
// write of a key waits for the first.
func TestRecWriterBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		w := newRecWriter(t.Context(), st, testlog.New(t))
		defer w.close()
		release, started := make(chan struct{}), make(chan struct{})
		w.do(func(context.Context) error { close(started); <-release; return nil })
		<-started // the writer is busy: what follows queues up

		var (
			mu    sync.Mutex
			order []string
		)
		log := func(s string) {
			mu.Lock()
			order = append(order, s)
			mu.Unlock()
		}
		slowGo, slowIn := make(chan struct{}), make(chan struct{})
		fast := w.doKey("a", func(context.Context) error { log("a1"); return nil })
		slow := w.doKey("b", func(context.Context) error { close(slowIn); <-slowGo; log("b"); return nil })
		again := w.doKey("a", func(context.Context) error { log("a2"); return nil })
		close(release)
		<-slowIn // "b" is in the store while "a1" is too: one batch
		synctest.Wait()
		select {
		case err := <-fast:
			t.Fatalf("a1 answered (%v) while b, of its batch, was not durable", err)
		default:
		}
		mu.Lock()
		if len(order) != 1 || order[0] != "a1" {
			t.Fatalf("while b is in the store: %v, want [a1] (a2 waits for a1's batch)", order)
		}
		mu.Unlock()
		close(slowGo)
		for name, ch := range map[string]<-chan error{"a1": fast, "b": slow, "a2": again} {
			if err := <-ch; err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		if want := []string{"a1", "b", "a2"}; !slices.Equal(order, want) {
			t.Fatalf("order %v, want %v", order, want)
		}
	})
}
