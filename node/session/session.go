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
//
// The dial, handshake, pump, seq bookkeeping and redial loop are shared
// with the relay's client in internal/sessionclient (as a resumable
// stream); this package keeps what is the node's own: dispatch frames,
// the resume hello, what a version allows (NSESS-02), its sentinels and
// log lines, and the agent's [Handler].
package session

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/internal/sessionclient"
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
	// URLs are further hub instances' session URLs: the client holds one
	// session to URL and one to each of these (BS-13, docs/ha.md).
	URLs []string
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

// Client holds the node's sessions: one to each hub instance it is
// given (see [Fleet]). Create it with New; Run it once.
type Client struct {
	f *fleet
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
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	log := cfg.Logger.With(logkey.Component, "node-session", logkey.NodeID, cfg.NodeID)
	f := &fleet{h: h, log: log, leader: -1}
	for i, u := range append([]string{cfg.URL}, cfg.URLs...) {
		l := log
		if len(cfg.URLs) > 0 {
			l = log.With("hub_url", u)
		}
		m := &member{f: f, i: i}
		m.core = sessionclient.New(sessionclient.Config{
			URL:         u,
			Principal:   cfg.NodeID,
			Key:         cfg.Key,
			TLSConfig:   cfg.TLSConfig,
			Conn:        cfg.Conn,
			Versions:    cfg.Versions,
			Resumable:   true,
			QueueFrames: cfg.QueueFrames,
			Errors:      sessionclient.Errors{Version: ErrVersion, Protocol: ErrProtocol, Stopped: ErrStopped},
			VersionMsg:  "hub refused our session version; upgrade the hub or this node",
			OverflowMsg: "session queue full: frames dropped; the next connection starts a new session",
			Clock:       cfg.Clock,
			Rand:        cfg.Rand,
			Log:         l,
		}, kind{cfg: cfg, h: m})
		f.members = append(f.members, m)
	}
	return &Client{f: f}, nil
}

// Handle returns the current (or last) handle of the session the agent
// follows, "" before the first welcome.
func (c *Client) Handle() string { return c.f.follow().core.Handle() }

// Version returns that session's negotiated version, 0 before the first
// welcome.
func (c *Client) Version() int { return c.f.follow().core.Version() }

// Refused counts the hub commands refused for an epoch older than the
// newest heard (a deposed leader's).
func (c *Client) Refused() uint64 { return c.f.refused.Load() }

// Send queues m for the hub and returns at once, assigning its seq. It
// fails with ErrProtocol for a stateless message or one the negotiated
// version lacks (egress below 6), and ErrStopped after Run returned. When
// the queue overflows the frame is dropped and the next connection starts
// a new session (the agent then resends its state from Connected). With
// several hub instances, reports and held go to every one, everything
// else to the one the agent follows.
func (c *Client) Send(m dispatch.Message) error {
	if m == nil || dispatch.Stateless(m) {
		return fmt.Errorf("%w: Send takes state-changing messages only", ErrProtocol)
	}
	err := c.f.send(m)
	if errors.Is(err, wsconn.ErrOverflow) {
		return fmt.Errorf("session: send: %w", err)
	}
	return err
}

// Run holds every session until ctx ends, redialing whenever one is
// lost. It returns ctx's error.
func (c *Client) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, m := range c.f.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.core.Run(ctx)
		}()
	}
	wg.Wait()
	return ctx.Err()
}

// kind is the node's part of the shared session client: dispatch frames,
// the resume hello, what a version allows (NSESS-02, checked before the
// seq), and the agent's Handler.
//
// Kept apart from the relay's kind although they look alike: the error
// frames map to this package's sentinels and record nothing (the relay's
// records a version refusal for its job gate), every hub→node message but
// hello and welcome is delivered (the relay accepts two), and the version
// rule applies to every job and egress message in both directions.
type kind struct {
	cfg Config
	h   Handler // the fleet's member for this session
}

func (k kind) Hello(r *sessionclient.Resume) ([]byte, error) {
	hello := dispatch.Hello{Versions: k.cfg.Versions, Node: k.cfg.NodeID, Release: k.cfg.Release}
	if r != nil {
		hello.Resume = &dispatch.Resume{Handle: r.Handle, LastSeq: r.LastSeq}
	}
	return dispatch.Encode(dispatch.Frame{Msg: hello})
}

func (kind) Encode(seq uint64, m dispatch.Message) ([]byte, error) {
	return dispatch.Encode(dispatch.Frame{Seq: seq, Msg: m})
}

func (kind) Decode(b []byte) (uint64, dispatch.Message, error) {
	f, err := dispatch.Decode(b)
	return f.Seq, f.Msg, err
}

func (kind) Type(m dispatch.Message) string { return string(m.FrameType()) }

func (kind) Welcome(m dispatch.Message) (dispatch.Welcome, sessionclient.Welcome, bool) {
	w, ok := m.(*dispatch.Welcome)
	if !ok {
		return dispatch.Welcome{}, sessionclient.Welcome{}, false
	}
	return *w, sessionclient.Welcome{Handle: w.Handle, Version: w.Version, HeartbeatSecs: w.HeartbeatSecs,
		Resumed: w.Resumed, LastSeq: w.LastSeq}, true
}

func (kind) Refusal(m dispatch.Message) error {
	e, ok := m.(*dispatch.ErrorFrame)
	if !ok {
		return nil
	}
	if e.Code == dispatch.ErrorVersion {
		return fmt.Errorf("%w: %s", ErrVersion, e.Message)
	}
	return fmt.Errorf("%w: %s: %s", ErrRefused, e.Code, e.Message)
}

func (kind) Keepalive(m dispatch.Message) bool {
	_, ok := m.(*dispatch.Keepalive)
	return ok
}

func (kind) Inbound(m dispatch.Message) bool {
	switch m.(type) {
	case *dispatch.Hello, *dispatch.Welcome:
		return false
	}
	return true
}

func (kind) Admit(m dispatch.Message, version int) (string, error) {
	if v := dispatch.MinVersion(m); v > version {
		return "message above negotiated version",
			fmt.Errorf("%w: %s %s needs version %d, session is at %d", ErrProtocol, m.FrameType(), m.FrameKind(), v, version)
	}
	return "", nil
}

func (k kind) Deliver(m dispatch.Message, _ int) (string, error) {
	k.h.Message(m)
	return "", nil
}

func (kind) Sendable(m dispatch.Message, version int) error {
	if v := dispatch.MinVersion(m); version != 0 && v > version {
		return fmt.Errorf("%w: %s %s needs version %d, session is at %d", ErrProtocol, m.FrameType(), m.FrameKind(), v, version)
	}
	return nil
}

func (k kind) Connected(w dispatch.Welcome, resumed bool) error {
	w.Resumed = resumed
	k.h.Connected(w)
	return nil
}

func (k kind) Heartbeat() dispatch.Message { return k.h.Heartbeat() }

func (k kind) Disconnected(err error) { k.h.Disconnected(err) }
