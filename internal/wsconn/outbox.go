package wsconn

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Outbox errors.
var (
	// ErrOverflow: more frames wait unwritten than the Outbox holds; the
	// session must end (its peer would otherwise miss frames).
	ErrOverflow = errors.New("wsconn: outbound queue full")
	// ErrCannotResume: the peer's last processed seq is no longer (or not
	// yet) covered by the Outbox, so the stream cannot continue; start a
	// new session.
	ErrCannotResume = errors.New("wsconn: cannot resume: frames no longer held")
	// ErrOutboxClosed: the Outbox was closed.
	ErrOutboxClosed = errors.New("wsconn: outbox closed")
)

// Outbox is one direction of a resumable session stream (STYLE C6): it
// numbers state-changing frames from 1, queues them for the writer, and
// keeps the last Cap frames so that, when the peer resumes naming the last
// seq it processed, the frames after it are written again ([Outbox.Rewind]).
//
// Push never blocks: when Cap frames already wait unwritten it fails with
// ErrOverflow and the session must end. Frames already written are kept
// for replay and evicted oldest first, as soon as more than Cap frames or
// more than the retention's bytes are held (output frames are up to
// 1 MiB, so a frame count alone would let a session keep a gigabyte).
// The zero value is not usable; use [NewOutbox]. Safe for concurrent use;
// [Outbox.Next] has one caller at a time (the writer).
type Outbox struct {
	mu     sync.Mutex
	cap    int
	retain int      // bytes of written frames kept for replay, at most
	frames [][]byte // frames[i] has seq first+i; guarded by mu
	bytes  int      // sum of len(frames[i]); guarded by mu
	first  uint64   // seq of frames[0]; guarded by mu
	next   uint64   // next seq to assign, ≥ 1; guarded by mu
	cursor uint64   // last seq handed to the writer; guarded by mu
	closed bool     // guarded by mu
	wake   chan struct{}
}

// DefaultRetainBytes bounds the bytes of written frames an Outbox from
// [NewOutbox] keeps for replay.
const DefaultRetainBytes = 64 << 20

// NewOutbox returns an empty Outbox holding at most capacity frames
// (minimum 1) and keeping at most [DefaultRetainBytes] of written frames
// for replay.
func NewOutbox(capacity int) *Outbox { return NewOutboxRetaining(capacity, DefaultRetainBytes) }

// NewOutboxRetaining is [NewOutbox] keeping at most retainBytes of
// written frames for replay (minimum 0: a resume then replays only what
// was never written). Unwritten frames are never evicted, whatever their
// size.
func NewOutboxRetaining(capacity, retainBytes int) *Outbox {
	return &Outbox{cap: max(capacity, 1), retain: max(retainBytes, 0), first: 1, next: 1, wake: make(chan struct{}, 1)}
}

// evictLocked drops written frames, oldest first, while more than cap
// frames or more than retain bytes are held.
func (o *Outbox) evictLocked() {
	for len(o.frames) > 0 && o.first <= o.cursor && (len(o.frames) > o.cap || o.bytes > o.retain) {
		o.bytes -= len(o.frames[0])
		o.frames[0] = nil
		o.frames = o.frames[1:]
		o.first++
	}
}

// Push assigns the next seq, encodes the frame with it and queues it. It
// fails with ErrOverflow (nothing queued) when Cap frames wait unwritten,
// with ErrOutboxClosed after Close, or with encode's error (the seq is not
// used).
func (o *Outbox) Push(encode func(seq uint64) ([]byte, error)) (uint64, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return 0, ErrOutboxClosed
	}
	if int(o.next-1-o.cursor) >= o.cap {
		return 0, fmt.Errorf("%w: %d frames unwritten", ErrOverflow, o.next-1-o.cursor)
	}
	b, err := encode(o.next)
	if err != nil {
		return 0, err
	}
	o.frames = append(o.frames, b)
	o.bytes += len(b)
	seq := o.next
	o.next++
	o.evictLocked()
	select {
	case o.wake <- struct{}{}:
	default:
	}
	return seq, nil
}

// Next returns the next frame to write, waiting for one until ctx ends or
// the Outbox is closed.
func (o *Outbox) Next(ctx context.Context) ([]byte, uint64, error) {
	for {
		o.mu.Lock()
		if o.closed {
			o.mu.Unlock()
			return nil, 0, ErrOutboxClosed
		}
		if o.cursor+1 < o.next {
			seq := o.cursor + 1
			b := o.frames[seq-o.first]
			o.cursor = seq
			o.evictLocked()
			o.mu.Unlock()
			return b, seq, nil
		}
		o.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-o.wake:
		}
	}
}

// Rewind makes the frame after peerLast the next one Next returns, so a
// resumed peer gets every frame it has not processed. It fails with
// ErrCannotResume when peerLast is beyond what was assigned or the frames
// after it were evicted.
func (o *Outbox) Rewind(peerLast uint64) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.canRewindLocked(peerLast) {
		return fmt.Errorf("%w: peer processed %d, held %d..%d", ErrCannotResume, peerLast, o.first, o.next-1)
	}
	o.cursor = peerLast
	select {
	case o.wake <- struct{}{}:
	default:
	}
	return nil
}

// CanRewind reports whether Rewind(peerLast) would succeed.
func (o *Outbox) CanRewind(peerLast uint64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.canRewindLocked(peerLast)
}

func (o *Outbox) canRewindLocked(peerLast uint64) bool {
	return peerLast < o.next && peerLast+1 >= o.first
}

// Reset empties the Outbox for a new session: seq restarts at 1.
func (o *Outbox) Reset() {
	o.mu.Lock()
	defer o.mu.Unlock()
	clear(o.frames)
	o.frames = o.frames[:0]
	o.bytes = 0
	o.first, o.next, o.cursor = 1, 1, 0
}

// Unwritten returns how many frames wait for the writer.
func (o *Outbox) Unwritten() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return int(o.next - 1 - o.cursor)
}

// LastSeq returns the last seq assigned, 0 before the first Push.
func (o *Outbox) LastSeq() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.next - 1
}

// Close makes Push and Next fail with ErrOutboxClosed.
func (o *Outbox) Close() {
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}
