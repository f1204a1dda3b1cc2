package session

import (
	"errors"
	"fmt"
	"time"
)

// Errors that end a session. Each is returned wrapped; test with errors.Is.
var (
	// ErrProtocol: a frame broke the session protocol (undecodable, seq
	// gap, a hello after the first frame, a message the negotiated version
	// does not have, e.g. a job message below version 3, NSESS-02).
	ErrProtocol = errors.New("session: protocol error")
	// ErrTooLarge: a frame exceeded 1 MiB (NSESS-23).
	ErrTooLarge = errors.New("session: frame too large")
	// ErrLimits: a relay's inventory lists more than 64 runners or a
	// request_concurrency above 128 (RSESS-09).
	ErrLimits = errors.New("session: relay inventory over the limits")
	// ErrVersion: the peer's version range shares no version with the
	// hub's; the refusal names both ranges (DECISIONS 3).
	ErrVersion = errors.New("session: no common protocol version")
	// ErrUnauthorized: the hello names another principal than the signed
	// upgrade, or the principal is unknown or removed.
	ErrUnauthorized = errors.New("session: unauthorized")
	// ErrReplaced: a newer session of the same principal took over.
	ErrReplaced = errors.New("session: replaced by a newer session")
	// ErrQueueFull: the driver sent faster than the peer reads; the
	// per-session outbound queue overflowed and the session ended.
	ErrQueueFull = errors.New("session: outbound queue full")
	// ErrEnded: the session has ended; Send fails with it.
	ErrEnded = errors.New("session: ended")
	// ErrPeerError: the peer sent an error frame and closed.
	ErrPeerError = errors.New("session: peer reported an error")
)

// State is a session's per-session bookkeeping, apart from the socket
// pump (STYLE C6): the handle, the negotiated version, the last seq
// processed from the peer and when the peer was last heard from. The
// outbound side (next seq out, frames kept for resume) is the session's
// wsconn.Outbox. State is not safe for concurrent use: the session's
// reader goroutine owns it.
type State struct {
	// Handle names the session (Welcome.Handle); a resuming peer names it.
	Handle string
	// Version is the negotiated protocol version.
	Version int
	// LastIn is the last seq processed from the peer; 0 before the first
	// state-changing frame.
	LastIn uint64
	// LastSeen is when the last frame of any kind arrived (zero before).
	LastSeen time.Time
	// LastHeartbeat is when the last heartbeat arrived (zero before).
	LastHeartbeat time.Time
	// Duplicates counts frames dropped because their seq was already
	// processed (a peer replaying after a resume).
	Duplicates int
}

// Inbound checks a received frame against the session: seq (0 for a
// stateless frame), the oldest version in which its message exists
// (minVersion) and whether it is a heartbeat. It reports whether the frame
// should be delivered: false for a stateless frame or a duplicate (seq
// already processed). It fails with ErrProtocol when the message needs a
// newer version than negotiated (NSESS-02) or the seq skips ahead.
func (s *State) Inbound(seq uint64, minVersion int, heartbeat bool, now time.Time) (bool, error) {
	s.LastSeen = now
	if minVersion > s.Version {
		return false, fmt.Errorf("%w: message needs version %d, session is at %d", ErrProtocol, minVersion, s.Version)
	}
	if seq == 0 {
		return false, nil
	}
	switch {
	case seq <= s.LastIn:
		s.Duplicates++
		return false, nil
	case seq != s.LastIn+1:
		return false, fmt.Errorf("%w: seq %d after %d", ErrProtocol, seq, s.LastIn)
	}
	s.LastIn = seq
	if heartbeat {
		s.LastHeartbeat = now
	}
	return true, nil
}
