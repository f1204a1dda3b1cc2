package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/internal/wsconn"
)

// link is one WebSocket connection carrying a session. A resumed node
// session outlives its links.
type link struct {
	c      *wsconn.Conn
	ctx    context.Context // ends when the link is torn down
	cancel context.CancelFunc
	done   chan struct{} // closed when the reader has finished (and the Down callback returned)
	wdone  chan struct{} // closed when the writer has finished

	closing chan struct{} // closed when an ending's error frame and close handshake are done; nil until an ending starts (guarded by the session's mu)
}

func newLink(c *wsconn.Conn) *link {
	ctx, cancel := context.WithCancel(context.Background())
	return &link{c: c, ctx: ctx, cancel: cancel, done: make(chan struct{}), wdone: make(chan struct{})}
}

// write pumps out's frames to the connection until the link ends.
func (l *link) write(out *wsconn.Outbox, log *slog.Logger) {
	defer close(l.wdone)
	for {
		b, _, err := out.Next(l.ctx)
		if err != nil {
			return
		}
		if err := l.c.WriteFrame(l.ctx, b); err != nil {
			log.Debug("session write failed", slog.Any("err", err))
			l.cancel()
			l.c.CloseNow()
			return
		}
	}
}

// ending describes how a session ends on the wire.
type ending struct {
	err    error             // why, for the log and the Down callback
	frame  []byte            // error frame to send first; nil for none
	status wsconn.StatusCode // close code
	reason string            // close reason
	now    bool              // drop the socket without a close handshake (the WebSocket layer already closed it)
}

// core is what node and relay sessions share: the per-session State, the
// outbound queue, the current link and the ending.
type core struct {
	principal string
	log       *slog.Logger
	clk       clock.Clock
	out       *wsconn.Outbox

	mu   sync.Mutex
	st   State // written by the reader; guarded by mu
	link *link // current connection; nil while detached; guarded by mu
	// lastDone is the last attached link's done: closed once its reader
	// has announced Down. It outlives link (cleared at detach, before the
	// Down), so a next session waits for that Down before its Up.
	lastDone   chan struct{} // guarded by mu
	ended      error         // non-nil once the session can never carry frames again; guarded by mu
	detachedAt time.Time     // when link became nil; guarded by mu
}

// endLocked marks the session ended and tears down its link, sending e's
// error frame and close code first. It never blocks on the network.
func (s *core) endLocked(e ending) {
	if s.ended != nil {
		return
	}
	s.ended = e.err
	s.out.Close()
	if l := s.link; l != nil {
		closing := make(chan struct{})
		l.closing = closing
		go func() {
			defer close(closing)
			if e.frame != nil {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				l.c.WriteFrame(ctx, e.frame)
				cancel()
			}
			if e.now {
				l.c.CloseNow()
			} else {
				l.c.Close(e.status, e.reason)
			}
			l.cancel()
		}()
	}
}

// end is endLocked taking the lock.
func (s *core) end(e ending) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endLocked(e)
}

// Ended returns why the session ended for good, nil while it may still
// carry frames (a node's while it can still be resumed).
func (s *core) Ended() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

// attach makes l the session's link and starts its writer.
func (s *core) attach(l *link) {
	s.mu.Lock()
	s.link, s.lastDone = l, l.done
	s.mu.Unlock()
	go l.write(s.out, s.log)
}

// detach clears l if it is still the session's link, stops it and waits
// for its writer.
func (s *core) detach(l *link) {
	s.mu.Lock()
	if s.link == l {
		s.link = nil
		s.detachedAt = s.clk.Now()
	}
	closing := l.closing
	s.mu.Unlock()
	if closing != nil {
		<-closing // let the peer read why before the socket goes
	}
	l.cancel()
	l.c.CloseNow()
	<-l.wdone
}

// drop tears down the current link (if any) without ending the session
// and waits until the last link's reader has announced Down, even one
// already detached.
func (s *core) drop() {
	s.mu.Lock()
	l, done := s.link, s.lastDone
	s.mu.Unlock()
	if l != nil {
		l.cancel()
		l.c.CloseNow()
	}
	if done != nil {
		<-done
	}
}

// downDone returns what [core.drop] waits for: the last link's done, nil
// when no link was ever attached.
func (s *core) downDone() chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastDone
}

// readErr classifies a read failure.
func readErr(err error) error {
	if errors.Is(err, wsconn.ErrTooLarge) {
		return fmt.Errorf("%w: %w", ErrTooLarge, err)
	}
	return err
}

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// markEnded ends the session with err unless it already ended, without
// touching its link (whose reader has finished).
func (s *core) markEnded(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended == nil {
		s.ended = err
		s.out.Close()
	}
}

// Handle returns the session handle.
func (s *core) Handle() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.Handle
}

// Version returns the negotiated protocol version.
func (s *core) Version() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.Version
}

// State returns a copy of the per-session state.
func (s *core) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

// Connected reports whether a connection currently carries the session.
func (s *core) Connected() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.link != nil
}

// send queues the frame encode builds for the next seq. minVersion is the
// oldest version the message exists in and what names it for the error
// when the session is older; ending is the kind's (an overflow ends the
// session). The callers check the message is state-changing.
func (s *core) send(kind Kind, minVersion int, what func() string, encode func(seq uint64) ([]byte, error), ending func(error) ending) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended != nil {
		return fmt.Errorf("%w: %w", ErrEnded, s.ended)
	}
	if minVersion > s.st.Version {
		return fmt.Errorf("%w: %s needs version %d, session is at %d", ErrProtocol, what(), minVersion, s.st.Version)
	}
	_, err := s.out.Push(encode)
	if errors.Is(err, wsconn.ErrOverflow) {
		err = fmt.Errorf("%w: %w", ErrQueueFull, err)
		s.log.Warn(string(kind)+" session ended: outbound queue full", slog.Any(logkey.Err, err))
		s.endLocked(ending(err))
		return err
	}
	if err != nil {
		return fmt.Errorf("session: send: %w", err)
	}
	return nil
}

// removal is how End ends a session: an error frame of code, close code
// 1008 with code as the reason.
func removal(code, msg string, frame []byte) ending {
	return ending{err: fmt.Errorf("%w: %s: %s", ErrEnded, code, msg), frame: frame,
		status: wsconn.StatusPolicyViolation, reason: code}
}
