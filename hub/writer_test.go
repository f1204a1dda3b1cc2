package hub

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

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
