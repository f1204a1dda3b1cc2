package hub

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/hub/store/boltstore"
	"github.com/vk-ci/vk/hub/store/memstore"
	"github.com/vk-ci/vk/internal/testlog"
)

// countingStore counts SaveJob calls (the writer's job saves).
type countingStore struct {
	store.Store
	updates atomic.Int32
}

func (s *countingStore) SaveJob(ctx context.Context, j store.Job) error {
	s.updates.Add(1)
	return s.Store.SaveJob(ctx, j)
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

// batchAuditStore counts audit writes: single appends and batches.
type batchAuditStore struct {
	*boltstore.Store
	singles, batches atomic.Int32
}

func (s *batchAuditStore) AppendAudit(ctx context.Context, e store.AuditEntry) (store.AuditEntry, error) {
	s.singles.Add(1)
	return s.Store.AppendAudit(ctx, e)
}

func (s *batchAuditStore) AppendAudits(ctx context.Context, es []store.AuditEntry) error {
	s.batches.Add(1)
	return s.Store.AppendAudits(ctx, es)
}

// Audit entries queued while an audit write is still queued join it: one
// store write for all of them, in queue order, every waiter answered once
// it is durable; and the second entry does not end the batch, so a write
// of another key queued after it goes to the store in the same batch.
func TestRecWriterAuditCoalesce(t *testing.T) {
	ctx := t.Context()
	bs, err := boltstore.Open(ctx, filepath.Join(t.TempDir(), "hub.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	st := &batchAuditStore{Store: bs}
	w := newRecWriter(ctx, st, testlog.New(t))
	defer w.close()
	release, started := make(chan struct{}), make(chan struct{})
	w.do(func(context.Context) error { close(started); <-release; return nil })
	<-started

	var chs []<-chan error
	for _, subject := range []string{"a", "b", "c"} {
		chs = append(chs, w.appendAudit(store.AuditEntry{Actor: "t", Action: "job.settle", Subject: subject}))
	}
	other := w.doKey("adm:x", func(context.Context) error { return nil })
	w.mu.Lock()
	queued := len(w.queue)
	w.mu.Unlock()
	close(release)
	for _, ch := range append(chs, other) {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	if queued != 2 {
		t.Fatalf("%d writes queued, want 2 (one audit write holding 3 entries, one other)", queued)
	}
	if b, s := st.batches.Load(), st.singles.Load(); b != 1 || s != 0 {
		t.Fatalf("store saw %d audit batches and %d single appends, want 1 and 0", b, s)
	}
	es, err := bs.ListAudit(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range slices.Backward(es) {
		got = append(got, e.Subject)
	}
	if !slices.Equal(got, []string{"a", "b", "c"}) || es[0].Seq != 3 {
		t.Fatalf("audit log (oldest first) %v, newest seq %d; want [a b c], 3", got, es[0].Seq)
	}

	// The batch: a writer without its goroutine, so next is ours to call.
	idle := &recWriter{max: maxBatch, pending: map[string]*wop{}}
	idle.cond = sync.NewCond(&idle.mu)
	idle.appendAudit(store.AuditEntry{Subject: "a"})
	idle.doKey("adm:x", func(context.Context) error { return nil })
	idle.appendAudit(store.AuditEntry{Subject: "b"})
	idle.doKey("adm:y", func(context.Context) error { return nil })
	if batch := idle.next(); len(batch) != 3 || len(batch[0].audits) != 2 {
		t.Fatalf("batch of %d writes (audit write with %d entries), want 3 writes, the audit with 2", len(batch), len(batch[0].audits))
	}
}

// silentStore is a store whose job saves never answer until their
// context ends, as a PostgreSQL gone silent behind a black hole.
type silentStore struct {
	store.Store
	saving chan struct{} // closed when the first save is waiting
	once   sync.Once
}

func (s *silentStore) SaveJob(ctx context.Context, j store.Job) error {
	s.once.Do(func() { close(s.saving) })
	<-ctx.Done()
	return ctx.Err()
}

// Closing the writer gives a store that does not answer drainWait, then
// gives up the writes still in flight: close returns, and their waiters
// get the error rather than a hub's shutdown waiting for the database.
// A write the store answers within drainWait is applied (close drains).
func TestRecWriterCloseGivesUpOnSilentStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &silentStore{Store: memstore.New(), saving: make(chan struct{})}
		w := newRecWriter(context.Background(), st, testlog.New(t))
		saved := w.saveJob(store.Job{ID: "j1", Revision: 2})
		<-st.saving
		t0 := time.Now()
		closed := make(chan struct{})
		go func() {
			w.close()
			close(closed)
		}()
		synctest.Wait()
		select {
		case <-closed:
			t.Fatal("close returned while a write was in flight, before drainWait")
		default:
		}
		<-closed
		if took := time.Since(t0); took != drainWait {
			t.Errorf("close returned %v after it began, want drainWait (%v)", took, drainWait)
		}
		if err := <-saved; !errors.Is(err, context.Canceled) {
			t.Fatalf("the given-up save answered %v, want context.Canceled", err)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		st := &countingStore{Store: memstore.New()}
		if err := st.CreateJob(t.Context(), store.Job{ID: "j1", Revision: 1}); err != nil {
			t.Fatal(err)
		}
		w := newRecWriter(context.Background(), st, testlog.New(t))
		saved := w.saveJob(store.Job{ID: "j1", Revision: 2})
		w.close()
		if err := <-saved; err != nil {
			t.Fatalf("a save queued before close: %v, want it applied", err)
		}
	})
}

// The writer tells how long each write waited for its batch and how long
// each batch took to become durable (vk_hub_record_write_seconds), on a
// fake clock: a write queued behind a 10 ms batch waited 10 ms, and two
// writes of one batch are one commit.
func TestRecWriterObservesWaitAndCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		got := map[string][]time.Duration{}
		w := newRecWriter(t.Context(), memstore.New(), testlog.New(t))
		defer w.close()
		w.observe = func(phase string, s float64) {
			mu.Lock()
			defer mu.Unlock()
			got[phase] = append(got[phase], time.Duration(s*float64(time.Second)).Round(time.Millisecond))
		}
		started := make(chan struct{})
		first := w.do(func(context.Context) error { close(started); time.Sleep(10 * time.Millisecond); return nil })
		<-started // the writer is busy for 10 ms: what follows waits for it
		a := w.doKey("a", func(context.Context) error { time.Sleep(3 * time.Millisecond); return nil })
		b := w.doKey("b", func(context.Context) error { time.Sleep(3 * time.Millisecond); return nil })
		for _, ch := range []<-chan error{first, a, b} {
			if err := <-ch; err != nil {
				t.Fatal(err)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		ms := time.Millisecond
		if want := []time.Duration{0, 10 * ms, 10 * ms}; !slices.Equal(got["wait"], want) {
			t.Errorf("wait = %v, want %v", got["wait"], want)
		}
		if want := []time.Duration{10 * ms, 3 * ms}; !slices.Equal(got["commit"], want) {
			t.Errorf("commit = %v, want %v", got["commit"], want)
		}
	})
}
