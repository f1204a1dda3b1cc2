// Package output keeps each job's output on the hub until the job is
// settled (API-39, API-41): append-only, synced to disk before the hub acks
// a chunk to the node (NODE-12), readable from any offset (API-37/38), and
// intact across a hub restart (FAIL-19).
//
// [Store] is the small interface the hub uses, so a networked database
// could hold output for a highly available hub (DESIGN "Later"); [Dir] is
// the implementation over one directory (the hub uses <state_dir>/output),
// and [Mem] an in-memory one for tests and the simulator. Both pass the same
// tests.
//
// # Files
//
// Per job, <dir>/<job>.out holds the output bytes and nothing else; the
// file's mode marks the output complete: it is created 0600 and made
// read-only (0400) by MarkComplete. One file per job, so a job's output
// costs one file creation in the directory (at its first chunk), not two
// (a second, empty <job>.done marked completion until issue 22; [Open]
// converts such marks left by an older hub and removes them). Job IDs are
// restricted to [A-Za-z0-9._-] (not starting with a dot), at most 128
// bytes, so they are safe file names ([ErrBadJob] otherwise). A job's .out
// file stays open between its operations, a bounded number of them at once
// ([DefaultMaxOpen]), closed at Drop and Close.
//
// # Durability and crash recovery
//
// [Dir.Append] writes the new part of a chunk at the current end of the
// file and fsyncs the file (and, when it created the file, the directory)
// before it returns; the hub acks the chunk only after that. No sidecar
// holds the acked length: after a restart the length is the file's length.
// That is safe because the hub writes a chunk only at the current end:
// whatever lies past the last fsynced length after a crash is a prefix of
// the chunk that was being written, i.e. of the node's own byte stream at
// that offset. The node resends from its last acked offset, overlap
// trimming skips the bytes already there, and the stream stays exact. This
// relies on the file system not exposing unwritten (zero-filled) blocks
// after a crash, which ext4 (data=ordered, the default) and XFS guarantee;
// it saves a second fsync per chunk. A failed write or fsync truncates the
// file back to the last good length before Append returns its error.
//
// Completion and removal are not synced on their own: the hub's job
// record is what says a job finished or was settled, and it is written
// durably beside them. [Dir.MarkComplete] changes the file's mode, which
// reaches the disk with the file system's own writeback of the file's
// metadata (or a later fsync); a crash before that leaves the output
// readable as incomplete, and the hub, on restoring a finished job's
// record, marks its output complete again (hub/driver_store.go,
// restoreJob). [Dir.Drop] unlinks the file without fsyncing the directory
// (the settled record already says the output is gone); the unlink
// becomes durable with the next directory fsync (the next job's first
// chunk, or Close). A crash before that can leave a settled job's file
// behind, which nothing reads again: the hub's next start removes it
// ([Dir.Sweep], with every file no unsettled job owns).
//
// # Waiting
//
// [Dir.Wait] blocks until a job's output grows past an offset, is marked
// complete or dropped, the context ends, or the Dir is closed: long polls
// (`GET …/output?wait=`) use it instead of polling.
package output

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/vk-ci/vk/internal/logkey"
)

// MaxRead is the most bytes one read returns (API-37: 1 MiB).
const MaxRead = 1 << 20

// Errors. Returned wrapped; test with errors.Is.
var (
	// ErrGap: a chunk starts past the output's current end (NODE-12: a
	// protocol error; the node must resend from the acked length).
	ErrGap = errors.New("output: chunk leaves a gap")
	// ErrOffset: a read starts past the output's end (API-38: 416).
	ErrOffset = errors.New("output: offset past the end")
	// ErrComplete: new bytes for output already marked complete.
	ErrComplete = errors.New("output: output already complete")
	// ErrBadJob: a job ID that is not a safe file name.
	ErrBadJob = errors.New("output: invalid job ID")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("output: closed")
)

// Store is what the hub needs of an output store. Implementations are safe
// for concurrent use. A job with no output yet reads as empty (length 0,
// not complete); the hub's job records say which jobs exist.
type Store interface {
	// Append adds data, which starts at byte offset of the job's output,
	// and returns the output's length afterwards. Bytes before the current
	// length are skipped (an overlapping or repeated chunk); a chunk
	// entirely before it is a no-op. A chunk starting past the length
	// fails with ErrGap. When Append returns nil the bytes are durable.
	Append(ctx context.Context, job string, offset int64, data []byte) (int64, error)
	// ReadAt returns up to max bytes (at most MaxRead; max <= 0 means
	// MaxRead) from offset. ErrOffset if offset is past the end; reading
	// exactly at the end returns no bytes.
	ReadAt(ctx context.Context, job string, offset int64, max int) (Chunk, error)
	// MarkComplete records that the job ended: no more bytes will come.
	// Idempotent.
	MarkComplete(ctx context.Context, job string) error
	// Len returns the output's length and whether it is complete.
	Len(ctx context.Context, job string) (length int64, complete bool, err error)
	// Wait returns nil once the output's length exceeds offset, it is
	// complete, or it was dropped; or the context's error, or ErrClosed.
	Wait(ctx context.Context, job string, offset int64) error
	// Drop deletes the job's output (settle, API-41). Idempotent.
	Drop(ctx context.Context, job string) error
	// Close wakes every Wait with ErrClosed and refuses further calls.
	Close() error
}

// Chunk is the answer to a read.
type Chunk struct {
	// Data are the bytes read, starting at Offset.
	Data []byte
	// Offset is the first byte's offset (vk-output-offset).
	Offset int64
	// Length is the output's length at the time of the read
	// (vk-output-length).
	Length int64
	// Complete is true when the output is complete and Data reaches its
	// end (vk-output-complete).
	Complete bool
}

// Dir is a [Store] over one directory. Its zero value is not usable; call
// [Open]. Safe for concurrent use.
type Dir struct {
	dir  string
	dirf *os.File // dir, kept open for its fsyncs; closed by Close
	log  *slog.Logger
	done chan struct{} // closed by Close

	mu      sync.Mutex
	closed  bool               // guarded by mu
	jobs    map[string]*jobOut // guarded by mu
	open    list.List          // jobs whose file is kept open, most recent first; guarded by mu
	maxOpen int                // files kept open at most (see files.go)
}

// jobOut is one job's output state. Its data file may be kept open
// between operations (files.go).
type jobOut struct {
	mu       sync.Mutex
	f        *os.File      // the kept data file, nil if none; guarded by mu
	elem     *list.Element // f's place in Dir.open; guarded by Dir.mu
	loaded   bool          // length/complete read from disk; guarded by mu
	length   int64         // durable length in bytes; guarded by mu
	complete bool          // guarded by mu
	dropped  bool          // entry removed from Dir.jobs; guarded by mu
	grow     chan struct{} // closed and replaced on any change; guarded by mu
}

var _ Store = (*Dir)(nil)

// Open returns a Dir over dir, creating it with mode 0700. Existing
// outputs are recovered lazily, on first use of each job; completion
// marks of the format before issue 22 are converted at once (see the
// package doc, Files). log may be nil.
func Open(dir string, log *slog.Logger) (*Dir, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("output: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dirf, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("output: %w", err)
	}
	if err := convertOldMarks(dir, dirf); err != nil {
		dirf.Close()
		return nil, fmt.Errorf("output: %w", err)
	}
	return &Dir{dir: dir, dirf: dirf, log: log, done: make(chan struct{}), jobs: map[string]*jobOut{}, maxOpen: DefaultMaxOpen}, nil
}

// ValidJob reports whether id is acceptable as a job ID here.
func ValidJob(id string) bool {
	if id == "" || len(id) > 128 || id[0] == '.' {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Complete outputs' mode: read-only for the owner. A data file whose
// owner may not write it is complete (see the package doc, Files).
const (
	modeRunning  fs.FileMode = 0o600
	modeComplete fs.FileMode = 0o400
)

// isComplete reports whether a data file's mode marks it complete.
func isComplete(m fs.FileMode) bool { return m.Perm()&0o200 == 0 }

func (d *Dir) dataPath(job string) string { return filepath.Join(d.dir, job+".out") }

// acquire returns the job's state, loaded and locked; the caller unlocks.
func (d *Dir) acquire(ctx context.Context, job string) (*jobOut, error) {
	if !ValidJob(job) {
		return nil, fmt.Errorf("%w: %q", ErrBadJob, job)
	}
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("output: %w", err)
		}
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return nil, ErrClosed
		}
		j := d.jobs[job]
		if j == nil {
			j = &jobOut{grow: make(chan struct{})}
			d.jobs[job] = j
		}
		d.mu.Unlock()
		j.mu.Lock()
		if j.dropped { // raced with Drop; take the fresh entry
			j.mu.Unlock()
			continue
		}
		if !j.loaded {
			if err := d.loadLocked(job, j); err != nil {
				j.mu.Unlock()
				return nil, err
			}
		}
		return j, nil
	}
}

// loadLocked recovers a job's length and completeness from disk: one
// stat of its data file.
func (d *Dir) loadLocked(job string, j *jobOut) error {
	fi, err := os.Stat(d.dataPath(job))
	switch {
	case err == nil:
		j.length, j.complete = fi.Size(), isComplete(fi.Mode())
	case errors.Is(err, fs.ErrNotExist):
		j.length, j.complete = 0, false
	default:
		return fmt.Errorf("output: %w", err)
	}
	j.loaded = true
	return nil
}

// notifyLocked wakes every Wait on j.
func (j *jobOut) notifyLocked() {
	close(j.grow)
	j.grow = make(chan struct{})
}

// Append implements [Store.Append] (NODE-12).
func (d *Dir) Append(ctx context.Context, job string, offset int64, data []byte) (int64, error) {
	if offset < 0 {
		return 0, fmt.Errorf("output: negative offset %d: %w", offset, ErrGap)
	}
	j, err := d.acquire(ctx, job)
	if err != nil {
		return 0, err
	}
	defer j.mu.Unlock()
	if offset > j.length {
		return j.length, fmt.Errorf("%w: job %s chunk at %d, output ends at %d", ErrGap, job, offset, j.length)
	}
	end := offset + int64(len(data))
	if end <= j.length {
		return j.length, nil // fully old: a duplicate
	}
	if j.complete {
		return j.length, fmt.Errorf("%w: job %s", ErrComplete, job)
	}
	fresh := data[j.length-offset:]
	if err := d.writeLocked(job, j, fresh); err != nil {
		return j.length, err
	}
	j.length += int64(len(fresh))
	j.notifyLocked()
	return j.length, nil
}

// writeLocked writes b at j.length and syncs it; on failure it truncates
// the file back to j.length.
func (d *Dir) writeLocked(job string, j *jobOut, b []byte) error {
	f, created, err := d.fileLocked(job, j, true)
	if err != nil {
		return fmt.Errorf("output: open %s: %w", job, err)
	}
	_, err = f.WriteAt(b, j.length)
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		if terr := f.Truncate(j.length); terr != nil {
			// Leave the file as it is and re-read its length next time:
			// what lies past j.length is a prefix of this chunk.
			j.loaded = false
			d.log.Error("output: truncate after failed write", logkey.JobID, job, logkey.Err, terr)
		}
		d.releaseLocked(j, f)
		d.forgetLocked(j)
		return fmt.Errorf("output: write %s: %w", job, err)
	}
	if err := d.releaseLocked(j, f); err != nil {
		return fmt.Errorf("output: close %s: %w", job, err)
	}
	if created {
		if err := d.syncDir(); err != nil {
			return fmt.Errorf("output: sync directory: %w", err)
		}
	}
	return nil
}

// syncDir fsyncs the directory (a file created or removed in it is then
// durable) through the descriptor kept open for it; after Close closed
// it, an operation still under way opens the directory itself.
func (d *Dir) syncDir() error {
	err := d.dirf.Sync()
	if errors.Is(err, os.ErrClosed) {
		return syncDirPath(d.dir)
	}
	return err
}

func syncDirPath(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// ReadAt implements [Store.ReadAt] (API-37, API-38).
func (d *Dir) ReadAt(ctx context.Context, job string, offset int64, max int) (Chunk, error) {
	if max <= 0 || max > MaxRead {
		max = MaxRead
	}
	j, err := d.acquire(ctx, job)
	if err != nil {
		return Chunk{}, err
	}
	defer j.mu.Unlock()
	c := Chunk{Offset: offset, Length: j.length}
	if offset < 0 || offset > j.length {
		return c, fmt.Errorf("%w: job %s offset %d, length %d", ErrOffset, job, offset, j.length)
	}
	n := min(int64(max), j.length-offset)
	if n > 0 {
		f, _, err := d.fileLocked(job, j, false)
		if err != nil {
			return Chunk{}, fmt.Errorf("output: open %s: %w", job, err)
		}
		defer d.releaseLocked(j, f)
		c.Data = make([]byte, n)
		if _, err := f.ReadAt(c.Data, offset); err != nil && !errors.Is(err, io.EOF) {
			return Chunk{}, fmt.Errorf("output: read %s: %w", job, err)
		}
	}
	c.Complete = j.complete && offset+n == j.length
	return c, nil
}

// MarkComplete implements [Store.MarkComplete]: it makes the job's data
// file read-only (creating it, empty, for a job without output). It
// fsyncs nothing: see the package doc (Durability and crash recovery) for
// why the hub's job record covers a crash before the mode reaches the
// disk.
func (d *Dir) MarkComplete(ctx context.Context, job string) error {
	j, err := d.acquire(ctx, job)
	if err != nil {
		return err
	}
	defer j.mu.Unlock()
	if j.complete {
		return nil
	}
	if err := d.markLocked(job, j); err != nil {
		return fmt.Errorf("output: mark %s complete: %w", job, err)
	}
	j.complete = true
	j.notifyLocked()
	return nil
}

// markLocked makes the job's data file read-only, through its kept
// descriptor if it has one.
func (d *Dir) markLocked(job string, j *jobOut) error {
	if j.f != nil {
		return j.f.Chmod(modeComplete)
	}
	path := d.dataPath(job)
	err := os.Chmod(path, modeComplete)
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, modeComplete)
	if err != nil {
		return err
	}
	return f.Close()
}

// Len implements [Store.Len].
func (d *Dir) Len(ctx context.Context, job string) (int64, bool, error) {
	j, err := d.acquire(ctx, job)
	if err != nil {
		return 0, false, err
	}
	defer j.mu.Unlock()
	return j.length, j.complete, nil
}

// Wait implements [Store.Wait].
func (d *Dir) Wait(ctx context.Context, job string, offset int64) error {
	j, err := d.acquire(ctx, job)
	if err != nil {
		return err
	}
	if j.length > offset || j.complete {
		j.mu.Unlock()
		return nil
	}
	ch := j.grow
	j.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("output: %w", ctx.Err())
	case <-d.done:
		return ErrClosed
	}
}

// Drop implements [Store.Drop] (API-41).
func (d *Dir) Drop(ctx context.Context, job string) error {
	j, err := d.acquire(ctx, job)
	if err != nil {
		return err
	}
	defer j.mu.Unlock()
	d.forgetLocked(j)
	// No directory fsync: the settled record says the output is gone (see
	// the package doc).
	if err := os.Remove(d.dataPath(job)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("output: drop %s: %w", job, err)
	}
	d.mu.Lock()
	if d.jobs[job] == j {
		delete(d.jobs, job)
	}
	d.mu.Unlock()
	j.dropped = true
	j.notifyLocked()
	return nil
}

// Close implements [Store.Close]. Closing twice is not an error.
func (d *Dir) Close() error {
	d.mu.Lock()
	if !d.closed {
		d.closed = true
		close(d.done)
	}
	d.mu.Unlock()
	d.closeFiles()
	// Make the drops since the last directory fsync durable; a second
	// Close finds the directory closed, which is no error.
	if err := d.dirf.Sync(); err != nil && !errors.Is(err, os.ErrClosed) {
		d.log.Warn("output: sync directory at close", logkey.Err, err)
	}
	d.dirf.Close()
	return nil
}
