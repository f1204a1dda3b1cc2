// Package session is the node's client of its hub session
// (/v1/node/session, NSESS-*): it dials through internal/wsconn with the
// node key (AUTH-06), says hello with its version range (and, on
// reconnect, the previous handle and the last hub seq it processed),
// delivers hub messages to the agent's [Handler] and sends the agent's
// messages from a queue, numbering them and replaying what the hub has not
// processed when a session is resumed (STYLE C6).
//
// When the session is lost it redials with exponential backoff from 1 s
// to 30 s, ±25% jitter, reset after a welcome. A hub that refuses our
// version is redialed about once a minute (60 s ± 10%), logging that one
// side must be upgraded. After each welcome [Handler.Connected] runs
// before anything else is sent: on a new session the agent sends report
// then held there (NSESS-11, NSESS-24). While connected, the client sends
// the agent's [Handler.Heartbeat] every period the hub stated, the first
// after a random part of it so a reconnecting fleet spreads out.
//
// Frames the agent sends while disconnected queue (bounded) and are sent
// when the session resumes; if the hub starts a new session instead they
// are dropped, and the durable mechanisms (held, output offsets from
// output_ack, results repeated until recorded) make the agent resend what
// matters.
package session

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/internal/wsconn"
	"github.com/vk-ci/vk/proto/dispatch"
)

// Backoff bounds (1–30 s, ±25%) and the version-refusal redial period.
const (
	MinBackoff     = wsconn.MinBackoff     // first redial delay, and after a session that was welcomed
	MaxBackoff     = wsconn.MaxBackoff     // the delay doubles up to this
	Jitter         = wsconn.Jitter         // each delay is scaled by a factor in [1-Jitter, 1+Jitter)
	VersionBackoff = wsconn.VersionBackoff // redial delay after a version refusal (±10%)
)

// Errors.
var (
	// ErrVersion: the hub refused our version range (its error frame's
	// message names both ranges).
	ErrVersion = errors.New("session: hub refused our protocol version")
	// ErrRefused: the hub ended or refused the session with an error
	// frame (code in the message).
	ErrRefused = errors.New("session: hub ended the session")
	// ErrProtocol: the hub broke the protocol (seq gap, job message below
	// version 3, unexpected frame).
	ErrProtocol = errors.New("session: hub protocol error")
	// ErrStopped: Send after Run returned.
	ErrStopped = errors.New("session: client stopped")
)

// Handler is what the node agent implements. Its methods are called from
// the client's goroutine, one at a time; they must not block for long and
// may call [Client.Send].
type Handler interface {
	// Connected runs after each welcome, before any queued frame is sent.
	// When !w.Resumed the session is new: seq restarted, and the agent
	// must send its report then held now (NSESS-11, NSESS-24).
	Connected(w dispatch.Welcome)
	// Message delivers one state-changing hub frame, in seq order, once
	// per session: a pointer to a dispatch message (*dispatch.Offer,
	// *dispatch.Settings, …).
	Message(m dispatch.Message)
	// Disconnected: the connection ended (err says why); the client
	// redials.
	Disconnected(err error)
	// Heartbeat returns the node's current heartbeat, sent every period
	// the hub stated.
	Heartbeat() dispatch.Heartbeat
}

// Config configures a Client. URL, NodeID, Key and TLSConfig are required.
type Config struct {
	// URL is the hub's session URL, wss://host:port/v1/node/session.
	URL string
	// NodeID is the node's enrolled ID.
	NodeID string
	// Key is the node key (AUTH-06).
	Key ed25519.PrivateKey
	// TLSConfig pins the hub's CA (TLS 1.3).
	TLSConfig *tls.Config
	// Versions is the range offered; zero means dispatch.NodeVersions.
	Versions dispatch.Range
	// Release is vk's version for the hello.
	Release string
	// QueueFrames bounds the outbound queue (and the frames kept for
	// replay); 0 means 1024.
	QueueFrames int
	// Clock drives backoff and heartbeats; nil means real time.
	Clock clock.Clock
	// Rand returns a uniform number in [0, 1) for jitter; nil means
	// math/rand/v2.
	Rand func() float64
	// Logger receives connect, refuse and drop lines; nil discards.
	Logger *slog.Logger
	// Conn tunes the WebSocket pings (its own Clock; real when nil).
	Conn wsconn.Options
}

// Client holds the node's session. Create it with New; Run it once.
type Client struct {
	cfg Config
	h   Handler
	log *slog.Logger
	clk clock.Clock
	out *wsconn.Outbox

	mu      sync.Mutex
	handle  string // current or last session handle; guarded by mu
	version int    // negotiated version, 0 before the first welcome; guarded by mu
	lastIn  uint64 // last hub seq processed; guarded by mu
	broken  bool   // the queue lost frames: next dial starts a new session; guarded by mu
	stopped bool   // guarded by mu
}

// New returns a Client; it does not dial until Run.
func New(cfg Config, h Handler) (*Client, error) {
	if cfg.URL == "" || cfg.NodeID == "" || cfg.Key == nil || cfg.TLSConfig == nil || h == nil {
		return nil, errors.New("session: Config needs URL, NodeID, Key, TLSConfig and a Handler")
	}
	if cfg.Versions == (dispatch.Range{}) {
		cfg.Versions = dispatch.NodeVersions
	}
	if cfg.QueueFrames <= 0 {
		cfg.QueueFrames = 1024
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Client{cfg: cfg, h: h, clk: clock.Or(cfg.Clock), out: wsconn.NewOutbox(cfg.QueueFrames),
		log: cfg.Logger.With(logkey.Component, "node-session", logkey.NodeID, cfg.NodeID)}, nil
}

// Handle returns the current (or last) session handle, "" before the
// first welcome.
func (c *Client) Handle() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.handle
}

// Version returns the negotiated version, 0 before the first welcome.
func (c *Client) Version() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.version
}

// Send queues m for the hub and returns at once, assigning its seq. It
// fails with ErrProtocol for a stateless message or one the negotiated
// version lacks (egress below 6), and ErrStopped after Run returned. When
// the queue overflows the frame is dropped and the next connection starts
// a new session (the agent then resends its state from Connected).
func (c *Client) Send(m dispatch.Message) error {
	if m == nil || dispatch.Stateless(m) {
		return fmt.Errorf("%w: Send takes state-changing messages only", ErrProtocol)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return ErrStopped
	}
	if v := dispatch.MinVersion(m); c.version != 0 && v > c.version {
		return fmt.Errorf("%w: %s %s needs version %d, session is at %d", ErrProtocol, m.FrameType(), m.FrameKind(), v, c.version)
	}
	_, err := c.out.Push(func(seq uint64) ([]byte, error) {
		return dispatch.Encode(dispatch.Frame{Seq: seq, Msg: m})
	})
	if errors.Is(err, wsconn.ErrOverflow) {
		if !c.broken {
			c.log.Warn("session queue full: frames dropped; the next connection starts a new session", slog.Any(logkey.Err, err))
		}
		c.broken = true
		return fmt.Errorf("session: send: %w", err)
	}
	return err
}

// Run holds the session until ctx ends, redialing whenever it is lost.
// It returns ctx's error.
func (c *Client) Run(ctx context.Context) error {
	defer func() {
		c.mu.Lock()
		c.stopped = true
		c.mu.Unlock()
		c.out.Close()
	}()
	return wsconn.Redialer{
		Once:       c.once,
		VersionErr: ErrVersion,
		VersionMsg: "hub refused our session version; upgrade the hub or this node",
		Clock:      c.clk,
		Rand:       c.cfg.Rand,
		Log:        c.log,
	}.Run(ctx)
}

// once dials, says hello, and runs one connection. welcomed reports
// whether the hub welcomed us.
func (c *Client) once(ctx context.Context) (welcomed bool, err error) {
	conn, err := wsconn.Dial(ctx, c.cfg.URL, c.cfg.Key, c.cfg.NodeID, c.cfg.TLSConfig, &c.cfg.Conn)
	if err != nil {
		return false, err
	}
	defer conn.CloseNow()
	hello := dispatch.Hello{Versions: c.cfg.Versions, Node: c.cfg.NodeID, Release: c.cfg.Release}
	c.mu.Lock()
	if c.handle != "" && !c.broken {
		hello.Resume = &dispatch.Resume{Handle: c.handle, LastSeq: c.lastIn}
	}
	c.mu.Unlock()
	b, err := dispatch.Encode(dispatch.Frame{Msg: hello})
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
	f, err := dispatch.Decode(b)
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	var w dispatch.Welcome
	switch m := f.Msg.(type) {
	case *dispatch.Welcome:
		w = *m
	case *dispatch.ErrorFrame:
		if m.Code == dispatch.ErrorVersion {
			return false, fmt.Errorf("%w: %s", ErrVersion, m.Message)
		}
		return false, fmt.Errorf("%w: %s: %s", ErrRefused, m.Code, m.Message)
	default:
		return false, fmt.Errorf("%w: expected welcome, got %s", ErrProtocol, f.Msg.FrameType())
	}
	if !c.cfg.Versions.Contains(w.Version) || w.HeartbeatSecs <= 0 {
		conn.Close(wsconn.StatusProtocolError, "bad welcome")
		return false, fmt.Errorf("%w: welcome version %d heartbeat %d s", ErrProtocol, w.Version, w.HeartbeatSecs)
	}
	c.mu.Lock()
	resumeOK := w.Resumed && hello.Resume != nil && w.Handle == c.handle
	if resumeOK {
		if err := c.out.Rewind(w.LastSeq); err != nil {
			// The hub wants frames we no longer hold: start over.
			c.broken = true
			c.mu.Unlock()
			conn.Close(wsconn.StatusNormal, "cannot resume")
			return true, err
		}
	} else {
		c.out.Reset()
		c.lastIn = 0
		c.broken = false
	}
	c.handle, c.version = w.Handle, w.Version
	c.mu.Unlock()
	c.log.Info("hub session up", logkey.Session, w.Handle, "version", w.Version, "resumed", resumeOK,
		"heartbeat_secs", w.HeartbeatSecs, "last_seq", w.LastSeq)
	if !resumeOK {
		w.Resumed = false
	}
	c.h.Connected(w)
	err = c.pump(ctx, conn, w)
	c.h.Disconnected(err)
	return true, err
}

// pump runs the writer and the heartbeat ticker beside the reader until
// the connection ends.
func (c *Client) pump(ctx context.Context, conn *wsconn.Conn, w dispatch.Welcome) error {
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
			b, _, err := c.out.Next(ctx)
			if err != nil {
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
			c.Send(c.h.Heartbeat())
			t.Reset(period)
		}
	}()
	for {
		b, err := conn.ReadFrame(ctx)
		if err != nil {
			return err
		}
		f, err := dispatch.Decode(b)
		if err != nil {
			conn.Close(wsconn.StatusProtocolError, "undecodable frame")
			return fmt.Errorf("%w: %w", ErrProtocol, err)
		}
		switch m := f.Msg.(type) {
		case *dispatch.Keepalive:
			continue
		case *dispatch.ErrorFrame:
			if m.Code == dispatch.ErrorVersion {
				return fmt.Errorf("%w: %s", ErrVersion, m.Message)
			}
			return fmt.Errorf("%w: %s: %s", ErrRefused, m.Code, m.Message)
		case *dispatch.Hello, *dispatch.Welcome:
			conn.Close(wsconn.StatusProtocolError, "unexpected frame")
			return fmt.Errorf("%w: unexpected %s", ErrProtocol, m.FrameType())
		}
		if v := dispatch.MinVersion(f.Msg); v > w.Version {
			conn.Close(wsconn.StatusProtocolError, "message above negotiated version")
			return fmt.Errorf("%w: %s %s needs version %d, session is at %d", ErrProtocol, f.Msg.FrameType(), f.Msg.FrameKind(), v, w.Version)
		}
		c.mu.Lock()
		last := c.lastIn
		switch {
		case f.Seq <= last:
			c.mu.Unlock()
			continue // replayed; already processed
		case f.Seq != last+1:
			c.mu.Unlock()
			conn.Close(wsconn.StatusProtocolError, "seq gap")
			return fmt.Errorf("%w: seq %d after %d", ErrProtocol, f.Seq, last)
		}
		c.mu.Unlock()
		c.h.Message(f.Msg)
		c.mu.Lock()
		c.lastIn = f.Seq
		c.mu.Unlock()
	}
}
