// Package output keeps each job's output on the hub until the job is
// settled (API-39, API-41): append-only, durable before the hub acks a
// chunk to the node (NODE-12), readable from any offset (API-37/38), and
// intact across a hub restart (FAIL-19).
//
// [Store] is the small interface the hub uses (hub/store/pgstore keeps
// output in PostgreSQL for a highly available hub); [Log] is the
// implementation over one directory (the hub uses <state_dir>/output),
// and [Mem] an in-memory one for tests and the simulator. All pass the
// same tests.
//
// # Files
//
// Every job's output lives in one log: segment files named by a
// 16-digit hexadecimal number and ".log", each a header and a sequence of
// records (logformat.go): a job's bytes at an offset, the mark that its
// output is complete, or the mark that it was dropped. One goroutine
// writes them. It takes every record queued since its last group, writes
// them with one write at the end of the active segment, and makes them
// durable with one fsync; appends that arrive while a group is synced
// wait for the next one. So under load one fsync carries many jobs'
// chunks, and a job's output costs no file creation, no directory fsync
// and no unlink. Until 7 Dec 2026 (issue 22) the store kept one file
// per job (<job>.out, read-only once complete; before that a second,
// empty <job>.done marked completion): [Open] imports such files into
// the log, then removes them.
//
// A second goroutine makes each segment ready ahead of need, so that a
// group changes no file's size, as a file per job did. It renames the
// file of a removed segment (kept as <number>.free, two at most), whose
// blocks are written already, so a group's fdatasync flushes data only;
// the old records name their own segment, so replay reads none of them
// as the new one's. When there is none, it allocates a new file
// (fallocate(2); it reads as zeros, and its blocks' first writes are
// still journaled): 1 MiB for the first after [Open], twice the last for
// each next one, up to [DefaultSegmentSize]. A group that would not fit
// in the active segment goes to the next.
//
// A segment is removed as soon as no job owns a byte or a mark in it. A
// long-running job's few bytes would keep every segment written during
// its life, so the writer also compacts: with each group it copies up to
// 1 MiB of what jobs still own out of the oldest segment whose owned
// bytes are under a quarter of its size, and points the jobs at the
// copies. It leaves the segment before the active one alone, whose jobs
// are mostly about to be settled. The segments then hold at most about
// four times the output that unsettled jobs own, plus those two.
//
// An index in memory says where each job's bytes are: its extents, in
// order of offset. [Open] rebuilds it by reading every segment.
//
// # Durability and crash recovery
//
// [Log.Append] returns once its chunk's group is durable, and the hub
// acks the chunk only after that. Replay takes a segment's records up to
// the first one that is short or fails its CRC-32C: a torn write at a
// crash, of a group no append had returned for. A record's bytes are
// always what the node sent at that offset, so a record that was written
// but never acked (a crash between the write and the sync, or a failed
// sync) is a prefix of the node's stream there: replay takes it, and the
// node's resend from its last ack is trimmed by overlap. For the same
// reason replay takes a job's bytes from any record that holds them,
// whatever the order: compaction's copies come after later bytes, and a
// segment whose removal did not reach the disk holds copies too.
//
// Completion and drop marks are written with the next group but not
// waited for: the hub's job record is what says a job finished or was
// settled, and it is written durably beside them. A crash before a
// completion mark is durable leaves the output readable as incomplete,
// and the hub, on restoring a finished job's record, marks its output
// complete again (hub/driver_store.go, restoreJob). A crash before a drop
// mark is durable, or after the segment holding it was removed while an
// older one still holds the job's bytes, brings the output back: the
// hub's next start drops it ([Log.Sweep], with every output no unsettled
// job owns). Removing a segment is not synced either: one that comes
// back after a crash holds nothing that is still owned, or copies of it.
//
// # Waiting
//
// [Log.Wait] blocks until a job's output grows past an offset, is marked
// complete or dropped, the context ends, or the Log is closed: long
// polls (`GET …/output?wait=`) use it instead of polling. Reads never
// wait for the writer: they see the bytes already durable.
package output

import (
	"context"
	"errors"
	"fmt"
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

// checkCall returns why a call for job cannot go on: an invalid job ID
// (ErrBadJob) or the context's end.
func checkCall(ctx context.Context, job string) error {
	if !ValidJob(job) {
		return fmt.Errorf("%w: %q", ErrBadJob, job)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("output: %w", err)
	}
	return nil
}

// waitOn is the end of a Wait: nil once grow is closed (the output
// changed), the context's error, or ErrClosed once the store's closed
// channel is.
func waitOn(ctx context.Context, grow, closed <-chan struct{}) error {
	select {
	case <-grow:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("output: %w", ctx.Err())
	case <-closed:
		return ErrClosed
	}
}
