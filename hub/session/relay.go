package session

import (
	"errors"
	"fmt"
	"log/slog"
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
	hello *client.RelayHello
}

// Relay returns the relay's enrolled ID.
func (s *RelaySession) Relay() string { return s.principal }

// NewWorkAllowed reports whether the hub takes new work from this relay:
// false for a version-1 session, whose capacity requests, reservation
// requests and new jobs the API answers 403 forbidden while it may still
// replay submissions, follow, cancel and settle its held jobs (RSESS-11).
func (s *RelaySession) NewWorkAllowed() bool { return s.Version() >= client.RelayVersionAdmissions }

// Send queues m (a *client.ServerStatus or *client.Update, or their
// values) for the relay and returns at once, assigning its seq. It fails
// with ErrEnded after the session ended, ErrProtocol (nothing sent) for a
// stateless message or an update below version 3, and ErrQueueFull when
// the queue overflowed, which also ends the session.
func (s *RelaySession) Send(m client.RelayMessage) error {
	if m == nil || relayStateless(m) {
		return fmt.Errorf("%w: Send takes state-changing messages only", ErrProtocol)
	}
	return s.send(KindRelay, relayMinVersion(m),
		func() string { return string(m.RelayFrameType()) },
		func(seq uint64) ([]byte, error) { return client.EncodeRelayFrame(client.RelayFrame{Seq: seq, Msg: m}) },
		relayEnding)
}

// End ends the session (e.g. the relay was removed), telling the relay
// why with an error frame of code.
func (s *RelaySession) End(code client.RelayErrorCode, msg string) {
	s.end(removal(string(code), msg, relayErrorFrame(code, msg, nil)))
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

// relayEnding maps why a session ends to its error frame and close code.
// It looks like nodeEnding but is kept apart: the codes are the relay
// protocol's (client.RelayErrorCode) and an inventory over the limits
// ends a relay session with code "limits" (RSESS-09).
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
// cfg.RelayVersions, 1..4 by default), welcomes the relay and pumps frames
// between it and a RelayHandler. One session per relay: a new one
// replaces the old. Create it with NewRelayServer.
type RelayServer struct {
	// The registry and pump, shared with NodeServer.
	server[*RelaySession, *client.RelayHello, client.RelayMessage]
	h RelayHandler
}

// NewRelayServer returns the relay session endpoint. cfg.Lookup and h are
// required.
func NewRelayServer(cfg Config, h RelayHandler) *RelayServer {
	srv := &RelayServer{h: h}
	srv.server.init(cfg.withDefaults(), KindRelay, logkey.RelayID, false, srv)
	return srv
}

// Session returns the relay's session, nil when it has none.
func (srv *RelayServer) Session(relay string) *RelaySession { return srv.server.Session(relay) }

// What follows is RelayServer's side of kindOps.

func (*RelayServer) decodeHello(b []byte) (*client.RelayHello, bool, error) {
	f, err := client.DecodeRelayFrame(b)
	hello, ok := f.Msg.(*client.RelayHello)
	return hello, ok, err
}

func (*RelayServer) names(h *client.RelayHello) (string, string) { return h.Relay, h.Release }

// negotiate: the hub speaks cfg.RelayVersions (1..4) to relays
// (RSESS-10); a version-1 relay is accepted but refused new work
// (RSESS-11).
func (srv *RelayServer) negotiate(h *client.RelayHello) (int, error) {
	return client.NegotiateVersion("relay", srv.server.cfg.RelayVersions, h.Versions)
}

func (srv *RelayServer) refusal(r refusal, msg string) []byte {
	switch r {
	case refuseUnauthorized:
		return relayErrorFrame(client.RelayErrorUnauthorized, msg, nil)
	case refuseVersion:
		local := srv.server.cfg.RelayVersions
		return relayErrorFrame(client.RelayErrorVersion, msg, &local)
	case refuseShutdown:
		return relayErrorFrame(client.RelayErrorShutdown, msg, nil)
	}
	return relayErrorFrame(client.RelayErrorProtocol, msg, nil)
}

func (*RelayServer) ending(err error) ending { return relayEnding(err) }

// open replaces old with a new session: relay sessions are never
// resumed (the relay's heartbeats restate everything it holds).
func (srv *RelayServer) open(old *RelaySession, hello *client.RelayHello, v int, relay string, log *slog.Logger) (*RelaySession, []byte, func(), error) {
	cfg := &srv.server.cfg
	if old != nil {
		srv.server.replace(old)
	}
	s := &RelaySession{hello: hello, core: core{principal: relay, clk: cfg.Clock, out: wsconn.NewOutbox(cfg.QueueFrames)}}
	s.st = State{Handle: newHandle(), Version: v, LastSeen: cfg.Clock.Now()}
	s.log = log.With(logkey.Session, s.st.Handle)
	srv.server.register(s)

	w := client.RelayWelcome{Version: v, Handle: s.st.Handle, HeartbeatSecs: cfg.RelayHeartbeatSecs}
	wb, err := client.EncodeRelayFrame(client.RelayFrame{Msg: w})
	logUp := func() {
		if v < client.RelayVersionAdmissions {
			s.log.Warn("relay session up at version 1: new work will be refused until the relay is upgraded", "release", hello.Release)
		} else {
			s.log.Info("relay session up", "version", v, "release", hello.Release, "heartbeat_secs", w.HeartbeatSecs)
		}
	}
	return s, wb, logUp, err
}

func (srv *RelayServer) up(s *RelaySession) { srv.h.RelayUp(s, s.hello) }

func (srv *RelayServer) message(s *RelaySession, m client.RelayMessage) { srv.h.RelayMessage(s, m) }

func (srv *RelayServer) down(s *RelaySession, err error) { srv.h.RelayDown(s, err) }

func (*RelayServer) frame(st *State, b []byte, now time.Time) (client.RelayMessage, bool, error) {
	return relayFrame(st, b, now)
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
