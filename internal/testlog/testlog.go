// Package testlog provides a *slog.Logger that writes to t.Log, so a
// component's logs appear with the test that produced them and only when it
// fails (or with -v).
package testlog

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// New returns a logger at Debug level writing through t.Log. Logging after
// the test ended is dropped instead of panicking.
func New(t testing.TB) *slog.Logger {
	w := &writer{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type writer struct {
	t    testing.TB
	mu   sync.Mutex
	done bool
}

func (w *writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Helper()
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

// Discard returns a logger that drops everything, for benchmarks.
func Discard() *slog.Logger { return slog.New(discard{}) }

type discard struct{}

func (discard) Enabled(context.Context, slog.Level) bool  { return false }
func (discard) Handle(context.Context, slog.Record) error { return nil }
func (d discard) WithAttrs([]slog.Attr) slog.Handler      { return d }
func (d discard) WithGroup(string) slog.Handler           { return d }

// Buffer collects what concurrent writers (loggers, a job's output
// pumps) write, for a test to read afterwards or while they run. The zero
// value is ready; Watching makes one that also signals when it first holds
// a string.
type Buffer struct {
	mu   sync.Mutex
	b    strings.Builder
	want string
	seen chan struct{}
}

// Watching returns a Buffer whose Seen channel closes once what was
// written holds want.
func Watching(want string) *Buffer { return &Buffer{want: want, seen: make(chan struct{})} }

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Write(p)
	if l.want != "" && strings.Contains(l.b.String(), l.want) {
		l.want = "" // seen: close once
		close(l.seen)
	}
	return len(p), nil
}

// String returns everything written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Seen is closed once the buffer held the string given to Watching; a
// zero Buffer's never is.
func (l *Buffer) Seen() <-chan struct{} { return l.seen }
