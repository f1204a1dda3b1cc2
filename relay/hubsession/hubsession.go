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
package hubsession

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
	cfg Config
	h   Handler
	log *slog.Logger
	clk clock.Clock

	mu        sync.Mutex
	out       *wsconn.Outbox        // current session's queue; nil while disconnected; guarded by mu
	version   int                   // guarded by mu
	status    client.ApprovalStatus // last status, "" before the first; guarded by mu
	refused   bool                  // the hub refused the relay for good; guarded by mu
	versionNo bool                  // the hub refused our version; guarded by mu
	stopped   bool                  // guarded by mu
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
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Client{cfg: cfg, h: h, clk: clock.Or(cfg.Clock),
		log: cfg.Logger.With(logkey.Component, "hub-session", logkey.RelayID, cfg.RelayID)}, nil
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
func (c *Client) Version() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.version
}

// Send queues a heartbeat (or another relay→hub message) and returns at
// once. It fails with ErrNotConnected when no session is up (the next
// session's report and heartbeat restate the state), ErrStopped after Run,
// and wsconn.ErrOverflow when the queue is full (the session is dropped
// and redialed).
func (c *Client) Send(m client.RelayMessage) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return ErrStopped
	}
	if c.out == nil {
		return ErrNotConnected
	}
	_, err := c.out.Push(func(seq uint64) ([]byte, error) {
		return client.EncodeRelayFrame(client.RelayFrame{Seq: seq, Msg: m})
	})
	if errors.Is(err, wsconn.ErrOverflow) {
		c.log.Warn("hub session queue full; dropping the session", slog.Any(logkey.Err, err))
		c.out.Close()
	}
	return err
}

// Run holds the session until ctx ends, redialing whenever it is lost
// (RSESS-01). It returns ctx's error.
func (c *Client) Run(ctx context.Context) error {
	defer func() {
		c.mu.Lock()
		c.stopped = true
		c.mu.Unlock()
	}()
	return wsconn.Redialer{
		Once:       c.once,
		VersionErr: ErrVersion,
		VersionMsg: "the hub refused our session version: the hub must be upgraded; requesting no GitLab jobs",
		Clock:      c.clk,
		Rand:       c.cfg.Rand,
		Log:        c.log,
	}.Run(ctx)
}

func (c *Client) once(ctx context.Context) (bool, error) {
	conn, err := wsconn.Dial(ctx, c.cfg.URL, c.cfg.Key, c.cfg.RelayID, c.cfg.TLSConfig, &c.cfg.Conn)
	if err != nil {
		return false, err
	}
	defer conn.CloseNow()
	b, err := client.EncodeRelayFrame(client.RelayFrame{Msg: client.RelayHello{Versions: c.cfg.Versions, Relay: c.cfg.RelayID, Release: c.cfg.Release}})
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
	f, err := client.DecodeRelayFrame(b)
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	var w client.RelayWelcome
	switch m := f.Msg.(type) {
	case *client.RelayWelcome:
		w = *m
	case *client.RelayError:
		return false, c.hubError(m)
	default:
		return false, fmt.Errorf("%w: expected welcome, got %s", ErrProtocol, f.Msg.RelayFrameType())
	}
	if !c.cfg.Versions.Contains(w.Version) || w.HeartbeatSecs <= 0 {
		conn.Close(wsconn.StatusProtocolError, "bad welcome")
		return false, fmt.Errorf("%w: welcome version %d heartbeat %d s", ErrProtocol, w.Version, w.HeartbeatSecs)
	}
	out := wsconn.NewOutbox(c.cfg.QueueFrames)
	c.mu.Lock()
	c.out, c.version, c.versionNo = out, w.Version, false
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.out, c.version = nil, 0
		c.mu.Unlock()
		out.Close()
	}()
	c.log.Info("hub session up", logkey.Session, w.Handle, "version", w.Version, "heartbeat_secs", w.HeartbeatSecs)
	report := c.h.Connected(w)
	if err := c.Send(report); err != nil {
		return true, err
	}
	err = c.pump(ctx, conn, out, w)
	c.h.Disconnected(err)
	return true, err
}

// hubError maps the hub's error frame to an error and records a version
// refusal.
func (c *Client) hubError(m *client.RelayError) error {
	if m.Code == client.RelayErrorVersion {
		c.mu.Lock()
		c.versionNo = true
		c.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrVersion, m.Message)
	}
	return fmt.Errorf("%w: %s: %s", ErrRefused, m.Code, m.Message)
}

func (c *Client) pump(ctx context.Context, conn *wsconn.Conn, out *wsconn.Outbox, w client.RelayWelcome) error {
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
				cancel()
				conn.CloseNow()
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
	var lastIn uint64
	for {
		b, err := conn.ReadFrame(ctx)
		if err != nil {
			return err
		}
		f, err := client.DecodeRelayFrame(b)
		if err != nil {
			conn.Close(wsconn.StatusProtocolError, "undecodable frame")
			return fmt.Errorf("%w: %w", ErrProtocol, err)
		}
		switch m := f.Msg.(type) {
		case *client.RelayKeepalive:
			continue
		case *client.RelayError:
			return c.hubError(m)
		case *client.ServerStatus, *client.Update:
		default:
			conn.Close(wsconn.StatusProtocolError, "unexpected frame")
			return fmt.Errorf("%w: unexpected %s", ErrProtocol, f.Msg.RelayFrameType())
		}
		if f.Seq != lastIn+1 {
			conn.Close(wsconn.StatusProtocolError, "seq gap")
			return fmt.Errorf("%w: seq %d after %d", ErrProtocol, f.Seq, lastIn)
		}
		lastIn = f.Seq
		switch m := f.Msg.(type) {
		case *client.ServerStatus:
			c.mu.Lock()
			c.status = m.Status
			if m.Status == client.ApprovalRefused {
				c.refused = true
			}
			c.mu.Unlock()
			c.log.Info("hub server status", "status", m.Status, "approval_url", m.ApprovalURL, "message", m.Message)
			c.h.ServerStatus(m)
		case *client.Update:
			if w.Version < client.RelayVersionUpdates {
				conn.Close(wsconn.StatusProtocolError, "update below version 3")
				return fmt.Errorf("%w: update in a version-%d session", ErrProtocol, w.Version)
			}
			c.h.Update(m)
		}
	}
}
