// Package wsconn is the transport under vk's long-lived sessions (node↔hub
// at /v1/node/session, relay↔hub at /v1/gitlab/session): a WebSocket of
// JSON text frames, at most [MaxFrameBytes] each, through the hub's TLS 1.3
// listener (DESIGN "Decisions already taken").
//
// # Authentication
//
// The upgrade request is a GET of the session path with an empty body,
// signed by the principal's ed25519 key exactly like a client API request
// (AUTH-06, AUTH-11..14): the signature binds the exporter of the TLS
// connection it travels on. [Dial] therefore opens a fresh TLS connection
// for every session, signs the upgrade over that connection's exporter
// (reqsign.Transport) and upgrades on that very connection; a signature
// replayed on another connection does not verify. [Accept] runs the
// caller's verify function on the request (with its TLS state) before
// upgrading, and answers 401 with the API's error body
// {"error": …, "code": "unauthorized"} when it fails.
//
// # Frames and liveness
//
// [Conn.ReadFrame] returns one text message; a message over the read limit
// (MaxFrameBytes) ends the connection with close code 1009 (message too
// big) and the reason "read limited at … bytes", and ReadFrame returns an
// error wrapping [ErrTooLarge]. Binary messages end the connection with
// 1003. [Conn.WriteFrame] refuses frames over the limit without sending.
//
// Each Conn pings its peer every [Options.PingInterval] (default 15 s) and
// ends the connection when no pong arrives within [Options.PingTimeout]
// (default 10 s); its reads then fail with an error wrapping
// [ErrPingTimeout]. Pongs are answered while a ReadFrame is pending, so a
// session must keep a reader running (both session packages do). Timers
// come from an injected clock.
//
// # Close codes
//
// Sessions close with 1000 (normal: the peer asked, or a replacement
// session took over), 1001 (going away: the process is stopping), 1002
// (protocol error), 1008 (policy: unauthorized, version refused, limits),
// 1009 (frame too big) and 1011 (internal). [CloseStatus] reads the code
// from an error, -1 if none.
//
// This package imports the standard library, github.com/coder/websocket,
// reqsign and internal/clock only.
package wsconn

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/reqsign"
)

// MaxFrameBytes bounds one session frame, its encoded JSON: 1 MiB
// (NSESS-23, DECISIONS 12). It is the read limit of every Conn.
const MaxFrameBytes = 1 << 20

// Liveness defaults.
const (
	// DefaultPingInterval is how often a Conn pings its peer.
	DefaultPingInterval = 15 * time.Second
	// DefaultPingTimeout is how long a Conn waits for the pong.
	DefaultPingTimeout = 10 * time.Second
)

// StatusCode is a WebSocket close code (RFC 6455 section 7.4).
type StatusCode int

// Close codes used by vk sessions.
const (
	StatusNormal          StatusCode = 1000 // done, or replaced by a newer session
	StatusGoingAway       StatusCode = 1001 // the process is stopping; redial later
	StatusProtocolError   StatusCode = 1002 // a frame broke the session protocol
	StatusUnsupported     StatusCode = 1003 // a binary message
	StatusPolicyViolation StatusCode = 1008 // unauthorized, version refused, limits exceeded
	StatusTooBig          StatusCode = 1009 // a frame over MaxFrameBytes
	StatusInternal        StatusCode = 1011 // the peer failed
)

// Errors. Each is returned wrapped; test with errors.Is.
var (
	// ErrUnauthorized: the hub answered the upgrade 401 (bad, stale or
	// missing signature; principal unknown or removed). A *DialError
	// carries the status and body.
	ErrUnauthorized = errors.New("wsconn: unauthorized")
	// ErrRefused: the hub answered the upgrade with another non-101
	// status; a *DialError carries it.
	ErrRefused = errors.New("wsconn: upgrade refused")
	// ErrTooLarge: a frame over MaxFrameBytes was read (the connection is
	// closed with 1009) or was about to be written (nothing sent).
	ErrTooLarge = errors.New("wsconn: frame too large")
	// ErrPingTimeout: the peer did not answer a ping in time; the
	// connection is closed.
	ErrPingTimeout = errors.New("wsconn: keepalive ping timed out")
	// ErrBinary: the peer sent a binary message; the connection is closed
	// with 1003.
	ErrBinary = errors.New("wsconn: binary message")
	// ErrClosed: the connection was closed by this side.
	ErrClosed = errors.New("wsconn: connection closed")
)

// DialError is a non-101 answer to the upgrade request. errors.Is(err,
// ErrUnauthorized) holds for 401, errors.Is(err, ErrRefused) otherwise.
type DialError struct {
	// Status is the HTTP status code.
	Status int
	// Code is the body's "code" (e.g. "unauthorized"); empty when the body
	// was not the API's error JSON.
	Code string
	// Message is the body's "error", or the raw body's first bytes.
	Message string
	// Leader is the body's "leader": a standby hub instance's answer
	// names the leader's base URL there (docs/ha.md); empty otherwise.
	Leader string
}

// Error formats the status, code and message.
func (e *DialError) Error() string {
	return fmt.Sprintf("wsconn: upgrade answered %d %s: %s", e.Status, e.Code, e.Message)
}

// Is makes errors.Is(err, ErrUnauthorized) true for 401 and
// errors.Is(err, ErrRefused) for other statuses.
func (e *DialError) Is(target error) bool {
	if e.Status == http.StatusUnauthorized {
		return target == ErrUnauthorized
	}
	return target == ErrRefused
}

// Options tune a Conn. The zero value is usable.
type Options struct {
	// PingInterval is how often to ping the peer; 0 means
	// DefaultPingInterval, negative disables pings.
	PingInterval time.Duration
	// PingTimeout is how long to wait for a pong; 0 means
	// DefaultPingTimeout.
	PingTimeout time.Duration
	// Clock drives the ping timers; nil means real time.
	Clock clock.Clock
	// Now is the signing time source for Dial; nil means Clock.Now.
	Now func() time.Time
	// Logger receives debug lines about pings and closes; nil discards.
	Logger *slog.Logger
}

// Conn is one session connection: text frames in and out, pings, close
// codes. ReadFrame has one caller at a time; WriteFrame, Close and
// CloseNow are safe for concurrent use (frames are never interleaved).
type Conn struct {
	ws        *websocket.Conn
	principal string
	opts      Options

	ctx    context.Context // ends when the Conn is closed
	cancel context.CancelFunc

	pongs atomic.Int64 // pings answered, for tests and debugging

	mu     sync.Mutex
	reason error // why the Conn ended, when this side ended it; guarded by mu
}

// Dial opens a new TLS 1.3 connection to url (wss://host:port/v1/…/session),
// signs the upgrade request with key as principalID over that connection's
// exporter, and upgrades it (AUTH-06, AUTH-14). A non-101 answer returns a
// *DialError (ErrUnauthorized for 401). opts may be nil.
func Dial(ctx context.Context, url string, key ed25519.PrivateKey, principalID string, tlsConfig *tls.Config, opts *Options) (*Conn, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if strings.HasPrefix(url, "wss://") {
		url = "https://" + strings.TrimPrefix(url, "wss://")
	}
	if !strings.HasPrefix(url, "https://") {
		return nil, fmt.Errorf("wsconn: dial %s: need a wss:// or https:// URL", url)
	}
	now := o.Now
	if now == nil {
		now = clock.Or(o.Clock).Now
	}
	tr := &reqsign.Transport{Key: key, Principal: principalID, TLSConfig: tlsConfig, Now: now}
	ws, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{
		HTTPClient:      &http.Client{Transport: tr},
		CompressionMode: websocket.CompressionDisabled,
	})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil, dialError(resp)
		}
		return nil, fmt.Errorf("wsconn: dial %s: %w", url, err)
	}
	return newConn(ws, principalID, o), nil
}

func dialError(resp *http.Response) error {
	de := &DialError{Status: resp.StatusCode}
	var b []byte
	if resp.Body != nil {
		b, _ = io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
	}
	var body struct {
		Error  string `json:"error"`
		Code   string `json:"code"`
		Leader string `json:"leader"`
	}
	if json.Unmarshal(b, &body) == nil && body.Code != "" {
		de.Code, de.Message, de.Leader = body.Code, body.Error, body.Leader
	} else {
		de.Message = strings.TrimSpace(string(b))
	}
	return de
}

// VerifyFunc authenticates an upgrade request and returns the principal
// ID; any error answers 401.
type VerifyFunc func(r *http.Request) (principal string, err error)

// SignedBy returns a VerifyFunc that checks the request's signature with
// reqsign.VerifyRequest over the request's own TLS connection and an empty
// body (a session upgrade is a bodiless GET). now nil means time.Now; skew
// <= 0 means reqsign.DefaultSkew.
func SignedBy(lookup reqsign.KeyLookup, now func() time.Time, skew time.Duration) VerifyFunc {
	if now == nil {
		now = time.Now
	}
	return func(r *http.Request) (string, error) {
		if r.ContentLength > 0 {
			return "", fmt.Errorf("%w: session upgrade with a body", reqsign.ErrBadSignature)
		}
		return reqsign.VerifyRequest(r, nil, lookup, now(), skew)
	}
}

// Accept authenticates r with verify and, when it passes, upgrades it to a
// session Conn. Otherwise it answers 401 with
// {"error": "unauthorized", "code": "unauthorized"} (the reason goes to the
// returned error only, never to the peer) and returns an error wrapping
// ErrUnauthorized and verify's error. A request that is not a WebSocket
// upgrade is answered by the WebSocket library (426 or 400). opts may be
// nil.
func Accept(w http.ResponseWriter, r *http.Request, verify VerifyFunc, opts *Options) (*Conn, string, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	principal, err := verify(r)
	if err != nil {
		WriteUnauthorized(w)
		return nil, "", fmt.Errorf("%w: %w", ErrUnauthorized, err)
	}
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return nil, "", fmt.Errorf("wsconn: accept: %w", err)
	}
	return newConn(ws, principal, o), principal, nil
}

// WriteUnauthorized answers 401 with the API's error body.
func WriteUnauthorized(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	io.WriteString(w, `{"error":"unauthorized","code":"unauthorized"}`+"\n")
}

func newConn(ws *websocket.Conn, principal string, o Options) *Conn {
	if o.PingInterval == 0 {
		o.PingInterval = DefaultPingInterval
	}
	if o.PingTimeout <= 0 {
		o.PingTimeout = DefaultPingTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	o.Clock = clock.Or(o.Clock)
	ws.SetReadLimit(MaxFrameBytes)
	ctx, cancel := context.WithCancel(context.Background())
	c := &Conn{ws: ws, principal: principal, opts: o, ctx: ctx, cancel: cancel}
	if o.PingInterval > 0 {
		go c.keepalive()
	}
	return c
}

// Principal is the authenticated principal on the server side, the
// signer on the client side.
func (c *Conn) Principal() string { return c.principal }

// Done is closed when the Conn has ended (either side closed it, a read
// or ping failed).
func (c *Conn) Done() <-chan struct{} { return c.ctx.Done() }

// keepalive pings every PingInterval and ends the Conn when a pong does
// not come within PingTimeout.
func (c *Conn) keepalive() {
	t := c.opts.Clock.NewTimer(c.opts.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C():
		}
		pctx, cancel := context.WithCancel(c.ctx)
		timedOut := make(chan struct{})
		deadline := c.opts.Clock.AfterFunc(c.opts.PingTimeout, func() { close(timedOut); cancel() })
		err := c.ws.Ping(pctx)
		stopped := deadline.Stop()
		cancel()
		if err != nil {
			if c.ctx.Err() != nil {
				return
			}
			if !stopped {
				<-timedOut
				c.fail(ErrPingTimeout)
				return
			}
			c.fail(fmt.Errorf("wsconn: ping: %w", err))
			return
		}
		c.pongs.Add(1)
		t.Reset(c.opts.PingInterval)
	}
}

// fail records why this side ends the Conn and drops it without a close
// handshake (the peer stopped answering).
func (c *Conn) fail(reason error) {
	c.setReason(reason)
	c.opts.Logger.Debug("session connection ended", "reason", reason)
	c.cancel()
	c.ws.CloseNow()
}

func (c *Conn) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reason
}

// ReadFrame returns the next text message. It fails with an error wrapping
// ErrTooLarge for a message over MaxFrameBytes, ErrBinary for a binary
// one, ErrPingTimeout after a missed pong and ErrClosed after Close; the
// peer's close code is available through CloseStatus.
func (c *Conn) ReadFrame(ctx context.Context) ([]byte, error) {
	typ, b, err := c.ws.Read(ctx)
	if err != nil {
		if reason := c.failure(); reason != nil {
			return nil, fmt.Errorf("%w (%v)", reason, err)
		}
		if errors.Is(err, websocket.ErrMessageTooBig) {
			c.setReason(ErrTooLarge)
			c.cancel()
			return nil, fmt.Errorf("%w: over %d bytes: %v", ErrTooLarge, MaxFrameBytes, err)
		}
		c.cancel()
		return nil, fmt.Errorf("wsconn: read: %w", err)
	}
	if typ != websocket.MessageText {
		c.Close(StatusUnsupported, "binary messages are not part of the protocol")
		c.setReason(ErrBinary)
		return nil, ErrBinary
	}
	return b, nil
}

func (c *Conn) setReason(err error) {
	c.mu.Lock()
	if c.reason == nil {
		c.reason = err
	}
	c.mu.Unlock()
}

// WriteFrame sends b as one text message. A frame over MaxFrameBytes is
// refused with ErrTooLarge and nothing is sent.
func (c *Conn) WriteFrame(ctx context.Context, b []byte) error {
	if len(b) > MaxFrameBytes {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(b), MaxFrameBytes)
	}
	if err := c.ws.Write(ctx, websocket.MessageText, b); err != nil {
		if reason := c.failure(); reason != nil {
			return fmt.Errorf("%w (%v)", reason, err)
		}
		return fmt.Errorf("wsconn: write: %w", err)
	}
	return nil
}

// Close ends the Conn with code and reason (at most 123 bytes are sent),
// performing the close handshake for up to 5 s. Later calls do nothing.
func (c *Conn) Close(code StatusCode, reason string) error {
	c.setReason(ErrClosed)
	if len(reason) > 123 {
		reason = reason[:123]
	}
	err := c.ws.Close(websocket.StatusCode(code), reason)
	c.cancel()
	return err
}

// CloseNow ends the Conn without a close handshake.
func (c *Conn) CloseNow() error {
	c.setReason(ErrClosed)
	c.cancel()
	return c.ws.CloseNow()
}

// CloseStatus returns the close code in err (sent by the peer or by this
// side), or -1 when err carries none.
func CloseStatus(err error) StatusCode {
	return StatusCode(websocket.CloseStatus(err))
}

// CloseReason returns the close reason text in err, "" when none.
func CloseReason(err error) string {
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		return ce.Reason
	}
	return ""
}
