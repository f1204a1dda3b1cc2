// Package hubsession is vk-gitlab's session with its hub at
// /v1/gitlab/session (RSESS-*): it dials through internal/wsconn with the
// relay key, says hello with the relay's version range (2..3, RSESS-10),
// sends the relay's report after each welcome and its heartbeat every
// period the hub states, queues the relay's change heartbeats (RSESS-06)
// and delivers the hub's server status (RSESS-07) and update requests to
// the relay. It redials whenever the session is lost (RSESS-01) with
// exponential backoff from 1 s to 30 s, ±25% jitter.
//
// Approval gate (RSESS-07, RSESS-12): [Client.MayRequestJobs] is true only
// while the last server status received is "approved": false before the
// first status, while pending, rejected or rebound, and for good after
// "refused". When the hub refuses our version (it speaks only version 1)
// the client logs that the hub must be upgraded, MayRequestJobs stays
// false, and it redials about once a minute (60 s ± 10%).
//
// A relay session is never resumed: every connection is a new session
// whose seqs start at 1, and frames queued while disconnected are dropped
// (the report and the next heartbeat restate everything).
//
// The dial, handshake, pump, seq bookkeeping and redial loop are shared
// with the node's client in internal/sessionclient (as a one-shot
// stream); this package keeps what is the relay's own: relay frames, the
// approval gate, the update rule (RSESS-10), its sentinels and log lines,
// and the relay's [Handler].
package hubsession

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
	"github.com/vk-ci/vk/proto/client"
)

// Backoff bounds and the version-refusal redial period (RSESS-12).
const (
	MinBackoff     = wsconn.MinBackoff     // first redial delay, and after a session that was welcomed
	MaxBackoff     = wsconn.MaxBackoff     // the delay doubles up to this
	Jitter         = wsconn.Jitter         // each delay is scaled by a factor in [1-Jitter, 1+Jitter)
	VersionBackoff = wsconn.VersionBackoff // redial delay after a version refusal (±10%)
)

// Errors.
var (
	// ErrVersion: the hub refused our version range; it must be upgraded
	// (RSESS-12).
	ErrVersion = errors.New("hubsession: hub refused our protocol version")
	// ErrRefused: the hub ended the session with an error frame (limits,
	// unauthorized, replaced, shutdown, …).
	ErrRefused = errors.New("hubsession: hub ended the session")
	// ErrProtocol: the hub broke the protocol.
	ErrProtocol = errors.New("hubsession: hub protocol error")
	// ErrStopped: Send after Run returned.
	ErrStopped = errors.New("hubsession: client stopped")
	// ErrNotConnected: Send while no session is up; the frame is dropped.
	ErrNotConnected = errors.New("hubsession: no session")
)

// Handler is what the relay implements. Methods are called from the
// client's goroutine, one at a time; they must not block for long and may
// call [Client.Send].
type Handler interface {
	// Connected runs after each welcome, before anything else is sent.
	// It returns the report to send first (RSESS-02, RSESS-03).
	Connected(w client.RelayWelcome) client.RelayReport
	// ServerStatus delivers the hub's status of the relay's GitLab server
	// (RSESS-07); MayRequestJobs already reflects it.
	ServerStatus(s *client.ServerStatus)
	// Update delivers an update request (version 3).
	Update(u *client.Update)
	// Disconnected: the session ended (err says why); the client redials.
	Disconnected(err error)
	// Heartbeat returns the relay's current heartbeat (RSESS-04), sent
	// every period the hub stated.
	Heartbeat() client.RelayHeartbeat
}

// Config configures a Client. URL, RelayID, Key and TLSConfig are
// required.
type Config struct {
	// URL is wss://hub:port/v1/gitlab/session.
	URL string
	// Others are the session URLs of further hub instances (optional):
	// when the one dialled cannot be reached the next dial goes to the
	// next of URL, Others... (docs/ha.md).
	Others []string
	// RelayID is the relay's enrolled ID.
	RelayID string
	// Key is the relay key.
	Key ed25519.PrivateKey
	// TLSConfig pins the hub's CA (TLS 1.3).
	TLSConfig *tls.Config
	// Versions is the range offered; zero means client.RelayClientVersions
	// (2..3).
	Versions client.VersionRange
	// Release is vk-gitlab's version for the hello.
	Release string
	// QueueFrames bounds the outbound queue; 0 means 256.
	QueueFrames int
	// Clock drives backoff and heartbeats; nil means real time.
	Clock clock.Clock
	// Rand returns a uniform number in [0, 1) for jitter; nil means
	// math/rand/v2.
	Rand func() float64
	// Logger receives connect, refuse and drop lines; nil discards.
	Logger *slog.Logger
	// Conn tunes the WebSocket pings.
	Conn wsconn.Options
}

// Client holds the relay's hub session. Create it with New; Run it once.
type Client struct {
	core *sessionclient.Client[client.RelayMessage, client.RelayWelcome]
	log  *slog.Logger

	mu        sync.Mutex
	status    client.ApprovalStatus // last status, "" before the first; guarded by mu
	refused   bool                  // the hub refused the relay for good; guarded by mu
	versionNo bool                  // the hub refused our version; guarded by mu
}

// New returns a Client; it does not dial until Run.
func New(cfg Config, h Handler) (*Client, error) {
	if cfg.URL == "" || cfg.RelayID == "" || cfg.Key == nil || cfg.TLSConfig == nil || h == nil {
		return nil, errors.New("hubsession: Config needs URL, RelayID, Key, TLSConfig and a Handler")
	}
	if cfg.Versions == (client.VersionRange{}) {
		cfg.Versions = client.RelayClientVersions
	}
	if cfg.QueueFrames <= 0 {
		cfg.QueueFrames = 256
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Client{log: cfg.Logger.With(logkey.Component, "hub-session", logkey.RelayID, cfg.RelayID)}
	c.core = sessionclient.New(sessionclient.Config{
		URL:         cfg.URL,
		Others:      cfg.Others,
		Principal:   cfg.RelayID,
		Key:         cfg.Key,
		TLSConfig:   cfg.TLSConfig,
		Conn:        cfg.Conn,
		Versions:    cfg.Versions,
		Resumable:   false, // a relay session is never resumed (package doc)
		QueueFrames: cfg.QueueFrames,
		Errors:      sessionclient.Errors{Version: ErrVersion, Protocol: ErrProtocol, Stopped: ErrStopped, NotConnected: ErrNotConnected},
		VersionMsg:  "the hub refused our session version: the hub must be upgraded; requesting no GitLab jobs",
		OverflowMsg: "hub session queue full; dropping the session",
		Clock:       cfg.Clock,
		Rand:        cfg.Rand,
		Log:         c.log,
	}, kind{c: c, cfg: cfg, h: h})
	return c, nil
}

// Status returns the last server status from the hub, "" before the
// first.
func (c *Client) Status() client.ApprovalStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status
}

// MayRequestJobs reports whether runners may ask GitLab for jobs now
// (RSESS-07, RSESS-12): the last status is approved, the relay was never
// refused for good, and the hub did not refuse our version.
func (c *Client) MayRequestJobs() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status == client.ApprovalApproved && !c.refused && !c.versionNo
}

// Version returns the negotiated version, 0 when no session is up.
func (c *Client) Version() int { return c.core.Version() }

// Send queues a heartbeat (or another relay→hub message) and returns at
// once. It fails with ErrNotConnected when no session is up (the next
// session's report and heartbeat restate the state), ErrStopped after Run,
// and wsconn.ErrOverflow when the queue is full (the session is dropped
// and redialed).
func (c *Client) Send(m client.RelayMessage) error { return c.core.Send(m) }

// Run holds the session until ctx ends, redialing whenever it is lost
// (RSESS-01). It returns ctx's error.
func (c *Client) Run(ctx context.Context) error { return c.core.Run(ctx) }

// kind is the relay's part of the shared session client: relay frames, a
// hello without resume, the approval gate fed by error frames and server
// statuses, and the relay's Handler.
//
// Kept apart from the node's kind although they look alike: a version
// refusal here also closes the job gate (RSESS-12), the hub may send only
// server status and update, and the version rule (update needs 3,
// RSESS-10) is checked on delivery, after the seq.
type kind struct {
	c   *Client
	cfg Config
	h   Handler
}

func (k kind) Hello(*sessionclient.Resume) ([]byte, error) {
	return client.EncodeRelayFrame(client.RelayFrame{Msg: client.RelayHello{Versions: k.cfg.Versions, Relay: k.cfg.RelayID, Release: k.cfg.Release}})
}

func (kind) Encode(seq uint64, m client.RelayMessage) ([]byte, error) {
	return client.EncodeRelayFrame(client.RelayFrame{Seq: seq, Msg: m})
}

func (kind) Decode(b []byte) (uint64, client.RelayMessage, error) {
	f, err := client.DecodeRelayFrame(b)
	return f.Seq, f.Msg, err
}

func (kind) Type(m client.RelayMessage) string { return string(m.RelayFrameType()) }

func (k kind) Welcome(m client.RelayMessage) (client.RelayWelcome, sessionclient.Welcome, bool) {
	w, ok := m.(*client.RelayWelcome)
	if !ok {
		return client.RelayWelcome{}, sessionclient.Welcome{}, false
	}
	return *w, sessionclient.Welcome{Handle: w.Handle, Version: w.Version, HeartbeatSecs: w.HeartbeatSecs}, true
}

// Refusal maps the hub's error frame to an error and records a version
// refusal.
func (k kind) Refusal(m client.RelayMessage) error {
	e, ok := m.(*client.RelayError)
	if !ok {
		return nil
	}
	if e.Code == client.RelayErrorVersion {
		k.c.mu.Lock()
		k.c.versionNo = true
		k.c.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrVersion, e.Message)
	}
	return fmt.Errorf("%w: %s: %s", ErrRefused, e.Code, e.Message)
}

func (kind) Keepalive(m client.RelayMessage) bool {
	_, ok := m.(*client.RelayKeepalive)
	return ok
}

func (kind) Inbound(m client.RelayMessage) bool {
	switch m.(type) {
	case *client.ServerStatus, *client.Update:
		return true
	}
	return false
}

func (kind) Admit(client.RelayMessage, int) (string, error) { return "", nil }

func (k kind) Deliver(m client.RelayMessage, version int) (string, error) {
	switch m := m.(type) {
	case *client.ServerStatus:
		k.c.mu.Lock()
		k.c.status = m.Status
		if m.Status == client.ApprovalRefused {
			k.c.refused = true
		}
		k.c.mu.Unlock()
		k.c.log.Info("hub server status", "status", m.Status, "approval_url", m.ApprovalURL, "message", m.Message)
		k.h.ServerStatus(m)
	case *client.Update:
		if version < client.RelayVersionUpdates {
			return "update below version 3", fmt.Errorf("%w: update in a version-%d session", ErrProtocol, version)
		}
		k.h.Update(m)
	}
	return "", nil
}

func (kind) Sendable(client.RelayMessage, int) error { return nil }

// Connected clears a past version refusal and sends the relay's report
// first (RSESS-02, RSESS-03).
func (k kind) Connected(w client.RelayWelcome, _ bool) error {
	k.c.mu.Lock()
	k.c.versionNo = false
	k.c.mu.Unlock()
	return k.c.Send(k.h.Connected(w))
}

func (k kind) Heartbeat() client.RelayMessage { return k.h.Heartbeat() }

func (k kind) Disconnected(err error) { k.h.Disconnected(err) }
