package session

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
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
	srv     *NodeServer
	hello   *dispatch.Hello // the hello that opened (or last resumed) it; guarded by mu
	resumed bool            // the current link resumed the session; guarded by mu
}

// Node returns the node's enrolled ID.
func (s *NodeSession) Node() string { return s.principal }

// Handle returns the session handle.
func (s *NodeSession) Handle() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.Handle
}

// Version returns the negotiated protocol version.
func (s *NodeSession) Version() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.Version
}

// State returns a copy of the per-session state.
func (s *NodeSession) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

// Connected reports whether a connection currently carries the session.
func (s *NodeSession) Connected() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.link != nil
}

// Ended returns why the session ended for good, nil while it may still
// carry frames.
func (s *NodeSession) Ended() error { return s.err() }

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
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended != nil {
		return fmt.Errorf("%w: %w", ErrEnded, s.ended)
	}
	if v := dispatch.MinVersion(m); v > s.st.Version {
		return fmt.Errorf("%w: %s %s needs version %d, session is at %d", ErrProtocol, m.FrameType(), m.FrameKind(), v, s.st.Version)
	}
	_, err := s.out.Push(func(seq uint64) ([]byte, error) {
		return dispatch.Encode(dispatch.Frame{Seq: seq, Msg: m})
	})
	if errors.Is(err, wsconn.ErrOverflow) {
		err = fmt.Errorf("%w: %w", ErrQueueFull, err)
		s.log.Warn("node session ended: outbound queue full", slog.Any(logkey.Err, err))
		s.endLocked(nodeEnding(err))
		return err
	}
	if err != nil {
		return fmt.Errorf("session: send: %w", err)
	}
	return nil
}

// End ends the session for good (e.g. the node was removed), telling the
// node why with an error frame of code and closing the connection.
func (s *NodeSession) End(code dispatch.ErrorCode, msg string) {
	s.end(ending{err: fmt.Errorf("%w: %s: %s", ErrEnded, code, msg), frame: nodeErrorFrame(code, msg, nil),
		status: wsconn.StatusPolicyViolation, reason: string(code)})
}

func nodeErrorFrame(code dispatch.ErrorCode, msg string, versions *dispatch.Range) []byte {
	b, _ := dispatch.Encode(dispatch.Frame{Msg: dispatch.ErrorFrame{Code: code, Message: msg, Versions: versions}})
	return b
}

// nodeEnding maps why a session ends to its error frame and close code.
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

var errShutdown = errors.New("session: hub shutting down")

// NodeServer serves /v1/node/session (NSESS-*): it authenticates the
// upgrade with the node's key (AUTH-06), negotiates the version, welcomes
// the node and pumps frames between the node and a NodeHandler. It keeps
// the registry of node sessions: one per node; a new session replaces the
// old one. Create it with NewNodeServer.
type NodeServer struct {
	cfg Config
	h   NodeHandler
	log *slog.Logger

	attachMu sync.Mutex // serializes the replace/resume step of handshakes

	mu       sync.Mutex
	sessions map[string]*NodeSession // by node ID; guarded by mu
	closed   bool                    // guarded by mu
}

// NewNodeServer returns the node session endpoint. cfg.Lookup and h are
// required.
func NewNodeServer(cfg Config, h NodeHandler) *NodeServer {
	cfg = cfg.withDefaults()
	return &NodeServer{cfg: cfg, h: h, log: cfg.Logger.With(logkey.Component, "node-session"), sessions: map[string]*NodeSession{}}
}

// Session returns the node's current session, nil when it has none.
func (srv *NodeServer) Session(node string) *NodeSession {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return srv.sessions[node]
}

// Len returns the number of node sessions (attached or resumable).
func (srv *NodeServer) Len() int {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return len(srv.sessions)
}

// Close ends every session with code shutdown (close code 1001) and
// refuses new ones; it waits until their readers have finished.
func (srv *NodeServer) Close() {
	srv.attachMu.Lock() // no handshake is between its closed check and the registry
	srv.mu.Lock()
	srv.closed = true
	all := make([]*NodeSession, 0, len(srv.sessions))
	for _, s := range srv.sessions {
		all = append(all, s)
	}
	srv.mu.Unlock()
	srv.attachMu.Unlock()
	for _, s := range all {
		s.mu.Lock()
		l := s.link
		s.endLocked(nodeEnding(fmt.Errorf("%w", errShutdown)))
		s.mu.Unlock()
		if l != nil {
			<-l.done
		}
	}
}

// ServeHTTP handles GET /v1/node/session: 401 with the API error body
// when the signature, key or principal fails; otherwise the WebSocket
// session runs until it ends.
func (srv *NodeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, node, ok := accept(srv.cfg, KindNode, w, r, srv.log)
	if !ok {
		return
	}
	log := srv.log.With(logkey.NodeID, node)
	s, l, err := srv.handshake(c, node, log)
	if err != nil {
		return
	}
	// Outside the handshake lock: a later session of the same node waits
	// for this link's NodeDown, which follows this NodeUp.
	s.mu.Lock()
	hello, resumed := s.hello, s.resumed
	s.mu.Unlock()
	srv.h.NodeUp(s, hello, resumed)
	err = srv.read(s, l)
	s.detach(l)
	if e := s.Ended(); e != nil {
		err = e
		srv.forget(s)
	}
	log.Info("node session dropped", logkey.Session, s.Handle(), slog.Any("reason", err), "resumable", s.Ended() == nil)
	srv.h.NodeDown(s, err)
	close(l.done)
}

func (srv *NodeServer) forget(s *NodeSession) {
	srv.mu.Lock()
	if srv.sessions[s.principal] == s {
		delete(srv.sessions, s.principal)
	}
	srv.mu.Unlock()
}

// refuse sends an error frame and closes c.
func refuse(c *wsconn.Conn, frame []byte, status wsconn.StatusCode, reason string) {
	ctx, cancel := contextWithTimeout(time.Second)
	c.WriteFrame(ctx, frame)
	cancel()
	c.Close(status, reason)
}

// handshake reads hello, negotiates, resumes or replaces, welcomes and
// attaches. On failure the connection is closed and logged.
func (srv *NodeServer) handshake(c *wsconn.Conn, node string, log *slog.Logger) (*NodeSession, *link, error) {
	b, err := readHello(srv.cfg, c)
	if err != nil {
		log.Info("node session refused", slog.Any("reason", err))
		c.CloseNow()
		return nil, nil, err
	}
	f, err := dispatch.Decode(b)
	hello, ok := f.Msg.(*dispatch.Hello)
	if err != nil || !ok {
		err = fmt.Errorf("%w: first frame is not a hello: %v", ErrProtocol, err)
		log.Info("node session refused", slog.Any("reason", err))
		refuse(c, nodeErrorFrame(dispatch.ErrorProtocol, err.Error(), nil), wsconn.StatusProtocolError, "expected hello")
		return nil, nil, err
	}
	if hello.Node != node {
		err = fmt.Errorf("%w: hello names node %q, key is node %q's", ErrUnauthorized, hello.Node, node)
		log.Warn("node session refused", slog.Any("reason", err))
		refuse(c, nodeErrorFrame(dispatch.ErrorUnauthorized, err.Error(), nil), wsconn.StatusPolicyViolation, "unauthorized")
		return nil, nil, err
	}
	v, err := dispatch.Negotiate(srv.cfg.NodeVersions, hello.Versions)
	if err != nil {
		err = fmt.Errorf("%w: %w", ErrVersion, err)
		log.Warn("node session refused", "release", hello.Release, slog.Any("reason", err))
		local := srv.cfg.NodeVersions
		refuse(c, nodeErrorFrame(dispatch.ErrorVersion, err.Error(), &local), wsconn.StatusPolicyViolation, "version")
		return nil, nil, err
	}

	srv.attachMu.Lock()
	defer srv.attachMu.Unlock()
	srv.mu.Lock()
	if srv.closed {
		srv.mu.Unlock()
		refuse(c, nodeErrorFrame(dispatch.ErrorShutdown, "hub shutting down", nil), wsconn.StatusGoingAway, "shutdown")
		return nil, nil, errShutdown
	}
	old := srv.sessions[node]
	srv.mu.Unlock()

	now := srv.cfg.Clock.Now()
	resumed := false
	var s *NodeSession
	if old != nil && hello.Resume != nil {
		old.drop() // its reader announces NodeDown before we announce NodeUp
		old.mu.Lock()
		if old.ended == nil && old.st.Handle == hello.Resume.Handle && old.st.Version == v &&
			(old.detachedAt.IsZero() || now.Sub(old.detachedAt) <= srv.cfg.ResumeWindow) &&
			old.out.Rewind(hello.Resume.LastSeq) == nil {
			s, resumed = old, true
			s.hello = hello
		}
		old.mu.Unlock()
	}
	if s == nil {
		if old != nil {
			l := func() *link { old.mu.Lock(); defer old.mu.Unlock(); return old.link }()
			old.end(nodeEnding(fmt.Errorf("%w", ErrReplaced)))
			if l != nil {
				<-l.done
			}
			srv.forget(old)
		}
		s = &NodeSession{srv: srv, hello: hello, core: core{principal: node, clk: srv.cfg.Clock, out: wsconn.NewOutbox(srv.cfg.QueueFrames)}}
		s.st = State{Handle: newHandle(), Version: v}
	}
	s.log = log.With(logkey.Session, s.st.Handle)

	srv.mu.Lock()
	srv.sessions[node] = s
	n := len(srv.sessions)
	srv.mu.Unlock()
	period := HeartbeatPeriod(srv.cfg.HeartbeatSecs, srv.cfg.MaxHeartbeatsPerSec, n)
	s.mu.Lock()
	s.resumed = resumed
	w := dispatch.Welcome{Version: v, Handle: s.st.Handle, Resumed: resumed, HeartbeatSecs: period,
		UnreachableAfterSecs: period * srv.cfg.MissedHeartbeats}
	if resumed {
		w.LastSeq = s.st.LastIn
	}
	s.st.LastSeen = now
	s.mu.Unlock()
	wb, err := dispatch.Encode(dispatch.Frame{Msg: w})
	if err == nil {
		ctx, cancel := contextWithTimeout(10 * time.Second)
		err = c.WriteFrame(ctx, wb)
		cancel()
	}
	if err != nil {
		log.Info("node session dropped before welcome", slog.Any("reason", err))
		c.CloseNow()
		return nil, nil, err
	}
	l := newLink(c)
	s.attach(l)
	s.log.Info("node session up", "version", v, "resumed", resumed, "release", hello.Release,
		"heartbeat_secs", period, "last_seq_in", w.LastSeq)
	return s, l, nil
}

// read pumps frames from the node to the handler until the link ends.
func (srv *NodeServer) read(s *NodeSession, l *link) error {
	for {
		b, err := l.c.ReadFrame(l.ctx)
		if err != nil {
			err = readErr(err)
			if errors.Is(err, ErrTooLarge) {
				// The WebSocket layer already closed with 1009 and its reason.
				s.end(ending{err: err, status: wsconn.StatusTooBig, now: true})
			}
			return err
		}
		s.mu.Lock()
		m, deliver, err := nodeFrame(&s.st, b, s.clk.Now())
		s.mu.Unlock()
		if err != nil {
			s.end(nodeEnding(err))
			return err
		}
		if deliver {
			srv.h.NodeMessage(s, m)
		}
	}
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
