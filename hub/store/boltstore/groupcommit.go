package boltstore

import (
	"errors"
	"slices"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// groupCommit coalesces read-write transactions that arrive together into
// one bbolt transaction and one fsync. A write that finds no commit under
// way starts one at once (a lone writer waits for nothing but its own
// fsync); writes that arrive while a commit is under way queue, and the
// first of them commits the whole queue next, in arrival order. Every
// caller returns only after the transaction holding its write committed
// (the bytes are on disk), or with the error that stopped it.
//
// A function that fails makes the batch roll back; the batch then runs
// again without it, so each function sees exactly the state its
// predecessors in the batch leave, and a failed one changes nothing. A
// function may therefore run more than once: it must depend only on the
// transaction (the store's write functions do). A function that panics is
// treated as failed, and its caller panics with the same value.
type groupCommit struct {
	db *bolt.DB

	mu      sync.Mutex
	pending []*gcOp // guarded by mu
	running bool    // a caller is committing; guarded by mu
	holds   int     // gatherings still waiting for some of their writes; guarded by mu
	commits int     // transactions run, for tests; guarded by mu
}

// gcOp is one queued write.
type gcOp struct {
	fn       func(*bolt.Tx) error
	res      chan gcResult // buffered 1: a lead hand-off, then the result
	gathered bool          // made in a Gathering's slot: may wait for the gathering
}

// gcResult is what a queued writer hears: its write's outcome, or that it
// commits the queue next.
type gcResult struct {
	err   error
	lead  bool
	panic any // what fn panicked with, raised again on its caller's goroutine
}

// update runs fn in a read-write transaction shared with the writes that
// arrive together with it, and returns fn's error, or the commit's. slot
// is the write's place in a [Gathering] (nil if none).
func (g *groupCommit) update(fn func(*bolt.Tx) error, slot *gatherSlot) error {
	op := &gcOp{fn: fn, res: make(chan gcResult, 1)}
	g.mu.Lock()
	g.pending = append(g.pending, op)
	slot.arriveLocked()
	op.gathered = slot != nil
	if g.running || (op.gathered && g.holds > 0) {
		g.mu.Unlock()
		r := <-op.res
		if !r.lead {
			return r.get()
		}
		// The previous committer, or the gathering's last write, handed
		// the queue over; op is in it.
	} else {
		g.running = true
		g.mu.Unlock()
	}
	g.mu.Lock()
	batch := g.pending
	g.pending = nil
	g.mu.Unlock()
	g.commit(batch)
	g.mu.Lock()
	g.running = false
	g.handLeadLocked()
	g.mu.Unlock()
	return (<-op.res).get()
}

// handLeadLocked makes the first queued write commit the queue, unless a
// commit is under way, or a gathering still waits for some of its writes
// and every queued write is a gathering's. A write made outside a
// gathering never waits for one (it may be a gathering caller's own
// write under another context, which would otherwise wait for itself).
func (g *groupCommit) handLeadLocked() {
	if g.running || len(g.pending) == 0 {
		return
	}
	if g.holds > 0 && !slices.ContainsFunc(g.pending, func(op *gcOp) bool { return !op.gathered }) {
		return
	}
	g.running = true
	g.pending[0].res <- gcResult{lead: true}
}

// get returns r's error, or panics again with what the write panicked with.
func (r gcResult) get() error {
	if r.panic != nil {
		panic(r.panic)
	}
	return r.err
}

// commit runs batch in one transaction and tells every op its outcome.
func (g *groupCommit) commit(batch []*gcOp) {
	for len(batch) > 0 {
		g.mu.Lock()
		g.commits++
		g.mu.Unlock()
		failed := -1
		var bad gcResult
		err := g.db.Update(func(tx *bolt.Tx) error {
			for i, op := range batch {
				if r := run(op.fn, tx); r.err != nil || r.panic != nil {
					failed, bad = i, r
					return errAborted
				}
			}
			return nil
		})
		if failed >= 0 {
			batch[failed].res <- bad
			batch = slices.Delete(batch, failed, failed+1)
			continue
		}
		for _, op := range batch {
			op.res <- gcResult{err: err}
		}
		return
	}
}

// errAborted rolls back a batch in which one write failed.
var errAborted = errors.New("boltstore: batch aborted")

// run calls fn, catching a panic so that the committer (which may be
// another caller's goroutine) rolls back and carries on.
func run(fn func(*bolt.Tx) error, tx *bolt.Tx) (r gcResult) {
	defer func() {
		if p := recover(); p != nil {
			r = gcResult{panic: p}
		}
	}()
	return gcResult{err: fn(tx)}
}
