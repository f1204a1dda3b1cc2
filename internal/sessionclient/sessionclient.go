// Package sessionclient is the client side of a session with the hub, the
// part the node (node/session, /v1/node/session) and the relay
// (relay/hubsession, /v1/gitlab/session) share: dial through
// internal/wsconn with the principal's key, say hello, read the welcome
// (or the hub's refusal), then run one connection's pump — a writer
// draining a wsconn.Outbox, a heartbeat every period the hub stated (the
// first after a random part of it, STYLE C6), and a reader that checks
// each state-changing frame's seq before delivering it — and redial with
// wsconn.Redialer whenever the connection is lost.
//
// # What stays with each kind
//
// A [Kind] supplies what differs and must not be merged although it looks
// alike: the frames and their encoders and decoders, the hello and
// welcome shapes, how an error frame maps to the kind's sentinels (and
// whatever the kind records about it: the relay's version gate), which
// frames the hub may send, what the negotiated version allows (NSESS-02
// for nodes before the seq check; the relay's update rule, RSESS-10, on
// delivery), what Connected sends first (the relay's report; the node
// agent's report and held), and the handler calls.
//
// # Resumable and one-shot streams
//
// [Config.Resumable] picks one of two stream disciplines; they are
// different contracts, not options of one:
//
//   - Resumable (nodes, NSESS-24): one Outbox for the client's life.
//     Send queues while disconnected; the hello names the last handle and
//     the last hub seq processed; a welcome that resumes that handle
//     rewinds the Outbox to the hub's last seq, and frames the hub
//     replays (seq at or below the last processed) are skipped. An
//     Outbox overflow drops frames and makes the next hello ask for a new
//     session. The negotiated version outlives the connection, since
//     queued frames are meant for it.
//   - One-shot (relays): every connection is a new session with a new
//     Outbox; Send without a session fails with Errors.NotConnected; an
//     overflow drops the session; any seq but the next is a gap; the
//     version is 0 while no session is up.
package sessionclient

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/internal/wsconn"
)

// Resume names the session a resumable client asks to continue.
type Resume struct {
	// Handle is the session handle of the last welcome.
	Handle string
	// LastSeq is the last hub seq the client processed in it.
	LastSeq uint64
}

// Welcome is what the client reads from the hub's welcome.
type Welcome struct {
	// Handle is the session handle.
	Handle string
	// Version is the negotiated protocol version.
	Version int
	// HeartbeatSecs is the heartbeat period in seconds; a welcome
	// stating ≤ 0 is a protocol error.
	HeartbeatSecs int
	// Resumed says the hub resumed the session the hello named
	// (resumable kinds only; false otherwise).
	Resumed bool
	// LastSeq is the last client seq the hub processed when Resumed.
	LastSeq uint64
}

// Kind is what differs between session kinds: M is the kind's message
// interface (a pointer to a decoded message on the way in, a value or a
// pointer on the way out), W its welcome. The client calls the methods
// from its own goroutines, the reader's calls (Refusal, Keepalive,
// Inbound, Admit, Deliver, Connected, Disconnected) one at a time; they
// must not block for long and may call [Client.Send]. Send calls
// Sendable with the client's lock held: it must not call back.
type Kind[M, W any] interface {
	// Hello encodes the hello frame; resume is nil for a new session
	// (always for a one-shot kind).
	Hello(resume *Resume) ([]byte, error)
	// Encode encodes m as the state-changing frame numbered seq.
	Encode(seq uint64, m M) ([]byte, error)
	// Decode decodes one frame from the hub.
	Decode(b []byte) (seq uint64, m M, err error)
	// Type names m's frame type in protocol errors.
	Type(m M) string
	// Welcome reads m when it is a welcome (ok false otherwise).
	Welcome(m M) (w W, info Welcome, ok bool)
	// Refusal returns the error an error frame m ends the connection
	// with, nil when m is not an error frame. It wraps the kind's version
	// sentinel ([Config.Errors].Version) for a version refusal.
	Refusal(m M) error
	// Keepalive reports whether m is a keepalive (no state; skipped).
	Keepalive(m M) bool
	// Inbound reports whether the hub may send m as a state-changing
	// frame; any other frame ends the connection as unexpected.
	Inbound(m M) bool
	// Admit checks m against the session version before its seq is
	// checked; a non-nil err ends the connection with close code 1002
	// and closeReason.
	Admit(m M, version int) (closeReason string, err error)
	// Deliver hands the next frame in seq order to the kind's handler; a
	// non-nil err ends the connection with close code 1002 and
	// closeReason, and the frame does not count as processed.
	Deliver(m M, version int) (closeReason string, err error)
	// Sendable checks a message given to Send against the negotiated
	// version (0 before the first welcome); an error is returned by Send.
	Sendable(m M, version int) error
	// Connected runs after each welcome, before anything queued is
	// written; resumed says the session continues. An error ends the
	// connection (which still counts as welcomed) without Disconnected.
	Connected(w W, resumed bool) error
	// Heartbeat returns the heartbeat to send every period the hub
	// stated.
	Heartbeat() M
	// Disconnected: a welcomed connection ended; err says why.
	Disconnected(err error)
}

// Errors are the kind's sentinels the shared client returns, each
// wrapped with %w.
type Errors struct {
	// Version: the hub refused our version range (the Redialer then waits
	// about wsconn.VersionBackoff). Required.
	Version error
	// Protocol: the hub broke the protocol. Required.
	Protocol error
	// Stopped: Send after Run returned. Required.
	Stopped error
	// NotConnected: Send while no session is up (one-shot kinds only).
	NotConnected error
}

// VersionSet is the range of protocol versions offered in the hello
// (dispatch.Range and client.VersionRange satisfy it).
type VersionSet interface {
	// Contains reports whether the hub may choose version v.
	Contains(v int) bool
}

// Config configures a [Client]. Every field is required unless it says
// otherwise; the kind packages fill in their defaults.
type Config struct {
	// URL is the hub's session URL (wss://host:port/v1/…/session).
	URL string
	// Others are further hub instances' session URLs (optional): when the
	// instance dialled cannot be reached, the next dial goes to the next
	// of URL, Others... in turn, so a client whose first instance died
	// still finds the new leader (docs/ha.md). A resumable kind that holds
	// a session to every instance (node/session) gives each its own
	// client with one URL instead.
	Others []string
	// Principal is the enrolled ID the upgrade is signed as.
	Principal string
	// Key is the principal's key (AUTH-06).
	Key ed25519.PrivateKey
	// TLSConfig pins the hub's CA.
	TLSConfig *tls.Config
	// Conn tunes the WebSocket pings; its zero value is usable.
	Conn wsconn.Options
	// Versions is the range offered; a welcome outside it is a protocol
	// error.
	Versions VersionSet
	// Resumable picks the stream discipline (package doc).
	Resumable bool
	// QueueFrames bounds the Outbox (frames unwritten, and kept for
	// replay); ≥ 1.
	QueueFrames int
	// Errors are the kind's sentinels.
	Errors Errors
	// VersionMsg is logged (at Error) after a version refusal.
	VersionMsg string
	// OverflowMsg is logged (at Warn) when Send overflows the Outbox.
	OverflowMsg string
	// Clock drives backoff and heartbeats; nil means real time.
	Clock clock.Clock
	// Rand returns a uniform number in [0, 1) for jitter; nil means
	// math/rand/v2.
	Rand func() float64
	// Log receives the client's lines, already tagged with the component
	// and principal.
	Log *slog.Logger
}

// Client holds one principal's session with the hub. Create it with New;
// Run it once.
type Client[M, W any] struct {
	cfg Config
	k   Kind[M, W]
	clk clock.Clock

	mu      sync.Mutex
	out     *wsconn.Outbox // resumable: for the client's life; one-shot: the session's, nil while none; guarded by mu
	handle  string         // current or last session handle; guarded by mu
	version int            // negotiated version (see package doc for when it is 0); guarded by mu
	lastIn  uint64         // last hub seq processed; guarded by mu
	broken  bool           // resumable: the Outbox lost frames, so the next hello asks for a new session; guarded by mu
	stopped bool           // guarded by mu
	target  string         // the leader a standby named, "" for the configured URL; guarded by mu
	next    int            // the configured URL dialled when target is "": an index into urls; guarded by mu
	urls    []string       // cfg.URL then cfg.Others
	// elsewhere: the last dial could not reach its instance and the next
	// goes to another one; guarded by mu.
	elsewhere bool
}

// New returns a Client for cfg and k; it does not dial until Run.
func New[M, W any](cfg Config, k Kind[M, W]) *Client[M, W] {
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	c := &Client[M, W]{cfg: cfg, k: k, clk: clock.Or(cfg.Clock), urls: append([]string{cfg.URL}, cfg.Others...)}
	if cfg.Resumable {
		c.out = wsconn.NewOutbox(cfg.QueueFrames)
	}
	return c
}

// Handle returns the current (or last) session handle, "" before the
// first welcome.
func (c *Client[M, W]) Handle() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.handle
}

// Version returns the negotiated version: 0 before the first welcome,
// and for a one-shot kind also while no session is up.
func (c *Client[M, W]) Version() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.version
}

// Send queues m for the hub and returns at once, assigning its seq. It
// fails with Errors.Stopped after Run returned, Sendable's error, and for
// a one-shot kind Errors.NotConnected while no session is up. On an
// Outbox overflow it returns an error wrapping wsconn.ErrOverflow: a
// resumable client drops the frame and asks for a new session on the next
// connection; a one-shot client drops the session.
func (c *Client[M, W]) Send(m M) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return c.cfg.Errors.Stopped
	}
	if c.out == nil {
		return c.cfg.Errors.NotConnected
	}
	if err := c.k.Sendable(m, c.version); err != nil {
		return err
	}
	_, err := c.out.Push(func(seq uint64) ([]byte, error) { return c.k.Encode(seq, m) })
	if errors.Is(err, wsconn.ErrOverflow) {
		if c.cfg.Resumable {
			if !c.broken {
				c.cfg.Log.Warn(c.cfg.OverflowMsg, slog.Any(logkey.Err, err))
			}
			c.broken = true
		} else {
			c.cfg.Log.Warn(c.cfg.OverflowMsg, slog.Any(logkey.Err, err))
			c.out.Close() // the writer sees it and ends the connection
		}
	}
	return err
}

// Run holds the session until ctx ends, redialing whenever it is lost.
// It returns ctx's error.
func (c *Client[M, W]) Run(ctx context.Context) error {
	defer func() {
		c.mu.Lock()
		c.stopped = true
		out := c.out
		c.mu.Unlock()
		if out != nil {
			out.Close()
		}
	}()
	return wsconn.Redialer{
		Once:       c.once,
		VersionErr: c.cfg.Errors.Version,
		VersionMsg: c.cfg.VersionMsg,
		Clock:      c.clk,
		Rand:       c.cfg.Rand,
		Log:        c.cfg.Log,
		Paced:      c.paced,
	}.Run(ctx)
}

// paced reports a failed dial after which the redial backoff need not
// grow (wsconn.Redialer.Paced): a hub instance that answered 503 (a
// standby that knows no leader yet, or one not ready), or an instance
// that could not be reached when the next dial goes to another one (the
// next configured URL, or the configured URL after a followed leader
// died). Around a failover these are the seconds before the new leader
// answers; growing the backoff through them made a session come back
// seconds after the leader was up (docs/ha.md).
func (c *Client[M, W]) paced(err error) bool {
	var de *wsconn.DialError
	if errors.As(err, &de) {
		return de.Status == http.StatusServiceUnavailable
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.elsewhere
}

// dial opens a connection to the URL followed: the configured URL in
// turn (cfg.URL, then cfg.Others), or the leader a standby hub instance
// named in its refusal (followed at once, one hop). When the URL dialled
// cannot be reached, the next dial goes to the next configured URL
// (docs/ha.md): a leader followed that died, or a configured instance
// that did, is skipped until the others failed too.
func (c *Client[M, W]) dial(ctx context.Context) (*wsconn.Conn, error) {
	c.mu.Lock()
	u := c.target
	if u == "" {
		u = c.urls[c.next]
	}
	c.mu.Unlock()
	conn, err := wsconn.Dial(ctx, u, c.cfg.Key, c.cfg.Principal, c.cfg.TLSConfig, &c.cfg.Conn)
	var de *wsconn.DialError
	switch {
	case err == nil:
		return conn, nil
	case errors.As(err, &de) && de.Leader != "":
		lu, ok := leaderURL(c.cfg.URL, de.Leader)
		if !ok || lu == u {
			return nil, err
		}
		c.cfg.Log.Info("hub instance is a standby; following the leader", "leader", de.Leader)
		c.mu.Lock()
		c.target = lu
		c.mu.Unlock()
		return wsconn.Dial(ctx, lu, c.cfg.Key, c.cfg.Principal, c.cfg.TLSConfig, &c.cfg.Conn)
	case !errors.As(err, &de) && ctx.Err() == nil:
		c.unreachable(u)
		return nil, err
	}
	c.mu.Lock()
	c.elsewhere = false
	c.mu.Unlock()
	return nil, err
}

// unreachable moves the next dial past u, which could not be reached:
// back from a leader followed to the configured URL, and from a
// configured URL to the next one.
func (c *Client[M, W]) unreachable(u string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.elsewhere = c.target != "" || len(c.urls) > 1
	c.target = ""
	if host(c.urls[c.next]) == host(u) {
		c.next = (c.next + 1) % len(c.urls)
		if len(c.urls) > 1 {
			c.cfg.Log.Info("hub instance unreachable; trying the next one", "next", c.urls[c.next])
		}
	}
}

// host is u's host:port ("" when u does not parse).
func host(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return ""
	}
	return p.Host
}

// leaderURL is the session URL on leader (a hub base URL, https://host:port)
// with cfgURL's path.
func leaderURL(cfgURL, leader string) (string, bool) {
	cu, err1 := url.Parse(cfgURL)
	lu, err2 := url.Parse(leader)
	if err1 != nil || err2 != nil || lu.Scheme != "https" || lu.Host == "" {
		return "", false
	}
	return cu.Scheme + "://" + lu.Host + cu.Path, true
}

// once dials, says hello, and runs one connection. welcomed reports
// whether the hub welcomed us.
func (c *Client[M, W]) once(ctx context.Context) (welcomed bool, err error) {
	conn, err := c.dial(ctx)
	if err != nil {
		return false, err
	}
	defer conn.CloseNow()
	var resume *Resume
	c.mu.Lock()
	if c.cfg.Resumable && c.handle != "" && !c.broken {
		resume = &Resume{Handle: c.handle, LastSeq: c.lastIn}
	}
	c.mu.Unlock()
	b, err := c.k.Hello(resume)
	if err != nil {
		return false, err
	}
	if err := conn.WriteFrame(ctx, b); err != nil {
		return false, err
	}
	b, err = conn.ReadFrame(ctx)
	if err != nil {
		return false, err
	}
	_, m, err := c.k.Decode(b)
	if err != nil {
		return false, fmt.Errorf("%w: %w", c.cfg.Errors.Protocol, err)
	}
	w, info, ok := c.k.Welcome(m)
	if !ok {
		if err := c.k.Refusal(m); err != nil {
			return false, err
		}
		return false, fmt.Errorf("%w: expected welcome, got %s", c.cfg.Errors.Protocol, c.k.Type(m))
	}
	if !c.cfg.Versions.Contains(info.Version) || info.HeartbeatSecs <= 0 {
		conn.Close(wsconn.StatusProtocolError, "bad welcome")
		return false, fmt.Errorf("%w: welcome version %d heartbeat %d s", c.cfg.Errors.Protocol, info.Version, info.HeartbeatSecs)
	}
	out, resumed, err := c.attach(info, resume != nil)
	if err != nil {
		conn.Close(wsconn.StatusNormal, "cannot resume")
		return true, err
	}
	if !c.cfg.Resumable {
		defer func() {
			c.mu.Lock()
			c.out, c.version = nil, 0
			c.mu.Unlock()
			out.Close()
		}()
		c.cfg.Log.Info("hub session up", logkey.Session, info.Handle, "version", info.Version, "heartbeat_secs", info.HeartbeatSecs)
	} else {
		c.cfg.Log.Info("hub session up", logkey.Session, info.Handle, "version", info.Version, "resumed", resumed,
			"heartbeat_secs", info.HeartbeatSecs, "last_seq", info.LastSeq)
	}
	if err := c.k.Connected(w, resumed); err != nil {
		return true, err
	}
	err = c.pump(ctx, conn, out, info)
	c.k.Disconnected(err)
	return true, err
}

// attach makes the welcomed session current: it resumes the stream when
// the hub resumed the session the hello named (resumable kinds), and
// otherwise starts both directions' seqs over. It fails with
// wsconn.ErrCannotResume when the hub wants frames no longer held; the
// next hello then asks for a new session.
func (c *Client[M, W]) attach(w Welcome, askedResume bool) (out *wsconn.Outbox, resumed bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	resumed = c.cfg.Resumable && w.Resumed && askedResume && w.Handle == c.handle
	switch {
	case resumed:
		if err := c.out.Rewind(w.LastSeq); err != nil {
			c.broken = true
			return nil, false, err
		}
	case c.cfg.Resumable:
		c.out.Reset()
	default:
		c.out = wsconn.NewOutbox(c.cfg.QueueFrames)
	}
	if !resumed {
		c.lastIn = 0
		c.broken = false
	}
	c.handle, c.version = w.Handle, w.Version
	return c.out, resumed, nil
}

// pump runs the writer and the heartbeat ticker beside the reader until
// the connection ends.
func (c *Client[M, W]) pump(ctx context.Context, conn *wsconn.Conn, out *wsconn.Outbox, w Welcome) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		conn.CloseNow()
		wg.Wait()
	}()
	wg.Add(2)
	go func() {
		defer wg.Done()
		for {
			b, _, err := out.Next(ctx)
			if err != nil {
				if ctx.Err() == nil {
					// A one-shot Outbox closed on overflow: the session
					// is dropped.
					cancel()
					conn.CloseNow()
				}
				return
			}
			if err := conn.WriteFrame(ctx, b); err != nil {
				cancel()
				conn.CloseNow()
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		// The first heartbeat comes after a random part of the period, so
		// a fleet reconnecting together spreads its heartbeats (STYLE C6).
		period := time.Duration(w.HeartbeatSecs) * time.Second
		t := c.clk.NewTimer(time.Duration(float64(period) * c.cfg.Rand()))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C():
			}
			c.Send(c.k.Heartbeat())
			t.Reset(period)
		}
	}()
	for {
		b, err := conn.ReadFrame(ctx)
		if err != nil {
			return err
		}
		seq, m, err := c.k.Decode(b)
		if err != nil {
			conn.Close(wsconn.StatusProtocolError, "undecodable frame")
			return fmt.Errorf("%w: %w", c.cfg.Errors.Protocol, err)
		}
		if c.k.Keepalive(m) {
			continue
		}
		if err := c.k.Refusal(m); err != nil {
			return err
		}
		if !c.k.Inbound(m) {
			conn.Close(wsconn.StatusProtocolError, "unexpected frame")
			return fmt.Errorf("%w: unexpected %s", c.cfg.Errors.Protocol, c.k.Type(m))
		}
		if reason, err := c.k.Admit(m, w.Version); err != nil {
			conn.Close(wsconn.StatusProtocolError, reason)
			return err
		}
		c.mu.Lock()
		last := c.lastIn
		c.mu.Unlock()
		switch {
		case c.cfg.Resumable && seq <= last:
			continue // replayed after a resume; already processed
		case seq != last+1:
			conn.Close(wsconn.StatusProtocolError, "seq gap")
			return fmt.Errorf("%w: seq %d after %d", c.cfg.Errors.Protocol, seq, last)
		}
		if reason, err := c.k.Deliver(m, w.Version); err != nil {
			conn.Close(wsconn.StatusProtocolError, reason)
			return err
		}
		c.mu.Lock()
		c.lastIn = seq
		c.mu.Unlock()
	}
}
