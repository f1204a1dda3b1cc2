package spool

import (
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// syncLog records which paths the spool fsyncs, in order, through the
// fsync seam; restore puts the real one back.
type syncLog struct {
	mu    sync.Mutex
	paths []string
}

func recordSyncs(t *testing.T) *syncLog {
	t.Helper()
	l := &syncLog{}
	real := fsync
	fsync = func(f *os.File) error {
		l.mu.Lock()
		l.paths = append(l.paths, f.Name())
		l.mu.Unlock()
		return real(f)
	}
	t.Cleanup(func() { fsync = real })
	return l
}

// take returns the paths synced since the last take.
func (l *syncLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.paths
	l.paths = nil
	return p
}

// A new spool is opened without an fsync (opening it is on the way to the
// job's accepted); the first sync with bytes makes them durable together
// with the spool's directory entries, and later syncs sync the file alone.
// A spool reopened with bytes syncs them, and the entries, at once.
//
// spec: NODE-11
func TestNewSpoolSyncsOnFirstBytes(t *testing.T) {
	log := recordSyncs(t)
	parent := t.TempDir()
	dir := filepath.Join(parent, "job-1")
	out := filepath.Join(dir, outputFile)

	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := log.take(); len(got) != 0 {
		t.Fatalf("Open of a new spool synced %v, want nothing", got)
	}
	appendAll(t, s, []byte("first line\n"))
	if b, err := s.ReadFrom(0, MaxChunk); err != nil || string(b) != "first line\n" {
		t.Fatalf("ReadFrom = %q, %v", b, err)
	}
	if got, want := log.take(), []string{out, dir, parent}; !slices.Equal(got, want) {
		t.Fatalf("first sync: synced %v, want %v", got, want)
	}
	appendAll(t, s, []byte("second line\n"))
	if _, err := s.ReadFrom(11, MaxChunk); err != nil {
		t.Fatal(err)
	}
	if got, want := log.take(), []string{out}; !slices.Equal(got, want) {
		t.Fatalf("second sync: synced %v, want %v", got, want)
	}
	if _, err := s.ReadFrom(23, MaxChunk); err != nil {
		t.Fatal(err)
	}
	if got := log.take(); len(got) != 0 {
		t.Fatalf("a read with nothing new synced %v", got)
	}
	s.Close()

	// Reopened with bytes (a node restart): synced at once.
	s = open(t, dir, Options{})
	if got, want := log.take(), []string{out, dir, parent}; !slices.Equal(got, want) {
		t.Fatalf("reopen: synced %v, want %v", got, want)
	}
	if st := s.Status(); st.Produced != 23 || st.Synced != 23 {
		t.Fatalf("reopened status = %+v", st)
	}
}

// A job that ends without output makes its spool's entries durable when it
// finishes, and the finished spool reopens as finished and empty.
//
// spec: NODE-13
func TestEmptySpoolFinishSyncsEntries(t *testing.T) {
	log := recordSyncs(t)
	parent := t.TempDir()
	dir := filepath.Join(parent, "job-2")
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s.Finish(); err != nil || n != 0 {
		t.Fatalf("Finish = %d, %v", n, err)
	}
	got := log.take()
	if !slices.Equal(got, []string{filepath.Join(dir, finishedFile), dir, parent}) {
		t.Fatalf("Finish synced %v, want the finished file, then the spool's directory and its parent", got)
	}
	s.Close()
	s = open(t, dir, Options{})
	if st := s.Status(); !st.Finished || st.OutputLen != 0 {
		t.Fatalf("reopened status = %+v", st)
	}
}
