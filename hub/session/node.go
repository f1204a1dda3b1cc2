package session

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/internal/wsconn"
	"github.com/vk-ci/vk/proto/dispatch"
)

// NodeHandler is what the hub driver implements to hear from node
// sessions. Methods are called from each session's reader goroutine:
// concurrently for different sessions, in order for one session. They
// must not block for long (hand the work to the driver's goroutine); they
// may call [NodeSession.Send].
type NodeHandler interface {
	// NodeUp: a connection of s is established and welcomed. resumed
	// means s continues where its previous connection left off (same
	// handle, seqs continue, unacknowledged frames are replayed both ways);
	// otherwise s is a new session, any earlier session of the node has
	// ended, and the node will send report then held (NSESS-11, NSESS-24).
	NodeUp(s *NodeSession, hello *dispatch.Hello, resumed bool)
	// NodeMessage delivers one state-changing frame from the node, in seq
	// order, exactly once per session: a pointer to a dispatch message
	// (*dispatch.Report, *dispatch.Heartbeat, *dispatch.Held, …).
	NodeMessage(s *NodeSession, m dispatch.Message)
	// NodeDown: the connection that NodeUp announced has ended; err says
	// why. If s.Ended() is nil the node may still resume s within the
	// resume window.
	NodeDown(s *NodeSession, err error)
}

// NodeSession is one node's session as the hub sees it: safe for
// concurrent use. Its lifecycle:
//
//	        hello (new)              connection lost
//	(none) ────────────► attached ─────────────────► detached
//	                       ▲   │                        │
//	                       │   │ protocol error,        │ hello resuming the
//	                       │   │ replaced, overflow,    │ handle in time
//	                       │   ▼ removed, shutdown      │
//	                       │  ended ◄── replaced ───────┤
//	                       └────────────────────────────┘
type NodeSession struct {
	core
	hello   *dispatch.Hello // the hello that opened (or last resumed) it; guarded by mu
	resumed bool            // the current link resumed the session; guarded by mu
}

// Node returns the node's enrolled ID.
func (s *NodeSession) Node() string { return s.principal }

// Send queues m for the node and returns at once; it assigns m's seq. It
// fails with ErrEnded after the session ended, with ErrProtocol (nothing
// sent, the session goes on) when m needs a newer version than negotiated
// (NSESS-02) or is a stateless message, and with ErrQueueFull when the
// outbound queue overflowed, which also ends the session (logged). While
// the node is disconnected, frames queue and are delivered on resume.
func (s *NodeSession) Send(m dispatch.Message) error {
	if m == nil || dispatch.Stateless(m) {
		return fmt.Errorf("%w: Send takes state-changing messages only", ErrProtocol)
	}
	return s.send(KindNode, dispatch.MinVersion(m),
		func() string { return string(m.FrameType()) + " " + string(m.FrameKind()) },
		func(seq uint64) ([]byte, error) { return dispatch.Encode(dispatch.Frame{Seq: seq, Msg: m}) },
		nodeEnding)
}

// End ends the session for good (e.g. the node was removed), telling the
// node why with an error frame of code and closing the connection.
func (s *NodeSession) End(code dispatch.ErrorCode, msg string) {
	s.end(removal(string(code), msg, nodeErrorFrame(code, msg, nil)))
}

func nodeErrorFrame(code dispatch.ErrorCode, msg string, versions *dispatch.Range) []byte {
	b, _ := dispatch.Encode(dispatch.Frame{Msg: dispatch.ErrorFrame{Code: code, Message: msg, Versions: versions}})
	return b
}

// nodeEnding maps why a session ends to its error frame and close code.
// It looks like relayEnding but is kept apart: the codes are the node
// protocol's (dispatch.ErrorCode) and a node session has no "limits".
func nodeEnding(err error) ending {
	e := ending{err: err, status: wsconn.StatusPolicyViolation}
	code := dispatch.ErrorOther
	switch {
	case errors.Is(err, ErrTooLarge):
		return ending{err: err, frame: nodeErrorFrame(dispatch.ErrorProtocol, err.Error(), nil), status: wsconn.StatusTooBig, reason: "frame too large"}
	case errors.Is(err, ErrProtocol):
		code, e.status = dispatch.ErrorProtocol, wsconn.StatusProtocolError
	case errors.Is(err, ErrReplaced):
		code, e.status = dispatch.ErrorReplaced, wsconn.StatusNormal
	case errors.Is(err, ErrQueueFull):
		code, e.status = dispatch.ErrorOther, wsconn.StatusInternal
	case errors.Is(err, ErrUnauthorized):
		code = dispatch.ErrorUnauthorized
	case errors.Is(err, errShutdown):
		code, e.status = dispatch.ErrorShutdown, wsconn.StatusGoingAway
	}
	e.frame = nodeErrorFrame(code, err.Error(), nil)
	e.reason = string(code)
	return e
}

// NodeServer serves /v1/node/session (NSESS-*): it authenticates the
// upgrade with the node's key (AUTH-06), negotiates the version, welcomes
// the node and pumps frames between the node and a NodeHandler. It keeps
// the registry of node sessions: one per node; a new session replaces the
// old one. Create it with NewNodeServer.
type NodeServer struct {
	// The registry and pump, shared with RelayServer.
	server[*NodeSession, *dispatch.Hello, dispatch.Message]
	h NodeHandler
}

// NewNodeServer returns the node session endpoint. cfg.Lookup and h are
// required.
func NewNodeServer(cfg Config, h NodeHandler) *NodeServer {
	srv := &NodeServer{h: h}
	srv.server.init(cfg.withDefaults(), KindNode, logkey.NodeID, true, srv)
	return srv
}

// Session returns the node's session, nil when it has none.
func (srv *NodeServer) Session(node string) *NodeSession { return srv.server.Session(node) }

// What follows is NodeServer's side of kindOps.

func (*NodeServer) decodeHello(b []byte) (*dispatch.Hello, bool, error) {
	f, err := dispatch.Decode(b)
	hello, ok := f.Msg.(*dispatch.Hello)
	return hello, ok, err
}

func (*NodeServer) names(h *dispatch.Hello) (string, string) { return h.Node, h.Release }

// negotiate: the hub speaks cfg.NodeVersions (3..6) to nodes, so a node
// offering at most 2 is refused (NSESS-03).
func (srv *NodeServer) negotiate(h *dispatch.Hello) (int, error) {
	return dispatch.Negotiate(srv.server.cfg.NodeVersions, h.Versions)
}

func (srv *NodeServer) refusal(r refusal, msg string) []byte {
	switch r {
	case refuseUnauthorized:
		return nodeErrorFrame(dispatch.ErrorUnauthorized, msg, nil)
	case refuseVersion:
		local := srv.server.cfg.NodeVersions
		return nodeErrorFrame(dispatch.ErrorVersion, msg, &local)
	case refuseShutdown:
		return nodeErrorFrame(dispatch.ErrorShutdown, msg, nil)
	}
	return nodeErrorFrame(dispatch.ErrorProtocol, msg, nil)
}

func (*NodeServer) ending(err error) ending { return nodeEnding(err) }

// open resumes old when the hello names its handle in time and the
// frames the node has not processed are still kept (node sessions only);
// otherwise it replaces old with a new session (NSESS-11, NSESS-24).
func (srv *NodeServer) open(old *NodeSession, hello *dispatch.Hello, v int, node string, log *slog.Logger) (*NodeSession, []byte, func(), error) {
	cfg := &srv.server.cfg
	now := cfg.Clock.Now()
	resumed := false
	var s *NodeSession
	if old != nil && hello.Resume != nil {
		old.drop() // its reader announces NodeDown before we announce NodeUp
		old.mu.Lock()
		if old.ended == nil && old.st.Handle == hello.Resume.Handle && old.st.Version == v &&
			(old.detachedAt.IsZero() || now.Sub(old.detachedAt) <= cfg.ResumeWindow) &&
			old.out.Rewind(hello.Resume.LastSeq) == nil {
			s, resumed = old, true
			s.hello = hello
		}
		old.mu.Unlock()
	}
	if s == nil {
		if old != nil {
			srv.server.replace(old)
		}
		s = &NodeSession{hello: hello, core: core{principal: node, clk: cfg.Clock, out: wsconn.NewOutbox(cfg.QueueFrames)}}
		s.st = State{Handle: newHandle(), Version: v}
	}
	s.log = log.With(logkey.Session, s.st.Handle)

	n := srv.server.register(s)
	period := HeartbeatPeriod(cfg.HeartbeatSecs, cfg.MaxHeartbeatsPerSec, n)
	s.mu.Lock()
	s.resumed = resumed
	w := dispatch.Welcome{Version: v, Handle: s.st.Handle, Resumed: resumed, HeartbeatSecs: period,
		UnreachableAfterSecs: period * cfg.MissedHeartbeats}
	if resumed {
		w.LastSeq = s.st.LastIn
	}
	s.st.LastSeen = now
	s.mu.Unlock()
	wb, err := dispatch.Encode(dispatch.Frame{Msg: w})
	logUp := func() {
		s.log.Info("node session up", "version", v, "resumed", resumed, "release", hello.Release,
			"heartbeat_secs", period, "last_seq_in", w.LastSeq)
	}
	return s, wb, logUp, err
}

func (srv *NodeServer) up(s *NodeSession) {
	s.mu.Lock()
	hello, resumed := s.hello, s.resumed
	s.mu.Unlock()
	srv.h.NodeUp(s, hello, resumed)
}

func (srv *NodeServer) message(s *NodeSession, m dispatch.Message) { srv.h.NodeMessage(s, m) }

func (srv *NodeServer) down(s *NodeSession, err error) { srv.h.NodeDown(s, err) }

func (*NodeServer) frame(st *State, b []byte, now time.Time) (dispatch.Message, bool, error) {
	return nodeFrame(st, b, now)
}

// nodeFrame decodes and checks one frame from a node against its session
// state: it returns the message and whether to deliver it (false for
// keepalives and replayed duplicates), or an error wrapping ErrTooLarge,
// ErrProtocol or ErrPeerError that ends the session.
func nodeFrame(st *State, b []byte, now time.Time) (dispatch.Message, bool, error) {
	f, err := dispatch.Decode(b)
	if err != nil {
		if errors.Is(err, dispatch.ErrTooLarge) {
			return nil, false, fmt.Errorf("%w: %w", ErrTooLarge, err)
		}
		return nil, false, fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	switch m := f.Msg.(type) {
	case *dispatch.ErrorFrame:
		return nil, false, fmt.Errorf("%w: %s: %s", ErrPeerError, m.Code, m.Message)
	}
	if !fromNode(f.Msg) {
		return nil, false, fmt.Errorf("%w: %s %s is not a node-to-hub message", ErrProtocol, f.Msg.FrameType(), f.Msg.FrameKind())
	}
	_, hb := f.Msg.(*dispatch.Heartbeat)
	deliver, err := st.Inbound(f.Seq, dispatch.MinVersion(f.Msg), hb, now)
	if err != nil {
		return nil, false, err
	}
	return f.Msg, deliver, nil
}

// fromNode reports whether a node may send m (NSESS-11..17).
func fromNode(m dispatch.Message) bool {
	switch m.FrameType() {
	case dispatch.TypeReport, dispatch.TypeHeartbeat, dispatch.TypeKeepalive:
		return true
	case dispatch.TypeJob:
		switch m.FrameKind() {
		case dispatch.KindOfferReply, dispatch.KindLease, dispatch.KindJob, dispatch.KindOutput,
			dispatch.KindResult, dispatch.KindHeld, dispatch.KindEgress:
			return true
		}
	}
	return false
}
