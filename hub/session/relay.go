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
	"github.com/vk-ci/vk/proto/client"
)

// RelayHandler is what the hub driver implements to hear from relay
// sessions (RSESS-*). Methods are called from each session's reader
// goroutine: concurrently for different sessions, in order for one. They
// must not block for long; they may call [RelaySession.Send].
type RelayHandler interface {
	// RelayUp: a relay session is established and welcomed; any earlier
	// session of the relay has ended. The relay sends its report next;
	// the hub answers with the server's status (RSESS-07).
	RelayUp(s *RelaySession, hello *client.RelayHello)
	// RelayMessage delivers one state-changing frame from the relay, in
	// seq order, exactly once: *client.RelayReport (already checked
	// against the limits, RSESS-09) or *client.RelayHeartbeat.
	RelayMessage(s *RelaySession, m client.RelayMessage)
	// RelayDown: the session has ended; err says why.
	RelayDown(s *RelaySession, err error)
}

// RelaySession is one relay's session as the hub sees it: safe for
// concurrent use. A relay session is never resumed: each connection is a
// new session (the relay's heartbeats restate everything it holds).
type RelaySession struct {
	core
	srv   *RelayServer
	hello *client.RelayHello
}

// Relay returns the relay's enrolled ID.
func (s *RelaySession) Relay() string { return s.principal }

// Handle returns the session handle.
func (s *RelaySession) Handle() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.Handle
}

// Version returns the negotiated relay-session version (1..3).
func (s *RelaySession) Version() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.Version
}

// NewWorkAllowed reports whether the hub takes new work from this relay:
// false for a version-1 session, whose capacity requests, reservation
// requests and new jobs the API answers 403 forbidden while it may still
// replay submissions, follow, cancel and settle its held jobs (RSESS-11).
func (s *RelaySession) NewWorkAllowed() bool { return s.Version() >= client.RelayVersionAdmissions }

// State returns a copy of the per-session state.
func (s *RelaySession) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

// Ended returns why the session ended, nil while it lives.
func (s *RelaySession) Ended() error { return s.err() }

// Send queues m (a *client.ServerStatus or *client.Update, or their
// values) for the relay and returns at once, assigning its seq. It fails
// with ErrEnded after the session ended, ErrProtocol (nothing sent) for a
// stateless message or an update below version 3, and ErrQueueFull when
// the queue overflowed, which also ends the session.
func (s *RelaySession) Send(m client.RelayMessage) error {
	if m == nil || relayStateless(m) {
		return fmt.Errorf("%w: Send takes state-changing messages only", ErrProtocol)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended != nil {
		return fmt.Errorf("%w: %w", ErrEnded, s.ended)
	}
	if v := relayMinVersion(m); v > s.st.Version {
		return fmt.Errorf("%w: %s needs version %d, session is at %d", ErrProtocol, m.RelayFrameType(), v, s.st.Version)
	}
	_, err := s.out.Push(func(seq uint64) ([]byte, error) {
		return client.EncodeRelayFrame(client.RelayFrame{Seq: seq, Msg: m})
	})
	if errors.Is(err, wsconn.ErrOverflow) {
		err = fmt.Errorf("%w: %w", ErrQueueFull, err)
		s.log.Warn("relay session ended: outbound queue full", slog.Any(logkey.Err, err))
		s.endLocked(relayEnding(err))
		return err
	}
	if err != nil {
		return fmt.Errorf("session: send: %w", err)
	}
	return nil
}

// End ends the session (e.g. the relay was removed), telling the relay
// why with an error frame of code.
func (s *RelaySession) End(code client.RelayErrorCode, msg string) {
	s.end(ending{err: fmt.Errorf("%w: %s: %s", ErrEnded, code, msg), frame: relayErrorFrame(code, msg, nil),
		status: wsconn.StatusPolicyViolation, reason: string(code)})
}

func relayStateless(m client.RelayMessage) bool {
	switch m.RelayFrameType() {
	case client.RelayTypeHello, client.RelayTypeWelcome, client.RelayTypeError, client.RelayTypeKeepalive:
		return true
	}
	return false
}

// relayMinVersion is the oldest version a message exists in. Unlike
// client.RelayMinVersion (which names the oldest version vk-gitlab
// builds), the hub speaks version 1 too (RSESS-10): only update is newer.
func relayMinVersion(m client.RelayMessage) int {
	if m.RelayFrameType() == client.RelayTypeUpdate {
		return client.RelayVersionUpdates
	}
	return 1
}

func relayErrorFrame(code client.RelayErrorCode, msg string, versions *client.VersionRange) []byte {
	b, _ := client.EncodeRelayFrame(client.RelayFrame{Msg: client.RelayError{Code: code, Message: msg, Versions: versions}})
	return b
}

func relayEnding(err error) ending {
	e := ending{err: err, status: wsconn.StatusPolicyViolation}
	code := client.RelayErrorOther
	switch {
	case errors.Is(err, ErrTooLarge):
		return ending{err: err, frame: relayErrorFrame(client.RelayErrorProtocol, err.Error(), nil), status: wsconn.StatusTooBig, reason: "frame too large"}
	case errors.Is(err, ErrLimits):
		code = client.RelayErrorLimits
	case errors.Is(err, ErrProtocol):
		code, e.status = client.RelayErrorProtocol, wsconn.StatusProtocolError
	case errors.Is(err, ErrReplaced):
		code, e.status = client.RelayErrorReplaced, wsconn.StatusNormal
	case errors.Is(err, ErrQueueFull):
		e.status = wsconn.StatusInternal
	case errors.Is(err, ErrUnauthorized):
		code = client.RelayErrorUnauthorized
	case errors.Is(err, errShutdown):
		code, e.status = client.RelayErrorShutdown, wsconn.StatusGoingAway
	}
	e.frame = relayErrorFrame(code, err.Error(), nil)
	e.reason = string(code)
	return e
}

// CheckRelayLimits returns an error wrapping ErrLimits when a report
// lists more than client.MaxRelayRunners runners or a runner with
// request_concurrency above client.MaxRequestConcurrency (RSESS-09).
func CheckRelayLimits(r *client.RelayReport) error {
	if n := len(r.Runners); n > client.MaxRelayRunners {
		return fmt.Errorf("%w: %d runners, at most %d", ErrLimits, n, client.MaxRelayRunners)
	}
	for _, rr := range r.Runners {
		if rr.RequestConcurrency > client.MaxRequestConcurrency {
			return fmt.Errorf("%w: runner %q request_concurrency %d, at most %d", ErrLimits, rr.Name, rr.RequestConcurrency, client.MaxRequestConcurrency)
		}
	}
	return nil
}

// RelayServer serves /v1/gitlab/session (RSESS-*): it authenticates the
// upgrade with the relay's key, negotiates the version (the hub speaks
// cfg.RelayVersions, 1..3 by default), welcomes the relay and pumps frames
// between it and a RelayHandler. One session per relay: a new one
// replaces the old. Create it with NewRelayServer.
type RelayServer struct {
	cfg Config
	h   RelayHandler
	log *slog.Logger

	attachMu sync.Mutex

	mu       sync.Mutex
	sessions map[string]*RelaySession // by relay ID; guarded by mu
	closed   bool                     // guarded by mu
}

// NewRelayServer returns the relay session endpoint. cfg.Lookup and h are
// required.
func NewRelayServer(cfg Config, h RelayHandler) *RelayServer {
	cfg = cfg.withDefaults()
	return &RelayServer{cfg: cfg, h: h, log: cfg.Logger.With(logkey.Component, "relay-session"), sessions: map[string]*RelaySession{}}
}

// Session returns the relay's live session, nil when none.
func (srv *RelayServer) Session(relay string) *RelaySession {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return srv.sessions[relay]
}

// Len returns the number of live relay sessions.
func (srv *RelayServer) Len() int {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return len(srv.sessions)
}

// Close ends every session with code shutdown (1001), refuses new ones
// and waits until their readers have finished.
func (srv *RelayServer) Close() {
	srv.attachMu.Lock() // no handshake is between its closed check and the registry
	srv.mu.Lock()
	srv.closed = true
	all := make([]*RelaySession, 0, len(srv.sessions))
	for _, s := range srv.sessions {
		all = append(all, s)
	}
	srv.mu.Unlock()
	srv.attachMu.Unlock()
	for _, s := range all {
		s.mu.Lock()
		l := s.link
		s.endLocked(relayEnding(fmt.Errorf("%w", errShutdown)))
		s.mu.Unlock()
		if l != nil {
			<-l.done
		}
	}
}

// ServeHTTP handles GET /v1/gitlab/session: 401 with the API error body
// when authentication fails; otherwise the session runs until it ends.
func (srv *RelayServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, relay, ok := accept(srv.cfg, KindRelay, w, r, srv.log)
	if !ok {
		return
	}
	log := srv.log.With(logkey.RelayID, relay)
	s, l, err := srv.handshake(c, relay, log)
	if err != nil {
		return
	}
	srv.h.RelayUp(s, s.hello) // outside the handshake lock, before any RelayDown of s
	err = srv.read(s, l)
	s.mu.Lock()
	if s.ended == nil {
		s.ended = err
		s.out.Close()
	} else {
		err = s.ended // the cause (replaced, limits, …), not the read error it led to
	}
	s.mu.Unlock()
	s.detach(l)
	srv.mu.Lock()
	if srv.sessions[relay] == s {
		delete(srv.sessions, relay)
	}
	srv.mu.Unlock()
	log.Info("relay session dropped", logkey.Session, s.Handle(), slog.Any("reason", err))
	srv.h.RelayDown(s, err)
	close(l.done)
}

func (srv *RelayServer) handshake(c *wsconn.Conn, relay string, log *slog.Logger) (*RelaySession, *link, error) {
	b, err := readHello(srv.cfg, c)
	if err != nil {
		log.Info("relay session refused", slog.Any("reason", err))
		c.CloseNow()
		return nil, nil, err
	}
	f, err := client.DecodeRelayFrame(b)
	hello, ok := f.Msg.(*client.RelayHello)
	if err != nil || !ok {
		err = fmt.Errorf("%w: first frame is not a hello: %v", ErrProtocol, err)
		log.Info("relay session refused", slog.Any("reason", err))
		refuse(c, relayErrorFrame(client.RelayErrorProtocol, err.Error(), nil), wsconn.StatusProtocolError, "expected hello")
		return nil, nil, err
	}
	if hello.Relay != relay {
		err = fmt.Errorf("%w: hello names relay %q, key is relay %q's", ErrUnauthorized, hello.Relay, relay)
		log.Warn("relay session refused", slog.Any("reason", err))
		refuse(c, relayErrorFrame(client.RelayErrorUnauthorized, err.Error(), nil), wsconn.StatusPolicyViolation, "unauthorized")
		return nil, nil, err
	}
	v, err := client.NegotiateVersion("relay", srv.cfg.RelayVersions, hello.Versions)
	if err != nil {
		err = fmt.Errorf("%w: %w", ErrVersion, err)
		log.Warn("relay session refused", "release", hello.Release, slog.Any("reason", err))
		local := srv.cfg.RelayVersions
		refuse(c, relayErrorFrame(client.RelayErrorVersion, err.Error(), &local), wsconn.StatusPolicyViolation, "version")
		return nil, nil, err
	}

	srv.attachMu.Lock()
	defer srv.attachMu.Unlock()
	srv.mu.Lock()
	if srv.closed {
		srv.mu.Unlock()
		refuse(c, relayErrorFrame(client.RelayErrorShutdown, "hub shutting down", nil), wsconn.StatusGoingAway, "shutdown")
		return nil, nil, errShutdown
	}
	old := srv.sessions[relay]
	srv.mu.Unlock()
	if old != nil {
		l := func() *link { old.mu.Lock(); defer old.mu.Unlock(); return old.link }()
		old.end(relayEnding(fmt.Errorf("%w", ErrReplaced)))
		if l != nil {
			<-l.done
		}
	}
	s := &RelaySession{srv: srv, hello: hello, core: core{principal: relay, clk: srv.cfg.Clock, out: wsconn.NewOutbox(srv.cfg.QueueFrames)}}
	s.st = State{Handle: newHandle(), Version: v, LastSeen: srv.cfg.Clock.Now()}
	s.log = log.With(logkey.Session, s.st.Handle)
	srv.mu.Lock()
	srv.sessions[relay] = s
	srv.mu.Unlock()

	w := client.RelayWelcome{Version: v, Handle: s.st.Handle, HeartbeatSecs: srv.cfg.RelayHeartbeatSecs}
	wb, err := client.EncodeRelayFrame(client.RelayFrame{Msg: w})
	if err == nil {
		ctx, cancel := contextWithTimeout(10 * time.Second)
		err = c.WriteFrame(ctx, wb)
		cancel()
	}
	if err != nil {
		srv.mu.Lock()
		delete(srv.sessions, relay)
		srv.mu.Unlock()
		log.Info("relay session dropped before welcome", slog.Any("reason", err))
		c.CloseNow()
		return nil, nil, err
	}
	l := newLink(c)
	s.attach(l)
	if v < client.RelayVersionAdmissions {
		s.log.Warn("relay session up at version 1: new work will be refused until the relay is upgraded", "release", hello.Release)
	} else {
		s.log.Info("relay session up", "version", v, "release", hello.Release, "heartbeat_secs", w.HeartbeatSecs)
	}
	return s, l, nil
}

func (srv *RelayServer) read(s *RelaySession, l *link) error {
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
		m, deliver, err := relayFrame(&s.st, b, s.clk.Now())
		s.mu.Unlock()
		if err != nil {
			if errors.Is(err, ErrLimits) {
				s.log.Warn("relay session ended: inventory over the limits", slog.Any("reason", err))
			}
			s.end(relayEnding(err))
			return err
		}
		if deliver {
			srv.h.RelayMessage(s, m)
		}
	}
}

// relayFrame decodes and checks one frame from a relay against its
// session state: it returns the message and whether to deliver it (false
// for keepalives and duplicates), or an error wrapping ErrTooLarge,
// ErrProtocol or ErrLimits (RSESS-09) that ends the session.
func relayFrame(st *State, b []byte, now time.Time) (client.RelayMessage, bool, error) {
	f, err := client.DecodeRelayFrame(b)
	if err != nil {
		if errors.Is(err, client.ErrFrameTooLarge) {
			return nil, false, fmt.Errorf("%w: %w", ErrTooLarge, err)
		}
		return nil, false, fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	hb := false
	switch m := f.Msg.(type) {
	case *client.RelayKeepalive:
	case *client.RelayReport:
		if err := CheckRelayLimits(m); err != nil {
			return nil, false, err
		}
	case *client.RelayHeartbeat:
		hb = true
	default:
		return nil, false, fmt.Errorf("%w: unexpected %s from a relay", ErrProtocol, f.Msg.RelayFrameType())
	}
	deliver, err := st.Inbound(f.Seq, 1, hb, now)
	if err != nil {
		return nil, false, err
	}
	return f.Msg, deliver, nil
}
