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
	commits int     // transactions run, for tests; guarded by mu
}

// gcOp is one queued write.
type gcOp struct {
	fn  func(*bolt.Tx) error
	res chan gcResult // buffered 1: a lead hand-off, then the result
}

// gcResult is what a queued writer hears: its write's outcome, or that it
// commits the queue next.
type gcResult struct {
	err   error
	lead  bool
	panic any // what fn panicked with, raised again on its caller's goroutine
}

// update runs fn in a read-write transaction shared with the writes that
// arrive together with it, and returns fn's error, or the commit's.
func (g *groupCommit) update(fn func(*bolt.Tx) error) error {
	op := &gcOp{fn: fn, res: make(chan gcResult, 1)}
	g.mu.Lock()
	g.pending = append(g.pending, op)
	if g.running {
		g.mu.Unlock()
		r := <-op.res
		if !r.lead {
			return r.get()
		}
		// The previous committer handed the queue over; op is in it.
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
	if len(g.pending) == 0 {
		g.running = false
	} else {
		g.pending[0].res <- gcResult{lead: true}
	}
	g.mu.Unlock()
	return (<-op.res).get()
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
