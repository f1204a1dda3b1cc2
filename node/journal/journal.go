// Package journal is the node's durable record of the jobs it accepted
// (NODE-06). A start is written and synced to disk before the node answers
// accepted; a start redelivered after a reconnect (same job ID) is answered
// from the journal and never run twice; the journal follows each job through
// its lifecycle and survives a node restart:
//
//	Accept ──▶ accepted ──Running(stage)──▶ running ──Finished(result)──▶ finished
//	                                                                       │
//	                                       Recorded (hub stored result) ◀──┘
//
// After a restart, [Journal.Unfinished] lists the jobs that were accepted or
// running (the node resumes or fails them), and [Journal.Unrecorded] the jobs
// whose result the hub has not yet recorded (the node repeats the result,
// NSESS-16).
//
// Durability. The journal is one append-only file, journal.log, in its own
// directory. Each record is framed with its length and a CRC-32C (see
// record.go) and every write is followed by fsync of the file before the call
// returns. The directory is fsynced whenever the file's directory entry
// changes — when the file is created and when a compaction renames a new file
// into place — which is what makes the file itself reachable after a crash;
// an fsync of the directory after every append would sync nothing new. A torn
// or corrupt tail left by a crash is detected on [Open], logged, and
// truncated to the last whole record; it never stops the node.
//
// Secrets. A start's spec may hold the job's variables and tokens. The
// directory is created with mode 0700 and the file with 0600. The node
// journals each start without its secrets (dispatch.Start.Redacted: a job
// is never resumed from the journal), so no token reaches this file
// (XFER-16).
//
// Compaction. Once a job's result is written ([Journal.Finished]) its spec
// is no longer needed: the entry drops it from memory at once, and the file
// sheds it at the next compaction, which rewrites the file with only what
// the entries hold now into a temporary file, syncs it, renames it over the
// journal and syncs the directory. A compaction runs when the file has
// grown past twice its size after the last one plus [CompactSlack], and is
// checked after Finished, Recorded and Forget, never in Accept, so a start's
// answer never waits for a rewrite. Finished used to compact every time;
// with KeepRecorded tombstones that rewrote about 400 KB and synced twice
// per job, under the lock every Accept takes (BenchmarkJobCycle,
// docs/benchmarks.md). Recorded jobs are kept as small tombstones (no spec,
// the result kept) so a very late redelivered start is still answered from
// the journal; the newest [KeepRecorded] are kept in memory, and the file
// drops the older ones at its next compaction.
package journal

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/vk-ci/vk/internal/logkey"
)

// FileName is the journal file's name inside its directory.
const FileName = "journal.log"

// KeepRecorded is how many recorded jobs the journal remembers, newest first
// kept, across compactions.
const KeepRecorded = 1024

// keepRecorded is KeepRecorded, lowered by tests.
var keepRecorded = KeepRecorded

// CompactSlack is how far the file may grow past twice its size after the
// last compaction before the next one: about 250 jobs' starts with 4 KiB
// specs.
const CompactSlack = 1 << 20

// compactSlack is CompactSlack, lowered by tests.
var compactSlack int64 = CompactSlack

// Errors.
var (
	// ErrUnknownJob is returned by lifecycle calls for a job never accepted
	// (or forgotten).
	ErrUnknownJob = errors.New("journal: unknown job")
	// ErrPhase is returned for a lifecycle step out of order, such as
	// Running after Finished.
	ErrPhase = errors.New("journal: step out of order")
	// ErrClosed is returned after Close, or after a failed write left the
	// file in a state the journal could not restore.
	ErrClosed = errors.New("journal: closed")
)

// Phase is where a job is in its lifecycle.
type Phase string

// Phases, in order.
const (
	PhaseAccepted Phase = "accepted"
	PhaseRunning  Phase = "running"
	PhaseFinished Phase = "finished"
	PhaseRecorded Phase = "recorded"
)

// Entry is what the journal knows of one job. Slices are copies the caller
// may keep.
type Entry struct {
	// Job is the hub's job ID.
	Job string
	// Reservation is the reservation the start named; "" if none.
	Reservation string
	// Spec is the start as the caller journaled it (opaque bytes, typically
	// the start message's JSON); nil once the job finished (the file sheds
	// it at its next compaction).
	Spec []byte
	// Phase is the job's last journaled step.
	Phase Phase
	// Stage is the last stage journaled as running; "" before any.
	Stage string
	// Result is the result as the caller journaled it (opaque bytes);
	// nil before Finished.
	Result []byte

	seq uint64 // acceptance order
}

func (e *Entry) clone() Entry {
	c := *e
	c.Spec = bytes.Clone(e.Spec)
	c.Result = bytes.Clone(e.Result)
	return c
}

// Journal is an open journal. It is safe for concurrent use.
type Journal struct {
	dir string
	log *slog.Logger

	mu       sync.Mutex
	f        *os.File          // nil once closed or broken
	size     int64             // bytes of whole records in f
	entries  map[string]*Entry // guarded by mu
	seq      uint64            // last acceptance sequence
	recorded []string          // recorded jobs, oldest first
	// base is the file's size after the last compaction (or what a
	// compaction at Open would have written): the file is compacted once
	// it is past 2×base + compactSlack.
	base int64
	// compactions counts the rewrites since Open, for tests.
	compactions int
}

// Open opens the journal in dir, creating dir (0700) and the file (0600) when
// absent, and replays it. A torn or corrupt tail is truncated and logged at
// warn level. log may be nil (discard).
func Open(dir string, log *slog.Logger) (*Journal, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	path := filepath.Join(dir, FileName)
	_, statErr := os.Stat(path)
	created := errors.Is(statErr, os.ErrNotExist)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	j := &Journal{dir: dir, log: log, f: f, entries: map[string]*Entry{}}
	if created {
		if err := syncDir(dir); err != nil {
			f.Close()
			return nil, err
		}
	}
	if err := j.replay(); err != nil {
		f.Close()
		return nil, err
	}
	live, err := j.encodeLocked()
	if err != nil {
		f.Close()
		return nil, err
	}
	j.base = int64(len(live))
	if j.size > j.boundLocked() {
		if err := j.replaceLocked(live); err != nil {
			j.f.Close()
			return nil, err
		}
	}
	return j, nil
}

func (j *Journal) replay() error {
	data, err := io.ReadAll(j.f)
	if err != nil {
		return fmt.Errorf("journal: read: %w", err)
	}
	off := 0
	for off < len(data) {
		r, n, err := decodeRecord(data[off:])
		if err != nil {
			j.log.Warn("journal: torn or corrupt tail truncated",
				"offset", off, "dropped_bytes", len(data)-off, logkey.Err, err)
			if err := j.f.Truncate(int64(off)); err != nil {
				return fmt.Errorf("journal: truncate: %w", err)
			}
			if err := j.f.Sync(); err != nil {
				return fmt.Errorf("journal: sync: %w", err)
			}
			break
		}
		if err := j.apply(r); err != nil {
			j.log.Warn("journal: record skipped", logkey.JobID, r.Job, logkey.Err, err)
		}
		off += n
	}
	j.size = int64(off)
	if _, err := j.f.Seek(j.size, io.SeekStart); err != nil {
		return fmt.Errorf("journal: seek: %w", err)
	}
	return nil
}

// apply updates the in-memory state with r; it is used by replay and by the
// writers after the record is durable.
func (j *Journal) apply(r record) error {
	// Empty and nil are the same on disk (omitempty); make them the same in
	// memory, so an entry reads alike before and after a restart.
	if len(r.Spec) == 0 {
		r.Spec = nil
	}
	if len(r.Result) == 0 {
		r.Result = nil
	}
	e := j.entries[r.Job]
	if e == nil && r.Kind != kindAccepted {
		return fmt.Errorf("%w: %s", ErrUnknownJob, r.Job)
	}
	switch r.Kind {
	case kindAccepted:
		if e != nil {
			return fmt.Errorf("%w: %s accepted twice", ErrPhase, r.Job)
		}
		j.seq++
		j.entries[r.Job] = &Entry{Job: r.Job, Reservation: r.Reservation, Spec: r.Spec, Phase: PhaseAccepted, seq: j.seq}
	case kindRunning:
		if e.Phase != PhaseAccepted && e.Phase != PhaseRunning {
			return fmt.Errorf("%w: %s running after %s", ErrPhase, r.Job, e.Phase)
		}
		e.Phase, e.Stage = PhaseRunning, r.Stage
	case kindFinished:
		if e.Phase != PhaseAccepted && e.Phase != PhaseRunning {
			return fmt.Errorf("%w: %s finished after %s", ErrPhase, r.Job, e.Phase)
		}
		e.Phase, e.Result, e.Spec = PhaseFinished, r.Result, nil
	case kindRecorded:
		if e.Phase != PhaseFinished {
			return fmt.Errorf("%w: %s recorded after %s", ErrPhase, r.Job, e.Phase)
		}
		e.Phase = PhaseRecorded
		j.recorded = append(j.recorded, r.Job)
		// The oldest tombstones beyond keepRecorded are forgotten; the
		// file drops them at its next compaction (a replay forgets them
		// again at the same record).
		if over := len(j.recorded) - keepRecorded; over > 0 {
			for _, id := range j.recorded[:over] {
				delete(j.entries, id)
			}
			j.recorded = slices.Clone(j.recorded[over:])
		}
	case kindForget:
		delete(j.entries, r.Job)
		j.recorded = slices.DeleteFunc(j.recorded, func(s string) bool { return s == r.Job })
	}
	return nil
}

// write appends r durably (write + fsync) and applies it. Callers hold mu.
func (j *Journal) writeLocked(r record) error {
	if j.f == nil {
		return ErrClosed
	}
	b, err := encodeRecord(r)
	if err != nil {
		return err
	}
	if _, err := j.f.Write(b); err != nil {
		return j.undoLocked(fmt.Errorf("journal: write: %w", err))
	}
	if err := j.f.Sync(); err != nil {
		return j.undoLocked(fmt.Errorf("journal: sync: %w", err))
	}
	j.size += int64(len(b))
	return j.apply(r)
}

// undoLocked cuts a failed append off the file; when that fails too the
// journal refuses further writes rather than append after garbage.
func (j *Journal) undoLocked(cause error) error {
	if err := j.f.Truncate(j.size); err != nil {
		j.f.Close()
		j.f = nil
		return errors.Join(cause, ErrClosed)
	}
	if _, err := j.f.Seek(j.size, io.SeekStart); err != nil {
		j.f.Close()
		j.f = nil
		return errors.Join(cause, ErrClosed)
	}
	return cause
}

// Accept journals the start of job durably and reports fresh = true; the
// caller may answer accepted once it returns nil (NODE-06). When job is
// already journaled (a redelivered start) nothing is written: the existing
// entry is returned with fresh = false, and the caller answers from it and
// must not run the job again.
func (j *Journal) Accept(job, reservation string, spec []byte) (e Entry, fresh bool, err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if old, ok := j.entries[job]; ok {
		return old.clone(), false, nil
	}
	if job == "" {
		return Entry{}, false, fmt.Errorf("%w: empty job ID", ErrUnknownJob)
	}
	if err := j.writeLocked(record{Kind: kindAccepted, Job: job, Reservation: reservation, Spec: bytes.Clone(spec)}); err != nil {
		return Entry{}, false, err
	}
	return j.entries[job].clone(), true, nil
}

// Running journals that job started stage.
func (j *Journal) Running(job, stage string) error {
	return j.step(record{Kind: kindRunning, Job: job, Stage: stage}, PhaseAccepted, PhaseRunning)
}

// Finished journals job's result and drops its spec from memory; the file
// sheds it at its next compaction.
func (j *Journal) Finished(job string, result []byte) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.stepLocked(record{Kind: kindFinished, Job: job, Result: bytes.Clone(result)}, PhaseAccepted, PhaseRunning); err != nil {
		return err
	}
	j.maybeCompactLocked()
	return nil
}

// Recorded journals that the hub stored job's result (NSESS-10): the node
// stops repeating it. Recording a job already recorded is a no-op.
func (j *Journal) Recorded(job string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if e, ok := j.entries[job]; ok && e.Phase == PhaseRecorded {
		return nil
	}
	if err := j.stepLocked(record{Kind: kindRecorded, Job: job}, PhaseFinished); err != nil {
		return err
	}
	j.maybeCompactLocked()
	return nil
}

// Forget drops job's entry entirely, whatever its phase.
func (j *Journal) Forget(job string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.entries[job]; !ok {
		return nil
	}
	if err := j.writeLocked(record{Kind: kindForget, Job: job}); err != nil {
		return err
	}
	j.maybeCompactLocked()
	return nil
}

func (j *Journal) step(r record, from ...Phase) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.stepLocked(r, from...)
}

func (j *Journal) stepLocked(r record, from ...Phase) error {
	e, ok := j.entries[r.Job]
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownJob, r.Job)
	}
	if !slices.Contains(from, e.Phase) {
		return fmt.Errorf("%w: %s after %s", ErrPhase, r.Kind, e.Phase)
	}
	return j.writeLocked(r)
}

// boundLocked is the size past which the file is compacted.
func (j *Journal) boundLocked() int64 { return 2*j.base + compactSlack }

// maybeCompactLocked compacts the file once it is past its bound. The
// write that brought it there is durable already: a failed compaction is
// logged and tried again after the next write, not returned.
func (j *Journal) maybeCompactLocked() {
	if j.f == nil || j.size <= j.boundLocked() {
		return
	}
	live, err := j.encodeLocked()
	if err == nil {
		err = j.replaceLocked(live)
	}
	if err != nil {
		j.log.Error("journal: compaction failed; tried again after the next write", logkey.Err, err)
	}
}

// encodeLocked returns the records a compacted file holds: each entry's
// steps in acceptance order (finished jobs without their spec), then the
// recorded records in the order they were recorded, so the newest are still
// the ones kept after a reopen.
func (j *Journal) encodeLocked() ([]byte, error) {
	var buf bytes.Buffer
	for _, e := range j.sortedLocked(func(*Entry) bool { return true }) {
		recs := []record{{Kind: kindAccepted, Job: e.Job, Reservation: e.Reservation, Spec: e.Spec}}
		if e.Stage != "" {
			recs = append(recs, record{Kind: kindRunning, Job: e.Job, Stage: e.Stage})
		}
		if e.Phase == PhaseFinished || e.Phase == PhaseRecorded {
			recs = append(recs, record{Kind: kindFinished, Job: e.Job, Result: e.Result})
		}
		for _, r := range recs {
			b, err := encodeRecord(r)
			if err != nil {
				return nil, err
			}
			buf.Write(b)
		}
	}
	for _, id := range j.recorded {
		b, err := encodeRecord(record{Kind: kindRecorded, Job: id})
		if err != nil {
			return nil, err
		}
		buf.Write(b)
	}
	return buf.Bytes(), nil
}

// replaceLocked makes live the journal: written to a temporary file,
// synced, renamed over the journal, and the directory synced.
func (j *Journal) replaceLocked(live []byte) error {
	if j.f == nil {
		return ErrClosed
	}
	tmp := filepath.Join(j.dir, FileName+".tmp")
	nf, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("journal: compact: %w", err)
	}
	if _, err := nf.Write(live); err != nil {
		nf.Close()
		return fmt.Errorf("journal: compact: %w", err)
	}
	if err := nf.Sync(); err != nil {
		nf.Close()
		return fmt.Errorf("journal: compact: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(j.dir, FileName)); err != nil {
		nf.Close()
		return fmt.Errorf("journal: compact: %w", err)
	}
	// The new file is the journal now, whatever happens next.
	j.f.Close()
	j.f = nf
	j.size, j.base = int64(len(live)), int64(len(live))
	j.compactions++
	return syncDir(j.dir)
}

// sortedLocked returns copies of the entries keep accepts, in acceptance
// order.
func (j *Journal) sortedLocked(keep func(*Entry) bool) []Entry {
	var out []Entry
	for _, e := range j.entries {
		if keep(e) {
			out = append(out, e.clone())
		}
	}
	slices.SortFunc(out, func(a, b Entry) int {
		switch {
		case a.seq < b.seq:
			return -1
		case a.seq > b.seq:
			return 1
		}
		return 0
	})
	return out
}

// Get returns job's entry; ok is false when the journal has none.
func (j *Journal) Get(job string) (e Entry, ok bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if p, ok := j.entries[job]; ok {
		return p.clone(), true
	}
	return Entry{}, false
}

// Unfinished returns the jobs accepted or running, in acceptance order.
func (j *Journal) Unfinished() []Entry {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.sortedLocked(func(e *Entry) bool { return e.Phase == PhaseAccepted || e.Phase == PhaseRunning })
}

// Unrecorded returns the jobs finished whose result the hub has not recorded,
// in acceptance order.
func (j *Journal) Unrecorded() []Entry {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.sortedLocked(func(e *Entry) bool { return e.Phase == PhaseFinished })
}

// Stats is what [Journal.Stats] reports.
type Stats struct {
	// Bytes is the file's size: its whole records.
	Bytes int64
	// Compactions counts the rewrites since Open (one at Open included).
	Compactions int
}

// Stats reports the file's size and the compactions since Open.
func (j *Journal) Stats() Stats {
	j.mu.Lock()
	defer j.mu.Unlock()
	return Stats{Bytes: j.size, Compactions: j.compactions}
}

// Close closes the file. Every call after it returns [ErrClosed].
func (j *Journal) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil
	}
	err := j.f.Close()
	j.f = nil
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("journal: sync dir: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("journal: sync dir: %w", err)
	}
	return nil
}
