package session

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/vk-ci/vk/internal/connlimit"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/internal/wsconn"
)

// peer is a kind's session type (*NodeSession, *RelaySession): a pointer
// to a struct embedding core.
type peer interface {
	comparable
	base() *core
}

// base returns the shared part of a session.
func (s *core) base() *core { return s }

// refusal is why a handshake is refused before any session exists; each
// kind maps it to an error frame in its own vocabulary.
type refusal int

const (
	refuseProtocol     refusal = iota // the first frame is not a hello
	refuseUnauthorized                // the hello names another principal
	refuseVersion                     // no common version: the frame carries the hub's range
	refuseShutdown                    // the server is closing
)

// kindOps is what differs between node and relay sessions: their frames,
// their handler, and the rules that only look alike. S is the session
// type, H the hello, M a state-changing message from the peer.
// *NodeServer and *RelayServer implement it; [server] calls it.
//
// Kept per kind on purpose, although the code looks alike: version
// negotiation (the ranges and what a version allows: NSESS-02/03,
// RSESS-10/11), the error codes and close codes that end a session
// (relays have "limits", RSESS-09), which frames a peer may send, and
// whether a session is resumed (nodes only).
type kindOps[S peer, H, M any] interface {
	// decodeHello decodes the first frame; ok is false when it decoded but
	// is not a hello.
	decodeHello(b []byte) (h H, ok bool, err error)
	// names returns the principal the hello names and the peer's release.
	names(h H) (principal, release string)
	// negotiate picks the session version from the hello's range.
	negotiate(h H) (int, error)
	// refusal returns the error frame that refuses a handshake.
	refusal(r refusal, msg string) []byte
	// ending maps why a session ends to its error frame and close code.
	ending(err error) ending
	// open makes the session for a negotiated hello under the handshake
	// lock: it resumes old or replaces it ([server.replace]), registers the
	// session ([server.register]) and returns it with its welcome frame
	// and the "session up" log line to write once it is attached. old is
	// the principal's registered session, nil when none.
	open(old S, h H, v int, principal string, log *slog.Logger) (s S, welcome []byte, logUp func(), err error)
	// up, message and down call the kind's handler.
	up(s S)
	message(s S, m M)
	down(s S, err error)
	// frame decodes and checks one frame from the peer against st: the
	// message, whether to deliver it, or an error that ends the session.
	frame(st *State, b []byte, now time.Time) (M, bool, error)
}

// server is what NodeServer and RelayServer share: the registry of
// sessions (one per principal), the accept → handshake → read shape of a
// connection, the replace step, the reader and the ending. Its zero value
// is unusable: call init.
type server[S peer, H, M any] struct {
	cfg       Config
	log       *slog.Logger
	kind      Kind   // whose sessions; also the first word of the log lines
	idKey     string // log key of the principal's ID
	resumable bool   // a session outlives its connection (nodes); otherwise it ends with it (relays)
	k         kindOps[S, H, M]

	attachMu sync.Mutex // serializes the replace/resume step of handshakes

	pending chan struct{} // one token per connection waiting for its hello

	mu       sync.Mutex
	sessions map[string]S // by principal ID; guarded by mu
	closed   bool         // guarded by mu
}

func (srv *server[S, H, M]) init(cfg Config, kind Kind, idKey string, resumable bool, k kindOps[S, H, M]) {
	srv.cfg = cfg
	srv.log = cfg.Logger.With(logkey.Component, string(kind)+"-session")
	srv.kind, srv.idKey, srv.resumable, srv.k = kind, idKey, resumable, k
	srv.sessions = map[string]S{}
	srv.pending = make(chan struct{}, cfg.MaxPendingHellos)
}

// Session returns the principal's session, the zero S when none.
func (srv *server[S, H, M]) Session(principal string) S {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return srv.sessions[principal]
}

// Len returns the number of sessions (a node's attached or resumable).
func (srv *server[S, H, M]) Len() int {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return len(srv.sessions)
}

// Close ends every session with code shutdown (close code 1001), refuses
// new ones and waits until their readers have finished.
func (srv *server[S, H, M]) Close() {
	srv.attachMu.Lock() // no handshake is between its closed check and the registry
	srv.mu.Lock()
	srv.closed = true
	all := make([]*core, 0, len(srv.sessions))
	for _, s := range srv.sessions {
		all = append(all, s.base())
	}
	srv.mu.Unlock()
	srv.attachMu.Unlock()
	for _, s := range all {
		s.mu.Lock()
		l := s.link
		s.endLocked(srv.k.ending(fmt.Errorf("%w", errShutdown)))
		s.mu.Unlock()
		if l != nil {
			<-l.done
		}
	}
}

// register makes s the principal's session and returns how many sessions
// there are. Called from kindOps.open, under the handshake lock.
func (srv *server[S, H, M]) register(s S) int {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	srv.sessions[s.base().principal] = s
	return len(srv.sessions)
}

// forget drops s from the registry unless a newer session took its place.
func (srv *server[S, H, M]) forget(s S) {
	srv.mu.Lock()
	if c := s.base(); srv.sessions[c.principal] == s {
		delete(srv.sessions, c.principal)
	}
	srv.mu.Unlock()
}

// replace ends old for a newer session of its principal (told
// "replaced", close 1000), waits until its reader has announced Down and
// drops it from the registry. Called from kindOps.open, under the
// handshake lock.
func (srv *server[S, H, M]) replace(old S) {
	c := old.base()
	done := c.downDone() // the last link's, even if its reader already let go of it
	c.end(srv.k.ending(fmt.Errorf("%w", ErrReplaced)))
	if done != nil {
		<-done
	}
	srv.forget(old)
}

// ServeHTTP handles the session endpoint (GET /v1/node/session, GET
// /v1/gitlab/session): 401 with the API error body when the signature,
// key or principal fails; otherwise the WebSocket session runs until it
// ends. A node's dropped connection leaves its session resumable for
// Config.ResumeWindow; a relay's session ends with its connection.
func (srv *server[S, H, M]) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	select {
	case srv.pending <- struct{}{}:
	default:
		srv.log.Warn(string(srv.kind)+" session refused: too many connections waiting for their hello",
			"limit", cap(srv.pending), "remote", r.RemoteAddr)
		writeUnavailable(w, "too many sessions waiting for their hello")
		return
	}
	c, principal, ok := accept(srv.cfg, srv.kind, w, r, srv.log)
	if !ok {
		<-srv.pending
		return
	}
	// The upgrade's signature verified: the connection no longer counts
	// against its address's unauthenticated cap.
	connlimit.Authenticated(r.Context())
	log := srv.log.With(srv.idKey, principal)
	s, l, err := srv.handshake(c, principal, log)
	<-srv.pending
	if err != nil {
		return
	}
	// Outside the handshake lock: a later session of the same principal
	// waits for this link's Down, which follows this Up.
	srv.k.up(s)
	err = srv.read(s, l)
	cs := s.base()
	if !srv.resumable {
		// The session ends with its connection. Its cause stays what
		// ended it first (replaced, limits, …), not the read error it led to.
		cs.markEnded(err)
	}
	cs.detach(l)
	ended := cs.Ended()
	if ended != nil {
		err = ended
	}
	attrs := []any{logkey.Session, cs.Handle(), slog.Any("reason", err)}
	if srv.resumable {
		attrs = append(attrs, "resumable", ended == nil)
	}
	log.Info(string(srv.kind)+" session dropped", attrs...)
	srv.k.down(s, err)
	// An ended session leaves the registry only once its Down is
	// announced: a hello of the same principal meanwhile finds it there
	// and, replacing it, waits for l.done, so the driver never sees the
	// next session's Up before this Down.
	if ended != nil {
		srv.forget(s)
	}
	close(l.done)
}

// handshake reads the hello, checks its principal, negotiates, opens the
// session (resuming or replacing), welcomes and attaches. On failure the
// connection is closed and logged.
func (srv *server[S, H, M]) handshake(c *wsconn.Conn, principal string, log *slog.Logger) (S, *link, error) {
	var none S
	name := string(srv.kind)
	b, err := readHello(srv.cfg, c, func() {
		refuse(c, srv.k.refusal(refuseProtocol, "no hello within "+srv.cfg.HelloTimeout.String()), wsconn.StatusProtocolError, "no hello")
	})
	if err != nil {
		log.Info(name+" session refused", slog.Any("reason", err))
		c.CloseNow()
		return none, nil, err
	}
	hello, ok, err := srv.k.decodeHello(b)
	if err != nil || !ok {
		err = fmt.Errorf("%w: first frame is not a hello: %v", ErrProtocol, err)
		log.Info(name+" session refused", slog.Any("reason", err))
		refuse(c, srv.k.refusal(refuseProtocol, err.Error()), wsconn.StatusProtocolError, "expected hello")
		return none, nil, err
	}
	named, release := srv.k.names(hello)
	if named != principal {
		err = fmt.Errorf("%w: hello names %s %q, key is %s %q's", ErrUnauthorized, name, named, name, principal)
		log.Warn(name+" session refused", slog.Any("reason", err))
		refuse(c, srv.k.refusal(refuseUnauthorized, err.Error()), wsconn.StatusPolicyViolation, "unauthorized")
		return none, nil, err
	}
	v, err := srv.k.negotiate(hello)
	if err != nil {
		err = fmt.Errorf("%w: %w", ErrVersion, err)
		log.Warn(name+" session refused", "release", release, slog.Any("reason", err))
		refuse(c, srv.k.refusal(refuseVersion, err.Error()), wsconn.StatusPolicyViolation, "version")
		return none, nil, err
	}

	srv.attachMu.Lock()
	defer srv.attachMu.Unlock()
	srv.mu.Lock()
	if srv.closed {
		srv.mu.Unlock()
		refuse(c, srv.k.refusal(refuseShutdown, "hub shutting down"), wsconn.StatusGoingAway, "shutdown")
		return none, nil, errShutdown
	}
	old := srv.sessions[principal]
	srv.mu.Unlock()

	s, wb, logUp, err := srv.k.open(old, hello, v, principal, log)
	if err == nil {
		ctx, cancel := contextWithTimeout(10 * time.Second)
		err = c.WriteFrame(ctx, wb)
		cancel()
	}
	if err != nil {
		if !srv.resumable && s != none {
			srv.forget(s) // the session lives only on this connection
		}
		log.Info(name+" session dropped before welcome", slog.Any("reason", err))
		c.CloseNow()
		return none, nil, err
	}
	l := newLink(c)
	s.base().attach(l)
	logUp()
	return s, l, nil
}

// read pumps frames from the peer to the handler until the link ends.
func (srv *server[S, H, M]) read(s S, l *link) error {
	cs := s.base()
	for {
		b, err := l.c.ReadFrame(l.ctx)
		if err != nil {
			err = readErr(err)
			if errors.Is(err, ErrTooLarge) {
				// The WebSocket layer already closed with 1009 and its reason.
				cs.end(ending{err: err, status: wsconn.StatusTooBig, now: true})
			}
			return err
		}
		cs.mu.Lock()
		m, deliver, err := srv.k.frame(&cs.st, b, cs.clk.Now())
		cs.mu.Unlock()
		if err != nil {
			if errors.Is(err, ErrLimits) { // relays only (RSESS-09)
				cs.log.Warn(string(srv.kind)+" session ended: inventory over the limits", slog.Any("reason", err))
			}
			cs.end(srv.k.ending(err))
			return err
		}
		if deliver {
			srv.k.message(s, m)
		}
	}
}

// refuse sends an error frame and closes c.
func refuse(c *wsconn.Conn, frame []byte, status wsconn.StatusCode, reason string) {
	ctx, cancel := contextWithTimeout(time.Second)
	c.WriteFrame(ctx, frame)
	cancel()
	c.Close(status, reason)
}

var errShutdown = errors.New("session: hub shutting down")
