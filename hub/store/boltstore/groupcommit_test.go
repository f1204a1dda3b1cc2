package boltstore

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func testDB(t *testing.T) (*bolt.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "g.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("b")); return err }); err != nil {
		t.Fatal(err)
	}
	return db, path
}

func put(k string) func(*bolt.Tx) error {
	return func(tx *bolt.Tx) error { return tx.Bucket([]byte("b")).Put([]byte(k), []byte("v")) }
}

// until polls cond (called under g's lock) until it holds: the queue is
// internal state with no event to wait on. The test's verdicts do not
// depend on the poll's timing, only on the state it waits for.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 10000 {
		if cond() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("timed out waiting until %s", what)
}

// queued waits until g holds n queued writes behind a running commit.
func queued(t *testing.T, g *groupCommit, n int) {
	t.Helper()
	until(t, fmt.Sprintf("%d writes queue", n), func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.pending) == n
	})
}

// Writes that arrive while a commit is under way share the next
// transaction; a failed or panicking write in it changes nothing and is
// reported to its own caller only, the others commit; everything any
// caller was told is written survives reopening the file.
//
// spec: FAIL-19
func TestGroupCommit(t *testing.T) {
	db, path := testDB(t)
	g := &groupCommit{db: db}
	release := make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- g.update(func(tx *bolt.Tx) error {
			<-release // hold the commit open while the others queue
			return put("k0")(tx)
		}, nil)
	}()
	until(t, "the first write commits", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.running
	})
	errBoom := errors.New("boom")
	type res struct {
		i     int
		err   error
		panic any
	}
	results := make(chan res, 8)
	fns := []func(*bolt.Tx) error{
		put("k1"),
		func(tx *bolt.Tx) error { put("bad")(tx); return errBoom }, // partial write, then fails
		put("k2"),
		func(tx *bolt.Tx) error { put("worse")(tx); panic("kaput") },
		put("k3"),
	}
	var wg sync.WaitGroup
	for i, fn := range fns {
		queued(t, g, i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if p := recover(); p != nil {
					results <- res{i: i, panic: p}
				}
			}()
			results <- res{i: i, err: g.update(fn, nil)}
		}()
	}
	queued(t, g, len(fns))
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(results)
	for r := range results {
		switch r.i {
		case 1:
			if !errors.Is(r.err, errBoom) {
				t.Errorf("failing write got %v, want boom", r.err)
			}
		case 3:
			if r.panic != "kaput" {
				t.Errorf("panicking write: panic %v err %v, want panic kaput", r.panic, r.err)
			}
		default:
			if r.err != nil || r.panic != nil {
				t.Errorf("write %d: %v %v", r.i, r.err, r.panic)
			}
		}
	}
	g.mu.Lock()
	commits, running := g.commits, g.running
	g.mu.Unlock()
	// One for k0; the batch of five, run again without the failed write
	// and again without the panicking one.
	if commits != 4 || running {
		t.Errorf("%d transactions (running %v), want 4: the five queued writes were not coalesced", commits, running)
	}
	db.Close()
	db2, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	db2.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("b"))
		for _, k := range []string{"k0", "k1", "k2", "k3"} {
			if b.Get([]byte(k)) == nil {
				t.Errorf("%s acknowledged but not on disk", k)
			}
		}
		for _, k := range []string{"bad", "worse"} {
			if b.Get([]byte(k)) != nil {
				t.Errorf("%s: a failed write's partial change was committed", k)
			}
		}
		return nil
	})
}

// Many concurrent writers, some racing for the same key through a
// create-if-absent: each key is created exactly once, every other attempt
// sees it taken, and no acknowledged write is lost.
func TestGroupCommitConcurrent(t *testing.T) {
	db, _ := testDB(t)
	g := &groupCommit{db: db}
	errTaken := errors.New("taken")
	const writers, keys = 32, 8
	wins := make([]int, keys)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := fmt.Sprint(w % keys)
			err := g.update(func(tx *bolt.Tx) error {
				b := tx.Bucket([]byte("b"))
				if b.Get([]byte(k)) != nil {
					return errTaken
				}
				return b.Put([]byte(k), []byte(fmt.Sprint(w)))
			}, nil)
			switch {
			case err == nil:
				mu.Lock()
				wins[w%keys]++
				mu.Unlock()
			case !errors.Is(err, errTaken):
				t.Errorf("writer %d: %v", w, err)
			}
		}()
	}
	wg.Wait()
	for k, n := range wins {
		if n != 1 {
			t.Errorf("key %d created %d times, want once", k, n)
		}
	}
	db.View(func(tx *bolt.Tx) error {
		if n := tx.Bucket([]byte("b")).Stats().KeyN; n != keys {
			t.Errorf("%d keys on disk, want %d", n, keys)
		}
		return nil
	})
}
