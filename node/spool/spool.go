// Package spool is a job's output spool on the node (NODE-11, NODE-13): every
// byte the trace pipeline produces is appended to a file at its offset, sent
// to the hub from there, and kept until the job is done with, so that after a
// reconnect — or a node restart — the sender resends from the offset the hub
// acked.
//
// Offsets are bytes of the trace as GitLab will store it (NODE-10); the
// spool does not look at them. One spool is one directory holding:
//
//	output   the bytes, offset 0 first; never rewritten, only appended
//	ack      the last ack (offset + CRC), rewritten in place, not synced
//	finished the output length, written once with fsync when output ends
//
// Durability, and why fsync is batched. Appends are not synced one by one:
// the trace pipeline writes many small lines, and an fsync per line would
// cost more than the job. Instead a byte is synced before it can leave the
// node: [Spool.ReadFrom] syncs the file before returning bytes the sender will
// send, so one fsync covers a whole chunk (≤ 256 KiB), and nothing the hub
// can ack is lost by a node crash — the hub's offset never runs past the
// node's file. [Spool.Finish] syncs the tail. Bytes not yet sent live in the
// file (page cache) and survive a node process crash; a caller wanting a
// bound on what a power loss drops while the hub is unreachable calls
// [Spool.Sync] on a timer. Every unacked byte is kept on disk: the spool
// never frees bytes; [Spool.Remove] deletes the directory once the job's
// result is recorded.
//
// The ack file is written without fsync: an ack lost in a crash only means
// resending bytes the hub already holds, which it trims (NODE-12).
//
// A new spool is not synced when it is opened. Opening one is on the way to
// a job's accepted (the node's hand-off), and a spool that crashes before its
// first byte left the node loses nothing: it held nothing the hub has seen,
// and reopening it after a restart makes an empty one. The first sync that
// has bytes to sync (the first [Spool.ReadFrom] with output, or
// [Spool.Finish]) also makes the spool's directory entries durable: its
// files in its own directory, and the directory in its parent.
//
// Flow control. The spec bounds what is in flight: the sender sends at most
// [Window] (4 MiB) past the last ack, and ReadFrom never returns bytes beyond
// it. The producer is held back too: [Spool.Append] and [Spool.Reserve] block
// (until an ack, or ctx ends) while more than Options.Limit bytes are
// produced but unacked. The limit defaults to Window, as the node's design
// asks; an operator who wants jobs to run on through a long hub outage
// (FAIL-18: "keeps running the job and spooling output") raises it — the
// spec's 4 MiB bounds what is sent, not what is spooled, so a larger limit
// stays within the spec.
package spool

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sync"
)

// Window is the most bytes the node sends past the hub's last ack (NODE-11).
const Window = 4 << 20

// MaxChunk is the most bytes in one output message, counted before base64
// (NSESS-15, DECISIONS 12).
const MaxChunk = 256 << 10

// File names inside a spool directory.
const (
	outputFile   = "output"
	ackFile      = "ack"
	finishedFile = "finished"
)

// Errors.
var (
	// ErrClosed is returned by calls after Close, and by Append after Finish.
	ErrClosed = errors.New("spool: closed")
	// ErrOffset is returned for an offset outside [0, produced].
	ErrOffset = errors.New("spool: offset out of range")
	// ErrAckBeyond is returned for an ack past the bytes the spool could
	// have sent: a protocol error by the hub.
	ErrAckBeyond = errors.New("spool: ack beyond sent output")
	// ErrTooLarge is returned by Reserve for more than the limit at once.
	ErrTooLarge = errors.New("spool: reservation larger than the limit")
)

// Options tune a spool. The zero value is the default.
type Options struct {
	// Limit is the most bytes produced but not acked before Append blocks.
	// 0 means Window. A value below Window is raised to Window.
	Limit int64
}

// Status is a spool's position.
type Status struct {
	// Produced is the bytes appended: the next byte's offset.
	Produced int64
	// Synced is the bytes known to be on disk (≤ Produced).
	Synced int64
	// Acked is the hub's last ack (≤ Synced).
	Acked int64
	// Finished is true once the output ended; OutputLen is then its length.
	Finished  bool
	OutputLen int64
}

// Spool is one job's output spool. It is safe for concurrent use by one
// producer and one sender.
type Spool struct {
	dir   string
	limit int64

	mu       sync.Mutex
	out      *os.File // nil once closed
	ack      *os.File
	produced int64
	synced   int64
	// dirsSynced: the spool's directory entries (its files, and itself in
	// its parent) are durable; false for a spool made by this Open until
	// its first sync.
	dirsSynced bool
	acked      int64
	finished   bool
	outLen     int64
	changed    chan struct{} // closed and replaced when acked or finished changes
	ready      chan struct{} // capacity 1: signalled when bytes are appended or output ends
}

// Open opens the spool in dir, creating it (0700, files 0600) when absent.
// On a reopen after a restart it finds the produced length (the file's size,
// synced at once), the last ack known and whether the output had finished.
func Open(dir string, opt Options) (*Spool, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	out, err := os.OpenFile(filepath.Join(dir, outputFile), os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	ack, err := os.OpenFile(filepath.Join(dir, ackFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		out.Close()
		return nil, fmt.Errorf("spool: %w", err)
	}
	s := &Spool{dir: dir, limit: max(opt.Limit, Window), out: out, ack: ack, changed: make(chan struct{}), ready: make(chan struct{}, 1)}
	fail := func(err error) (*Spool, error) {
		out.Close()
		ack.Close()
		return nil, fmt.Errorf("spool: %w", err)
	}
	fi, err := out.Stat()
	if err != nil {
		return fail(err)
	}
	// A spool found with bytes was written by an earlier run: they are
	// synced at once, with the entries that lead to them, since the sender
	// may send any of them. An empty one (a new spool, or one that had no
	// byte yet) waits for its first sync (see the package doc).
	if fi.Size() > 0 {
		if err := fsync(out); err != nil {
			return fail(err)
		}
		if err := s.syncDirsLocked(); err != nil {
			return fail(err)
		}
	}
	s.produced, s.synced = fi.Size(), fi.Size()
	s.acked = min(readAck(ack), s.produced)
	if b, err := os.ReadFile(filepath.Join(dir, finishedFile)); err == nil {
		if n, ok := decodeOffset(b); ok && n <= s.produced {
			s.finished, s.outLen = true, n
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fail(err)
	}
	return s, nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// encodeOffset frames an offset as 8 bytes little-endian + CRC-32C.
func encodeOffset(n int64) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(n))
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// decodeOffset reverses encodeOffset; ok is false for anything torn.
func decodeOffset(b []byte) (int64, bool) {
	if len(b) != 12 {
		return 0, false
	}
	if crc32.Checksum(b[:8], castagnoli) != binary.LittleEndian.Uint32(b[8:]) {
		return 0, false
	}
	n := int64(binary.LittleEndian.Uint64(b))
	return n, n >= 0
}

func readAck(f *os.File) int64 {
	b := make([]byte, 12)
	if n, _ := f.ReadAt(b, 0); n != 12 {
		return 0
	}
	v, _ := decodeOffset(b)
	return v
}

// Reserve blocks until n more bytes may be produced — produced minus acked
// plus n at most the limit — or ctx ends (ctx.Err()) or the spool is
// finished or closed ([ErrClosed]). n above the limit is [ErrTooLarge].
// With one producer, an Append of n bytes right after does not block.
func (s *Spool) Reserve(ctx context.Context, n int64) error {
	if n > s.limit {
		return fmt.Errorf("%w: %d > %d", ErrTooLarge, n, s.limit)
	}
	for {
		s.mu.Lock()
		ok, err := s.roomLocked(n)
		ch := s.changed
		s.mu.Unlock()
		if err != nil || ok {
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *Spool) roomLocked(n int64) (bool, error) {
	if s.out == nil || s.finished {
		return false, ErrClosed
	}
	return s.produced-s.acked+n <= s.limit, nil
}

// Append adds p to the output and returns the offset after it. It writes p
// in pieces, each waiting as [Spool.Reserve] does, so it blocks while the
// unacked bytes are at the limit; on ctx's end it returns what it wrote so
// far with ctx.Err().
func (s *Spool) Append(ctx context.Context, p []byte) (end int64, err error) {
	for len(p) > 0 {
		piece := p[:min(int64(len(p)), s.limit)]
		if err := s.Reserve(ctx, int64(len(piece))); err != nil {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.produced, err
		}
		s.mu.Lock()
		if s.out == nil || s.finished {
			s.mu.Unlock()
			return s.produced, ErrClosed
		}
		n, err := s.out.Write(piece)
		s.produced += int64(n)
		end = s.produced
		s.signalLocked()
		s.mu.Unlock()
		if err != nil {
			return end, fmt.Errorf("spool: write: %w", err)
		}
		p = p[n:]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.produced, nil
}

// Sync makes every byte produced so far durable.
func (s *Spool) Sync() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.syncLocked()
}

func (s *Spool) syncLocked() error {
	if s.out == nil {
		return ErrClosed
	}
	if s.synced == s.produced {
		return nil
	}
	if err := fsync(s.out); err != nil {
		return fmt.Errorf("spool: sync: %w", err)
	}
	if err := s.syncDirsLocked(); err != nil {
		return err
	}
	s.synced = s.produced
	return nil
}

// syncDirsLocked makes the spool's directory entries durable once: its
// files in its directory, and its directory in the parent.
func (s *Spool) syncDirsLocked() error {
	if s.dirsSynced {
		return nil
	}
	if err := syncDir(s.dir); err != nil {
		return err
	}
	if err := syncDir(filepath.Dir(s.dir)); err != nil {
		return err
	}
	s.dirsSynced = true
	return nil
}

// ReadFrom returns the next chunk to send from offset off: at most max bytes
// (capped at [MaxChunk]), never past [Window] beyond the last ack, synced to
// disk before it is returned. It returns an empty chunk when there is nothing
// to send from off yet (caught up, or the window is full). Each call that
// finds unsynced bytes costs one fsync, so a sender reads when [Spool.Ready]
// fires and batches as the session's flush interval allows. off outside
// [0, produced] is [ErrOffset]. Use it after a reconnect with the hub's acked
// offset (NSESS-24), and then with the end of each chunk sent.
func (s *Spool) ReadFrom(off int64, max int) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.out == nil {
		return nil, ErrClosed
	}
	if off < 0 || off > s.produced {
		return nil, fmt.Errorf("%w: %d not in [0, %d]", ErrOffset, off, s.produced)
	}
	if err := s.syncLocked(); err != nil {
		return nil, err
	}
	end := min(s.synced, off+int64(min(max, MaxChunk)), s.acked+Window)
	if end <= off {
		return nil, nil
	}
	b := make([]byte, end-off)
	if _, err := s.out.ReadAt(b, off); err != nil {
		return nil, fmt.Errorf("spool: read: %w", err)
	}
	return b, nil
}

// Ack records that the hub stored the output up to off (NSESS-08) and wakes
// a producer waiting for room. Acks only move forward: one at or below the
// last is ignored. An ack past the synced bytes — bytes never sent — is
// [ErrAckBeyond].
func (s *Spool) Ack(off int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.out == nil {
		return ErrClosed
	}
	if off > s.synced {
		return fmt.Errorf("%w: %d > %d", ErrAckBeyond, off, s.synced)
	}
	if off <= s.acked {
		return nil
	}
	s.acked = off
	s.broadcastLocked()
	if _, err := s.ack.WriteAt(encodeOffset(off), 0); err != nil {
		return fmt.Errorf("spool: write ack: %w", err)
	}
	return nil
}

// Ready returns a channel that receives after bytes are appended or the
// output finishes: the sender's cue to call [Spool.ReadFrom]. Signals
// coalesce (one pending at most), so a single sender drains with ReadFrom
// until it returns an empty chunk after each receive.
func (s *Spool) Ready() <-chan struct{} { return s.ready }

func (s *Spool) signalLocked() {
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

func (s *Spool) broadcastLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Finish ends the output: no more appends; the output length is what was
// produced. It syncs the output and records the length durably, so a node
// restart still knows it. Calling it again returns the same length.
func (s *Spool) Finish() (outputLen int64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.out == nil {
		return 0, ErrClosed
	}
	if s.finished {
		return s.outLen, nil
	}
	if err := s.syncLocked(); err != nil {
		return 0, err
	}
	if err := writeSynced(filepath.Join(s.dir, finishedFile), encodeOffset(s.produced)); err != nil {
		return 0, err
	}
	// writeSynced synced the spool's directory; a spool that never synced
	// bytes (a job without output) still needs its own entry in the parent.
	if !s.dirsSynced {
		if err := syncDir(filepath.Dir(s.dir)); err != nil {
			return 0, err
		}
		s.dirsSynced = true
	}
	s.finished, s.outLen = true, s.produced
	s.broadcastLocked()
	s.signalLocked()
	return s.outLen, nil
}

// AllAcked reports whether the output has finished and every byte up to its
// length is acked: the result may be sent (NODE-13).
func (s *Spool) AllAcked() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.finished && s.acked >= s.outLen
}

// WaitAllAcked blocks until [Spool.AllAcked] is true, ctx ends (ctx.Err()) or
// the spool is closed ([ErrClosed]).
func (s *Spool) WaitAllAcked(ctx context.Context) error {
	for {
		s.mu.Lock()
		done := s.finished && s.acked >= s.outLen
		closed := s.out == nil
		ch := s.changed
		s.mu.Unlock()
		switch {
		case done:
			return nil
		case closed:
			return ErrClosed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Status returns the spool's position.
func (s *Spool) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Status{Produced: s.produced, Synced: s.synced, Acked: s.acked, Finished: s.finished, OutputLen: s.outLen}
}

// Close releases the files, leaving the spool on disk to be reopened. Waiters
// return [ErrClosed].
func (s *Spool) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.out == nil {
		return nil
	}
	err := errors.Join(s.out.Close(), s.ack.Close())
	s.out, s.ack = nil, nil
	s.broadcastLocked()
	return err
}

// Remove closes the spool and deletes its directory; call it once the job's
// result is recorded.
func (s *Spool) Remove() error {
	err := s.Close()
	return errors.Join(err, os.RemoveAll(s.dir))
}

func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = fsync(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("spool: sync dir: %w", err)
	}
	defer d.Close()
	if err := fsync(d); err != nil {
		return fmt.Errorf("spool: sync dir: %w", err)
	}
	return nil
}

// fsync is f.Sync; tests count the spool's syncs through it.
var fsync = (*os.File).Sync
