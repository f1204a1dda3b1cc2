package hub

import (
	"context"
	"log/slog"
	"sync"

	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/internal/logkey"
)

// recWriter applies the driver's record writes in order on its own
// goroutine, so a store commit (an fsync with bbolt) does not hold up the
// next scheduling event. Writes apply in the order they were queued; saves
// of one job record not yet started coalesce into one (the latest record
// wins). Each write returns a channel that receives its error once it is
// durable (buffered; reading it is optional): whoever must not answer or
// acknowledge before the write is durable waits on it, off the driver's
// goroutine.
type recWriter struct {
	st interface {
		UpdateJob(ctx context.Context, id string, fn func(*store.Job) error) (store.Job, error)
	}
	ctx context.Context
	log *slog.Logger

	mu      sync.Mutex
	cond    *sync.Cond
	queue   []*wop          // guarded by mu
	pending map[string]*wop // job ID → its queued save; guarded by mu
	closed  bool            // guarded by mu
	done    chan struct{}
}

// wop is one queued write.
type wop struct {
	job     string                          // for job saves: the job ID
	rec     store.Job                       // for job saves: the latest record
	fn      func(ctx context.Context) error // for other writes
	waiters []chan error
}

func newRecWriter(ctx context.Context, st driverStore, log *slog.Logger) *recWriter {
	w := &recWriter{st: st, ctx: ctx, log: log, pending: map[string]*wop{}, done: make(chan struct{})}
	w.cond = sync.NewCond(&w.mu)
	go w.run()
	return w
}

// do queues fn.
func (w *recWriter) do(fn func(ctx context.Context) error) <-chan error {
	return w.enqueue(&wop{fn: fn})
}

// saveJob queues a save of rec (coalescing with a queued save of the same
// job).
func (w *recWriter) saveJob(rec store.Job) <-chan error {
	return w.enqueue(&wop{job: rec.ID, rec: rec})
}

// enqueue queues op (without waiters) and returns the channel that
// receives its error; after close, errStopped at once. A job save
// (op.job set) whose job has a save queued and not yet started joins that
// save instead: the queued save takes op's record (the latest wins) and
// keeps its place in the queue.
func (w *recWriter) enqueue(op *wop) <-chan error {
	ch := make(chan error, 1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		ch <- errStopped
		return ch
	}
	if op.job != "" {
		if queued := w.pending[op.job]; queued != nil {
			queued.rec = op.rec
			queued.waiters = append(queued.waiters, ch)
			return ch
		}
		w.pending[op.job] = op
	}
	op.waiters = []chan error{ch}
	w.queue = append(w.queue, op)
	w.cond.Signal()
	return ch
}

func (w *recWriter) run() {
	defer close(w.done)
	for {
		w.mu.Lock()
		for len(w.queue) == 0 && !w.closed {
			w.cond.Wait()
		}
		if len(w.queue) == 0 {
			w.mu.Unlock()
			return
		}
		op := w.queue[0]
		w.queue[0] = nil
		w.queue = w.queue[1:]
		if op.job != "" {
			delete(w.pending, op.job)
		}
		w.mu.Unlock()

		var err error
		if op.job != "" {
			rec := op.rec
			_, err = w.st.UpdateJob(w.ctx, rec.ID, func(r *store.Job) error { *r = rec; return nil })
			if err != nil {
				w.log.Error("saving a job record failed", logkey.JobID, rec.ID, logkey.Err, err)
			}
		} else {
			err = op.fn(w.ctx)
			if err != nil {
				w.log.Error("a record write failed", logkey.Err, err)
			}
		}
		for _, ch := range op.waiters {
			ch <- err
		}
	}
}

// close applies what is queued, then stops.
func (w *recWriter) close() {
	w.mu.Lock()
	w.closed = true
	w.cond.Signal()
	w.mu.Unlock()
	<-w.done
}
