package session

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/wsconn"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

// Kind is the kind of principal a session authenticates.
type Kind string

// Principal kinds.
const (
	KindNode  Kind = "node"  // a node key: /v1/node/session only (AUTH-06)
	KindRelay Kind = "relay" // a relay key: /v1/gitlab/session
)

// Principal is what the hub's store knows of an enrolled principal.
type Principal struct {
	// Key is the principal's ed25519 public key.
	Key ed25519.PublicKey
	// Removed: an operator removed the principal; its sessions are refused
	// (AUTH-13).
	Removed bool
}

// ErrUnknownPrincipal is what a PrincipalLookup returns (wrapped) for an
// ID it does not know. Any lookup error refuses the session with 401.
var ErrUnknownPrincipal = errors.New("session: unknown principal")

// PrincipalLookup is the part of the hub's store sessions need: the
// public key and removed flag of a principal by kind and ID. The hub
// implements it; it must be safe for concurrent use.
type PrincipalLookup interface {
	// LookupPrincipal returns the principal, or an error (e.g. wrapping
	// ErrUnknownPrincipal) when it is not enrolled as kind.
	LookupPrincipal(ctx context.Context, kind Kind, id string) (Principal, error)
}

// Defaults (DECISIONS 10); each is a Config field.
const (
	DefaultHeartbeatSecs       = 5
	DefaultMissedHeartbeats    = 3
	DefaultMaxHeartbeatsPerSec = 5000
	DefaultRelayHeartbeatSecs  = 5
	DefaultQueueFrames         = 1024
	DefaultResumeWindow        = 5 * time.Minute
	DefaultHelloTimeout        = 10 * time.Second
	DefaultMaxPendingHellos    = 256
)

// Config configures the session servers. Lookup is required; every other
// zero field takes its default.
type Config struct {
	// Lookup authenticates principals. Required.
	Lookup PrincipalLookup
	// Logger receives connect, refuse and drop lines; nil discards.
	Logger *slog.Logger
	// Clock is the hub's time (signature skew, last seen, resume window,
	// hello deadline); nil means real time.
	Clock clock.Clock
	// Skew is the accepted signing-time skew; 0 means reqsign.DefaultSkew
	// (300 s).
	Skew time.Duration
	// HeartbeatSecs is the base node heartbeat period stated in welcome,
	// in seconds; 0 means 5. It grows with the fleet so the hub ingests at
	// most MaxHeartbeatsPerSec (STYLE C6).
	HeartbeatSecs int
	// MissedHeartbeats is how many periods without a frame make a node
	// unreachable (Welcome.UnreachableAfterSecs = period × this); 0 means 3.
	MissedHeartbeats int
	// MaxHeartbeatsPerSec caps the fleet's total heartbeat rate; 0 means
	// 5000.
	MaxHeartbeatsPerSec int
	// RelayHeartbeatSecs is the relay heartbeat period stated in welcome;
	// 0 means 5.
	RelayHeartbeatSecs int
	// QueueFrames bounds each session's outbound queue (frames waiting for
	// the socket; also how many written frames are kept to replay on
	// resume); 0 means 1024. Overflow ends the session.
	QueueFrames int
	// ResumeWindow is how long after a node's connection drops its
	// session may be resumed; 0 means 5 minutes. Later, the node gets a
	// new session.
	ResumeWindow time.Duration
	// HelloTimeout bounds the wait for the peer's hello; 0 means 10 s. A
	// peer silent that long gets an error frame of code protocol and close
	// 1002.
	HelloTimeout time.Duration
	// MaxPendingHellos caps the connections of one session server that
	// are upgraded but have not sent their hello yet; 0 means 256. Past
	// it, an upgrade request answers 503 unavailable before any upgrade.
	MaxPendingHellos int
	// NodeVersions is the node-session range the hub speaks; zero means
	// dispatch.HubVersions (3..6).
	NodeVersions dispatch.Range
	// RelayVersions is the relay-session range the hub speaks; zero means
	// 1..client.RelayVersion (RSESS-10: the hub speaks 1 to 3; a version-1
	// relay is accepted but refused new work, RSESS-11).
	RelayVersions client.VersionRange
	// Conn tunes the WebSocket pings of each session; its Clock defaults
	// to real time (not Clock).
	Conn wsconn.Options
}

func (c Config) withDefaults() Config {
	c.Logger = cmp.Or(c.Logger, slog.New(slog.DiscardHandler))
	c.Clock = clock.Or(c.Clock)
	c.HeartbeatSecs = positiveOr(c.HeartbeatSecs, DefaultHeartbeatSecs)
	c.MissedHeartbeats = positiveOr(c.MissedHeartbeats, DefaultMissedHeartbeats)
	c.MaxHeartbeatsPerSec = positiveOr(c.MaxHeartbeatsPerSec, DefaultMaxHeartbeatsPerSec)
	c.RelayHeartbeatSecs = positiveOr(c.RelayHeartbeatSecs, DefaultRelayHeartbeatSecs)
	c.QueueFrames = positiveOr(c.QueueFrames, DefaultQueueFrames)
	c.ResumeWindow = positiveOr(c.ResumeWindow, DefaultResumeWindow)
	c.HelloTimeout = positiveOr(c.HelloTimeout, DefaultHelloTimeout)
	c.MaxPendingHellos = positiveOr(c.MaxPendingHellos, DefaultMaxPendingHellos)
	c.NodeVersions = cmp.Or(c.NodeVersions, dispatch.HubVersions)
	c.RelayVersions = cmp.Or(c.RelayVersions, client.RelayHubVersions)
	return c
}

// positiveOr is v, or def when v is not above zero.
func positiveOr[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// HeartbeatPeriod returns the node heartbeat period, in seconds, for a
// fleet of n live sessions: the base period, lengthened so that n nodes
// send at most maxPerSec heartbeats a second in total (nomad's
// rate-scaled interval).
func HeartbeatPeriod(base, maxPerSec, n int) int {
	need := (n + maxPerSec - 1) / maxPerSec
	return max(base, need)
}

// verifier returns the upgrade check for kind: a signature by the
// principal's key over this connection (AUTH-06, AUTH-13, AUTH-14), the
// principal enrolled as kind and not removed.
func verifier(cfg Config, kind Kind) wsconn.VerifyFunc {
	lookup := func(ctx context.Context, id string) (ed25519.PublicKey, error) {
		p, err := cfg.Lookup.LookupPrincipal(ctx, kind, id)
		if err != nil {
			return nil, err
		}
		if p.Removed {
			return nil, fmt.Errorf("%w: %s %s removed", ErrUnauthorized, kind, id)
		}
		return p.Key, nil
	}
	return wsconn.SignedBy(lookup, cfg.Clock.Now, cfg.Skew)
}

// accept authenticates and upgrades r, logging a refusal.
func accept(cfg Config, kind Kind, w http.ResponseWriter, r *http.Request, log *slog.Logger) (*wsconn.Conn, string, bool) {
	c, principal, err := wsconn.Accept(w, r, verifier(cfg, kind), &cfg.Conn)
	if err != nil {
		log.Info("session refused", "kind", kind, "remote", r.RemoteAddr, "principal", r.Header.Get("vk-relay"), "reason", err)
		return nil, "", false
	}
	return c, principal, true
}

// newHandle returns a random session handle.
func newHandle() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// errNoHello: the peer sent no frame within the hello deadline.
var errNoHello = errors.New("session: no hello within the hello deadline")

// readHello reads the first frame with the hello deadline. When the
// deadline passes first, onTimeout runs while the connection is still
// open (to send the error frame and close it), and readHello returns an
// error wrapping errNoHello. The read itself is not given the deadline:
// cancelling a WebSocket read closes the connection at once, before any
// frame could say why.
func readHello(cfg Config, c *wsconn.Conn, onTimeout func()) ([]byte, error) {
	type result struct {
		b   []byte
		err error
	}
	got := make(chan result, 1)
	go func() {
		b, err := c.ReadFrame(context.Background())
		got <- result{b, err}
	}()
	expired := make(chan struct{})
	t := cfg.Clock.AfterFunc(cfg.HelloTimeout, func() { close(expired) })
	defer t.Stop()
	select {
	case r := <-got:
		if r.err != nil {
			return nil, fmt.Errorf("session: waiting for hello: %w", r.err)
		}
		return r.b, nil
	case <-expired:
		onTimeout() // closes c, which ends the read above
		return nil, fmt.Errorf("%w (%s)", errNoHello, cfg.HelloTimeout)
	}
}

// writeUnavailable answers 503 with the API's error body (retry in 1 s).
func writeUnavailable(w http.ResponseWriter, msg string) {
	b, _ := json.Marshal(client.Error{Error: msg, Code: client.CodeUnavailable, RetryAfterSecs: 1})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(http.StatusServiceUnavailable)
	w.Write(append(b, '\n'))
}
