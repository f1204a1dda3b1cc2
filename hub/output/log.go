package output

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/vk-ci/vk/internal/logkey"
)

// DefaultSegmentSize is the size past which a [Log] starts a new segment
// file.
const DefaultSegmentSize = 16 << 20

// compactPerGroup is the most bytes one group copies out of a segment
// being compacted, so that a compaction lengthens no group's commit by
// more than about this many bytes' write.
const compactPerGroup = 1 << 20

// syncFile makes a group's bytes durable (fdatasync on Linux: see
// newSegment); tests replace it, before their first append, to count the
// writer's syncs or make them fail.
var syncFile = syncData

// Log is a [Store] over one directory: every job's output in one
// append-only log of segment files, written by one goroutine in groups
// (see the package doc, Files). Its zero value is not usable; call
// [Open]. Safe for concurrent use.
type Log struct {
	dir     string
	dirf    *os.File // dir, kept open for its fsyncs; closed by Close
	log     *slog.Logger
	segSize int64
	done    chan struct{} // closed by Close: wakes every Wait
	stopped chan struct{} // closed when the writer has ended

	mu       sync.Mutex
	work     sync.Cond           // signalled when queue grows or at Close; uses mu
	closed   bool                // guarded by mu
	jobs     map[string]*logJob  // guarded by mu
	segs     map[uint64]*segment // the segments on disk; guarded by mu
	active   *segment            // the segment the writer appends to; guarded by mu
	queue    []*request          // waiting for the writer; guarded by mu
	stats    LogStats            // guarded by mu
	nextID   uint64              // the next segment's number; Open, then prepare only
	nextSize int64               // the next segment's size; Open, then prepare only
	spare    chan spare          // prepare's next segment for the writer
	prepared chan struct{}       // closed when prepare has ended
	free     []string            // paths of removed segments' files newSegment may reuse; guarded by mu
	buf      []byte              // the writer's group buffer; writer only
}

// LogStats counts a [Log]'s work since it was opened.
type LogStats struct {
	// Groups is how many groups the writer wrote; Syncs how many of them
	// it made durable (a group of marks alone is written but not synced).
	Groups, Syncs int64
	// Appends is how many Append calls wrote bytes.
	Appends int64
	// Segments is how many segment files exist; Bytes their total size;
	// Live the bytes of output in them that a job still owns.
	Segments    int
	Bytes, Live int64
	// Compacted is how many bytes compaction copied.
	Compacted int64
	// Reused is how many segments were made from a removed one's file.
	Reused int64
}

// logJob is one job's output: the extents of the log that hold it, in
// order of their offset, together exactly [0, length).
type logJob struct {
	amu      sync.Mutex // held by an Append, MarkComplete or Drop of the job: one at a time
	length   int64      // guarded by Log.mu
	complete bool       // guarded by Log.mu
	ext      []extent   // guarded by Log.mu
	mark     *segment   // the segment holding its completion mark, if written; guarded by Log.mu
	dropped  bool       // removed from Log.jobs; guarded by Log.mu
	grow     chan struct{}
}

// extent is a run of a job's output: n bytes from offset off, at pos of
// segment seg.
type extent struct {
	off int64
	seg *segment
	pos int64
	n   int64
}

// segment is one file of the log.
type segment struct {
	id      uint64
	f       *os.File
	size    int64 // bytes written to it (the writer appends here)
	cap     int64 // bytes newSegment wrote ahead: the writer rolls past it
	live    int64 // bytes of extents pointing into it
	marks   int   // completion marks of jobs still kept, written in it
	refs    int   // reads and copies under way
	removed bool  // unlinked; closed once refs is 0
}

// request is work for the writer: an append (with a waiter), or a
// completion or drop mark (without one).
type request struct {
	kind   byte
	job    string
	j      *logJob
	off    int64
	data   []byte
	done   chan error // nil for marks
	placed []extent   // where the append's records put its bytes (writer)
}

// copyReq is a run of a job's output that compaction moves out of seg.
type copyReq struct {
	job  string
	j    *logJob
	mark bool // the job's completion mark, not bytes
	from extent
	data []byte
	to   extent
}

var _ Store = (*Log)(nil)

// Open returns a Log over dir, creating dir with mode 0700. It replays the
// segments there, imports the one-file-per-job outputs an older hub left
// (see the package doc, Files), and starts a new segment.
func Open(dir string, log *slog.Logger) (*Log, error) {
	return openLog(dir, log, DefaultSegmentSize)
}

func openLog(dir string, log *slog.Logger, segSize int64) (*Log, error) {
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
	l := &Log{
		dir: dir, dirf: dirf, log: log, segSize: segSize,
		done: make(chan struct{}), stopped: make(chan struct{}),
		spare: make(chan spare), prepared: make(chan struct{}),
		jobs: map[string]*logJob{}, segs: map[uint64]*segment{},
		nextSize: 1 << 20,
	}
	l.work.L = &l.mu
	if err := l.recover(); err != nil {
		l.closeFiles()
		dirf.Close()
		return nil, fmt.Errorf("output: %w", err)
	}
	go l.run()
	go l.prepare()
	return l, nil
}

func segName(id uint64) string { return fmt.Sprintf("%016x%s", id, segSuffix) }

// newSegment makes the next segment file ready, with its directory
// entry durable. Best, the writer's groups overwrite blocks the file
// has written already: then a group's fdatasync flushes data only, with
// no file-system journal commit for a new size or new blocks. So the file
// is a removed segment's, renamed, when there is one (its records name
// their own segment, so replay reads none of them as this one's; see
// retireLocked). Otherwise it is a new file with its size allocated
// (fallocate(2): no size change per group, but the blocks' first writes
// are still journaled), which reads as zeros where nothing was written:
// replay finds the end at a header of zeros.
func (l *Log) newSegment() (*segment, error) {
	id := l.nextID
	path := filepath.Join(l.dir, segName(id))
	l.mu.Lock()
	var reuse string
	if len(l.free) > 0 {
		reuse, l.free = l.free[0], l.free[1:]
	}
	l.mu.Unlock()
	if reuse != "" {
		s, err := l.reuseSegment(reuse, id, path)
		if err == nil {
			l.nextID++
			l.mu.Lock()
			l.stats.Reused++
			l.mu.Unlock()
			return s, nil
		}
		l.log.Warn("output: cannot reuse a segment file; writing a new one", "file", filepath.Base(reuse), logkey.Err, err)
		os.Remove(reuse)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	l.nextID++
	// The first segments after Open are smaller (1 MiB, then twice the
	// last), so that a hub with little output writes little ahead.
	size := min(l.segSize, l.nextSize)
	l.nextSize = min(2*size, l.segSize)
	err = preallocate(f, size)
	if err == nil {
		_, err = f.Write([]byte(segMagic))
	}
	if err == nil {
		err = syncData(f)
	}
	if err == nil {
		err = l.syncDir()
	}
	if err != nil {
		f.Close()
		os.Remove(path)
		return nil, err
	}
	return &segment{id: id, f: f, size: int64(len(segMagic)), cap: size}, nil
}

// reuseSegment renames a removed segment's file, free, to path, segment
// id's.
func (l *Log) reuseSegment(free string, id uint64, path string) (*segment, error) {
	if err := os.Rename(free, path); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil {
		err = l.syncDir()
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return &segment{id: id, f: f, size: int64(len(segMagic)), cap: fi.Size()}, nil
}

// prepare keeps the next segment ready for the writer (see newSegment):
// it creates one, hands it over when the writer rolls, and creates the
// next. A creation that failed is handed over as its error, and tried
// again once the writer has taken it. At Close it removes the segment it
// holds, unused.
func (l *Log) prepare() {
	defer close(l.prepared)
	for {
		s, err := l.newSegment()
		select {
		case l.spare <- spare{s, err}:
		case <-l.done:
			if s != nil {
				s.f.Close()
				os.Remove(filepath.Join(l.dir, segName(s.id)))
			}
			return
		}
	}
}

// spare is a segment prepare made, or why it could not.
type spare struct {
	s   *segment
	err error
}

// syncDir fsyncs the directory through the descriptor kept open for it.
func (l *Log) syncDir() error { return l.dirf.Sync() }

// job returns the job's entry, creating an empty one if create; nil if
// none. The caller holds l.mu.
func (l *Log) jobLocked(job string, create bool) *logJob {
	j := l.jobs[job]
	if j == nil && create {
		j = &logJob{grow: make(chan struct{})}
		l.jobs[job] = j
	}
	return j
}

// lockJob returns the job's entry, created if missing, with its amu held
// (the caller unlocks it).
func (l *Log) lockJob(ctx context.Context, job string) (*logJob, error) {
	if !ValidJob(job) {
		return nil, fmt.Errorf("%w: %q", ErrBadJob, job)
	}
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("output: %w", err)
		}
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return nil, ErrClosed
		}
		j := l.jobLocked(job, true)
		l.mu.Unlock()
		j.amu.Lock()
		l.mu.Lock()
		dropped := j.dropped
		l.mu.Unlock()
		if !dropped {
			return j, nil
		}
		j.amu.Unlock() // raced with Drop: take the fresh entry
	}
}

// enqueueLocked hands r to the writer. The caller holds l.mu.
func (l *Log) enqueueLocked(r *request) {
	l.queue = append(l.queue, r)
	l.work.Signal()
}

func (j *logJob) notifyLocked() {
	close(j.grow)
	j.grow = make(chan struct{})
}

// Append implements [Store.Append] (NODE-12): the chunk's new bytes join
// the writer's next group and are durable when it returns nil.
func (l *Log) Append(ctx context.Context, job string, offset int64, data []byte) (int64, error) {
	if offset < 0 {
		return 0, fmt.Errorf("output: negative offset %d: %w", offset, ErrGap)
	}
	j, err := l.lockJob(ctx, job)
	if err != nil {
		return 0, err
	}
	defer j.amu.Unlock()
	l.mu.Lock()
	length, complete := j.length, j.complete
	switch {
	case l.closed:
		l.mu.Unlock()
		return length, ErrClosed
	case offset > length:
		l.mu.Unlock()
		return length, fmt.Errorf("%w: job %s chunk at %d, output ends at %d", ErrGap, job, offset, length)
	case offset+int64(len(data)) <= length:
		l.mu.Unlock()
		return length, nil // fully old: a duplicate
	case complete:
		l.mu.Unlock()
		return length, fmt.Errorf("%w: job %s", ErrComplete, job)
	}
	r := &request{kind: recAppend, job: job, j: j, off: length, data: data[length-offset:], done: make(chan error, 1)}
	l.enqueueLocked(r)
	l.mu.Unlock()
	// Wait even if ctx ends: the bytes may become durable, and the job's
	// next append must see the length they leave.
	if err := <-r.done; err != nil {
		return length, fmt.Errorf("output: write %s: %w", job, err)
	}
	return length + int64(len(r.data)), nil
}

// ReadAt implements [Store.ReadAt] (API-37, API-38). It reads only bytes
// already durable, and waits for no write.
func (l *Log) ReadAt(ctx context.Context, job string, offset int64, max int) (Chunk, error) {
	if max <= 0 || max > MaxRead {
		max = MaxRead
	}
	if err := checkCall(ctx, job); err != nil {
		return Chunk{}, err
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return Chunk{}, ErrClosed
	}
	var length int64
	var complete bool
	var parts []extent
	j := l.jobs[job]
	if j != nil {
		length, complete = j.length, j.complete
	}
	c := Chunk{Offset: offset, Length: length}
	if offset < 0 || offset > length {
		l.mu.Unlock()
		return c, fmt.Errorf("%w: job %s offset %d, length %d", ErrOffset, job, offset, length)
	}
	n := min(int64(max), length-offset)
	if n > 0 {
		parts = j.slice(offset, n)
		for _, p := range parts {
			p.seg.refs++
		}
	}
	l.mu.Unlock()
	var err error
	if n > 0 {
		c.Data = make([]byte, 0, n)
		for _, p := range parts {
			if err == nil {
				c.Data = c.Data[:len(c.Data)+int(p.n)]
				_, err = p.seg.f.ReadAt(c.Data[len(c.Data)-int(p.n):], p.pos)
			}
		}
		l.mu.Lock()
		for _, p := range parts {
			l.releaseLocked(p.seg)
		}
		l.mu.Unlock()
	}
	if err != nil {
		return Chunk{}, fmt.Errorf("output: read %s: %w", job, err)
	}
	c.Complete = complete && offset+n == length
	return c, nil
}

// slice returns the extents holding [off, off+n), cut to that range. The
// caller holds Log.mu.
func (j *logJob) slice(off, n int64) []extent {
	i, _ := slices.BinarySearchFunc(j.ext, off, func(e extent, off int64) int {
		switch {
		case e.off+e.n <= off:
			return -1
		case e.off > off:
			return 1
		}
		return 0
	})
	var parts []extent
	for end := off + n; i < len(j.ext) && off < end; i++ {
		e := j.ext[i]
		skip := off - e.off
		k := min(e.n-skip, end-off)
		parts = append(parts, extent{off: off, seg: e.seg, pos: e.pos + skip, n: k})
		off += k
	}
	return parts
}

// releaseLocked ends a read's or copy's use of s, closing it if it was
// removed meanwhile. The caller holds l.mu.
func (l *Log) releaseLocked(s *segment) {
	s.refs--
	if s.removed && s.refs == 0 {
		l.retireLocked(s)
	}
}

// MarkComplete implements [Store.MarkComplete]. Its mark is written with
// the writer's next group but not waited for: see the package doc
// (Durability and crash recovery) for why the hub's job record covers a
// crash before the mark is durable.
func (l *Log) MarkComplete(ctx context.Context, job string) error {
	j, err := l.lockJob(ctx, job)
	if err != nil {
		return err
	}
	defer j.amu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if j.complete {
		return nil
	}
	j.complete = true
	j.notifyLocked()
	l.enqueueLocked(&request{kind: recComplete, job: job, j: j})
	return nil
}

// Len implements [Store.Len].
func (l *Log) Len(ctx context.Context, job string) (int64, bool, error) {
	if err := checkCall(ctx, job); err != nil {
		return 0, false, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, false, ErrClosed
	}
	if j := l.jobs[job]; j != nil {
		return j.length, j.complete, nil
	}
	return 0, false, nil
}

// Wait implements [Store.Wait].
func (l *Log) Wait(ctx context.Context, job string, offset int64) error {
	if !ValidJob(job) {
		return fmt.Errorf("%w: %q", ErrBadJob, job)
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	j := l.jobLocked(job, true)
	if j.length > offset || j.complete {
		l.mu.Unlock()
		return nil
	}
	ch := j.grow
	l.mu.Unlock()
	return waitOn(ctx, ch, l.done)
}

// Drop implements [Store.Drop] (API-41): the job's bytes stop counting as
// live, and a segment left with none is removed. Its mark is written with
// the next group but not waited for (see the package doc).
func (l *Log) Drop(ctx context.Context, job string) error {
	if err := checkCall(ctx, job); err != nil {
		return err
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	j := l.jobs[job]
	l.mu.Unlock()
	if j == nil {
		return nil
	}
	j.amu.Lock()
	defer j.amu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if j.dropped || l.closed {
		return nil
	}
	l.forgetLocked(job, j)
	l.enqueueLocked(&request{kind: recDrop, job: job})
	return nil
}

// forgetLocked removes a job's entry and what it holds of the segments.
// The caller holds l.mu.
func (l *Log) forgetLocked(job string, j *logJob) {
	if l.jobs[job] == j {
		delete(l.jobs, job)
	}
	for _, e := range j.ext {
		e.seg.live -= e.n
		l.removeIfDeadLocked(e.seg)
	}
	if j.mark != nil {
		j.mark.marks--
		l.removeIfDeadLocked(j.mark)
	}
	j.ext, j.mark = nil, nil
	j.dropped = true
	j.notifyLocked()
}

// removeIfDeadLocked removes s once it holds no job's bytes or mark and
// the writer has moved on from it. Once no read uses it, its file is
// kept for newSegment to reuse (up to keepFree of them) or unlinked (see
// retireLocked). Neither is synced: a segment that comes back after a
// crash holds nothing any job still owns, or copies of it. The caller
// holds l.mu.
func (l *Log) removeIfDeadLocked(s *segment) {
	if s.live > 0 || s.marks > 0 || s == l.active || s.removed {
		return
	}
	s.removed = true
	delete(l.segs, s.id)
	if s.refs == 0 {
		l.retireLocked(s)
	}
}

// retireLocked closes a removed segment no read or copy uses any more,
// and keeps its file for reuse or unlinks it. The caller holds l.mu.
func (l *Log) retireLocked(s *segment) {
	s.f.Close()
	path := filepath.Join(l.dir, segName(s.id))
	if len(l.free) < keepFree && !l.closed {
		free := filepath.Join(l.dir, segName(s.id)+freeSuffix)
		if err := os.Rename(path, free); err == nil {
			l.free = append(l.free, free)
			return
		}
	}
	if err := os.Remove(path); err != nil {
		l.log.Warn("output: remove segment", "segment", segName(s.id), logkey.Err, err)
	}
}

// freeSuffix names a removed segment's file kept for reuse: replay does
// not read it.
const freeSuffix = ".free"

// keepFree is how many removed segments' files a Log keeps to reuse.
const keepFree = 2

// Sweep drops the outputs of the jobs keep refuses. The hub calls it once
// at start with keep true for every unsettled job: a crash can bring back
// the bytes of a job dropped just before it (its drop mark was not
// synced), and the jobs the hub's records do not know at all have no
// reader. It returns the jobs dropped.
func (l *Log) Sweep(ctx context.Context, keep func(job string) bool) ([]string, error) {
	l.mu.Lock()
	var jobs []string
	for job := range l.jobs {
		if !keep(job) {
			jobs = append(jobs, job)
		}
	}
	l.mu.Unlock()
	slices.Sort(jobs)
	for i, job := range jobs {
		if err := l.Drop(ctx, job); err != nil {
			return jobs[:i], fmt.Errorf("output: sweep: %w", err)
		}
	}
	return jobs, nil
}

// Stats returns the Log's counters.
func (l *Log) Stats() LogStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.stats
	s.Segments = len(l.segs)
	for _, sg := range l.segs {
		s.Bytes += sg.size
		s.Live += sg.live
	}
	return s
}

// Close implements [Store.Close]: it wakes every Wait with ErrClosed,
// lets the writer finish the groups already queued, and makes the marks
// written since the last sync durable. Closing twice is not an error.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		<-l.stopped
		return nil
	}
	l.closed = true
	close(l.done)
	l.work.Broadcast()
	l.mu.Unlock()
	<-l.stopped
	<-l.prepared
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.active != nil {
		if err := syncFile(l.active.f); err != nil {
			l.log.Warn("output: sync at close", logkey.Err, err)
		}
	}
	if err := l.syncDir(); err != nil {
		l.log.Warn("output: sync directory at close", logkey.Err, err)
	}
	for _, free := range l.free {
		os.Remove(free)
	}
	l.free = nil
	l.closeFiles()
	l.dirf.Close()
	return nil
}

// closeFiles closes every segment's file. The caller holds l.mu or is
// the only user.
func (l *Log) closeFiles() {
	for _, s := range l.segs {
		s.f.Close()
	}
	l.segs = map[uint64]*segment{}
	l.active = nil
}
