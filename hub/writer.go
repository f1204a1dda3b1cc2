package hub

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/hub/store/boltstore"
	"github.com/vk-ci/vk/internal/logkey"
)

// recWriter applies the driver's record writes on its own goroutine, so
// a store commit (an fsync with bbolt) does not hold up the next
// scheduling event. Writes of one key (a job record, an admission, a
// job's output, the audit log) apply in the order they were queued; saves
// of one job record not yet started coalesce into one (the latest record
// wins), and so do audit entries: entries queued while an audit write is
// still queued join it and go to the store in one write, in order. Keyed writes of different keys queued together go to the store
// together, up to maxBatch at a time, so a store that groups concurrent
// commits makes them durable with one commit instead of one each (bbolt's
// group commit) or commits them in parallel (PostgreSQL); a write without a key waits
// for everything queued before it and holds back everything after. Each
// write returns a channel that receives its error once it is durable
// (buffered; reading it is optional): whoever must not answer or
// acknowledge before the write is durable waits on it, off the driver's
// goroutine. A write is answered only once every write queued before it
// is durable too.
type recWriter struct {
	st interface {
		SaveJob(ctx context.Context, j store.Job) error
		AppendAudit(ctx context.Context, e store.AuditEntry) (store.AuditEntry, error)
	}
	ctx    context.Context
	cancel context.CancelFunc // gives up the writes in flight (close, past drainWait)
	log    *slog.Logger
	max    int  // writes per batch: maxBatch (1 in the benchmark's baseline)
	gather bool // tell a store that can gather a batch's writes (off in the benchmark's baseline)
	// observe, when set, is told how long writes wait and batches take:
	// phase "wait" once per write (queued until its batch goes to the
	// store), "commit" once per batch (until the batch is durable).
	observe func(phase string, seconds float64)

	mu      sync.Mutex
	cond    *sync.Cond
	queue   []*wop          // guarded by mu
	pending map[string]*wop // job ID → its queued save; guarded by mu
	audit   *wop            // the queued audit write not yet started; guarded by mu
	closed  bool            // guarded by mu
	done    chan struct{}
}

// maxBatch bounds the writes one batch sends to the store at once.
const maxBatch = 64

// wop is one queued write.
type wop struct {
	key     string                          // "" for a write ordered against all
	job     string                          // for job saves: the job ID
	rec     store.Job                       // for job saves: the latest record
	audits  []store.AuditEntry              // for audit writes: the entries, in order
	fn      func(ctx context.Context) error // for other writes
	waiters []chan error
	queued  time.Time // when the write was queued (a joined write keeps the first's)
}

func newRecWriter(ctx context.Context, st driverStore, log *slog.Logger) *recWriter {
	w := &recWriter{st: st, log: log, max: maxBatch, gather: true, pending: map[string]*wop{}, done: make(chan struct{})}
	w.ctx, w.cancel = context.WithCancel(ctx)
	w.cond = sync.NewCond(&w.mu)
	go w.run()
	return w
}

// doKey queues fn, ordered against the other writes of key.
func (w *recWriter) doKey(key string, fn func(ctx context.Context) error) <-chan error {
	return w.enqueue(&wop{key: key, fn: fn})
}

// saveJob queues a save of rec (coalescing with a queued save of the same
// job).
func (w *recWriter) saveJob(rec store.Job) <-chan error {
	return w.enqueue(&wop{key: "job:" + rec.ID, job: rec.ID, rec: rec})
}

// auditKey orders audit writes against each other.
const auditKey = "audit"

// appendAudit queues an audit entry; entries queued together are
// written together.
func (w *recWriter) appendAudit(e store.AuditEntry) <-chan error {
	return w.enqueue(&wop{key: auditKey, audits: []store.AuditEntry{e}})
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
	switch {
	case op.job != "":
		if queued := w.pending[op.job]; queued != nil {
			queued.rec = op.rec
			queued.waiters = append(queued.waiters, ch)
			return ch
		}
		w.pending[op.job] = op
	case op.audits != nil:
		if queued := w.audit; queued != nil {
			queued.audits = append(queued.audits, op.audits...)
			queued.waiters = append(queued.waiters, ch)
			return ch
		}
		w.audit = op
	}
	op.waiters, op.queued = []chan error{ch}, time.Now()
	w.queue = append(w.queue, op)
	w.cond.Signal()
	return ch
}

func (w *recWriter) run() {
	defer close(w.done)
	for {
		batch := w.next()
		if batch == nil {
			return
		}
		errs := make([]error, len(batch))
		start := time.Now()
		// The batch's writes reach the store together: a store that can
		// gather them commits them as one (boltstore).
		writeTogether(w.ctx, w.st, w.gather, len(batch), func(ctx context.Context, i int) {
			errs[i] = w.apply(ctx, batch[i])
		})
		if w.observe != nil {
			for _, op := range batch {
				w.observe("wait", start.Sub(op.queued).Seconds())
			}
			w.observe("commit", time.Since(start).Seconds())
		}
		// Answered only once the whole batch is durable, so an answer
		// still means every write queued before it is.
		for i, op := range batch {
			for _, ch := range op.waiters {
				ch <- errs[i]
			}
		}
	}
}

// next waits for writes and takes the next batch off the queue: the
// first write, and while it and those after it have distinct keys, the
// writes after it (at most maxBatch). nil once closed and drained.
func (w *recWriter) next() []*wop {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.queue) == 0 && !w.closed {
		w.cond.Wait()
	}
	if len(w.queue) == 0 {
		return nil
	}
	n := 1
	if w.queue[0].key != "" {
		keys := map[string]bool{w.queue[0].key: true}
		for n < len(w.queue) && n < w.max {
			k := w.queue[n].key
			if k == "" || keys[k] {
				break
			}
			keys[k] = true
			n++
		}
	}
	batch := slices.Clone(w.queue[:n])
	clear(w.queue[:n])
	w.queue = w.queue[n:]
	for _, op := range batch {
		if op.job != "" {
			delete(w.pending, op.job)
		}
		if op == w.audit {
			w.audit = nil
		}
	}
	return batch
}

// gatherer is a store that commits writes made at once from several
// goroutines as one when told they come (boltstore's Gather).
type gatherer interface {
	Gather(n int) *boltstore.Gathering
}

// writeTogether makes n writes at once, write(ctx, i) for each i, and
// returns when all have returned. A lone write runs on the caller's
// goroutine; several run on one goroutine each, in a gathering of st's
// when st can gather and gather is set, so that they commit as one.
func writeTogether(ctx context.Context, st any, gather bool, n int, write func(ctx context.Context, i int)) {
	if n == 1 {
		write(ctx, 0)
		return
	}
	var gat *boltstore.Gathering
	if ga, ok := st.(gatherer); ok && gather {
		gat = ga.Gather(n)
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx := ctx
			if gat != nil {
				ctx = gat.Context(ctx, i)
				defer gat.Done(i)
			}
			write(ctx, i)
		})
	}
	wg.Wait()
}

// apply writes op in ctx (w.ctx, or one carrying its batch's gathering)
// and returns once it is durable.
func (w *recWriter) apply(ctx context.Context, op *wop) error {
	var err error
	switch {
	case op.audits != nil:
		err = w.appendAudits(ctx, op.audits)
		if err != nil {
			w.log.Error("an audit log append failed", logkey.Err, err)
		}
	case op.job != "":
		rec := op.rec
		// The record replaces the stored one as a whole: nothing of the
		// stored one is read (SaveJob).
		err = w.st.SaveJob(ctx, rec)
		if err != nil {
			w.log.Error("saving a job record failed", logkey.JobID, rec.ID, logkey.Err, err)
		}
	default:
		err = op.fn(ctx)
		if err != nil {
			w.log.Error("a record write failed", logkey.Err, err)
		}
	}
	return err
}

// auditBatcher is a store that appends several audit entries in one
// write (boltstore: one transaction).
type auditBatcher interface {
	AppendAudits(ctx context.Context, es []store.AuditEntry) error
}

// appendAudits appends es in order: in one write if the store can,
// else one at a time.
func (w *recWriter) appendAudits(ctx context.Context, es []store.AuditEntry) error {
	if b, ok := w.st.(auditBatcher); ok {
		return b.AppendAudits(ctx, es)
	}
	for _, e := range es {
		if _, err := w.st.AppendAudit(ctx, e); err != nil {
			return err
		}
	}
	return nil
}

// close applies what is queued, then stops. Writes still unanswered
// drainWait after close began are given up: their context is cancelled,
// so a store that does not answer (a PostgreSQL gone silent) fails them
// instead of holding the hub's shutdown until it answers again. Their
// waiters get the error; nothing waiting on them was acknowledged.
func (w *recWriter) close() {
	defer w.cancel()
	w.mu.Lock()
	w.closed = true
	w.cond.Signal()
	w.mu.Unlock()
	t := time.NewTimer(drainWait)
	defer t.Stop()
	select {
	case <-w.done:
		return
	case <-t.C:
	}
	w.log.Error("record writes still unanswered by the store at shutdown; giving them up", "after", drainWait)
	w.cancel()
	<-w.done
}

// drainWait is how long close waits for queued writes before giving them
// up (the hub's default shutdown grace).
const drainWait = DefaultShutdownGraceSecs * time.Second
