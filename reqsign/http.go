package reqsign

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// Exporter returns the connection's exporter value for client_request_message
// (label [ExporterLabel], no context, [ExporterLen] bytes). It returns an
// error wrapping [ErrNoTLS] when cs is nil or the handshake is not complete.
func Exporter(cs *tls.ConnectionState) ([]byte, error) {
	if cs == nil || !cs.HandshakeComplete {
		return nil, ErrNoTLS
	}
	ekm, err := cs.ExportKeyingMaterial(ExporterLabel, nil, ExporterLen)
	if err != nil {
		return nil, fmt.Errorf("%w: exporter: %v", ErrNoTLS, err)
	}
	return ekm, nil
}

// KeyLookup returns the public key of an enrolled, not removed principal.
// The hub implements it over its store; an error (of any kind) makes
// [VerifyRequest] fail with it wrapped, so the caller maps "unknown or
// removed" to 401 as well (AUTH-13).
type KeyLookup func(ctx context.Context, principal string) (ed25519.PublicKey, error)

// VerifyRequest checks a server-side request's signature (AUTH-13): headers
// present and well formed, the principal known to lookup, vk-time within
// skew of now (skew <= 0 means [DefaultSkew]), and the signature valid over
// this request's method, request-target, body and the exporter of the TLS
// connection it arrived on, and its sequence number new on that connection
// ([CheckSeq]; the request's context must come from a server that calls
// [TrackConn] per connection for v2 requests to pass). body is the request
// body the handler read (the caller bounds its size). It returns the
// authenticated principal ID.
func VerifyRequest(r *http.Request, body []byte, lookup KeyLookup, now time.Time, skew time.Duration) (string, error) {
	h, err := ParseHeaders(r.Header)
	if err != nil {
		return "", err
	}
	ekm, err := ConnExporter(r.Context(), r.TLS)
	if err != nil {
		return "", err
	}
	pub, err := lookup(r.Context(), h.Principal)
	if err != nil {
		return "", fmt.Errorf("reqsign: principal %q: %w", h.Principal, err)
	}
	target := r.RequestURI
	if target == "" {
		target = r.URL.RequestURI()
	}
	if err := VerifySeq(pub, h.Principal, r.Method, target, body, h.Time, h.Seq, ekm, h.Signature, now, skew); err != nil {
		return "", err
	}
	if err := CheckSeq(r.Context(), h.Seq); err != nil {
		return "", err
	}
	return h.Principal, nil
}

// Transport is an [http.RoundTripper] that signs every request on its own,
// new TLS connection (AUTH-14, message v1: no sequence number): for each RoundTrip it dials and completes a
// TLS handshake, takes that connection's exporter, signs the request (now,
// from Now), and sends it over that connection only, which is closed when
// the response body is closed. A retry is a new RoundTrip, hence a new
// connection and a fresh signature. HTTP/2 is never negotiated.
//
// When TLSConfig carries a ClientSessionCache, each new connection resumes
// a TLS 1.3 session when it can (a PSK handshake with a fresh key exchange:
// no certificate chain, no server signature), which makes the connection
// per request far cheaper. The binding holds: the exporter comes from each
// handshake's own transcript and key exchange, so it differs on every
// connection, resumed or not, and a signature is still good on its own
// connection only. crypto/tls never sends 0-RTT early data, so nothing
// replayable travels before the handshake completes.
//
// The request body is read into memory to hash it. Use it as the Transport
// of an [http.Client], or as the HTTP client of a WebSocket dialer for
// signed session upgrades. The zero value is not usable: Key, Principal and
// TLSConfig are required. Safe for concurrent use.
type Transport struct {
	// Key signs requests.
	Key ed25519.PrivateKey
	// Principal is the signer's ID, sent in vk-relay.
	Principal string
	// TLSConfig configures the client side of each connection (RootCAs
	// pinning the hub's CA, MinVersion TLS 1.3). ServerName defaults to the
	// request's host. It is cloned, never modified.
	TLSConfig *tls.Config
	// Dialer dials the TCP connection; nil means a net.Dialer with a 30 s
	// timeout.
	Dialer *net.Dialer
	// Now returns the signing time; nil means time.Now. Pass a
	// clock.Clock's Now method to inject one.
	Now func() time.Time
	// ResponseHeaderTimeout bounds the wait for response headers; zero
	// means no limit beyond the request's context (long polls need 60 s+).
	ResponseHeaderTimeout time.Duration
}

// RoundTrip implements [http.RoundTripper].
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "https" {
		closeBody(req)
		return nil, fmt.Errorf("reqsign: refusing to sign a %q request: need https", req.URL.Scheme)
	}
	var body []byte
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("reqsign: read body: %w", err)
		}
		body = b
	}
	conn, err := t.dial(req.Context(), req.URL)
	if err != nil {
		return nil, err
	}
	cs := conn.ConnectionState()
	ekm, err := Exporter(&cs)
	if err != nil {
		conn.Close()
		return nil, err
	}
	now := time.Now
	if t.Now != nil {
		now = t.Now
	}
	ts := now()
	out := req.Clone(req.Context())
	if body != nil {
		out.Body = io.NopCloser(bytes.NewReader(body))
		out.ContentLength = int64(len(body))
		out.GetBody = nil
	}
	out.Header.Del(HeaderPrincipal)
	out.Header.Del(HeaderTime)
	out.Header.Del(HeaderSignature)
	SetHeaders(out.Header, t.Principal, ts, Sign(t.Key, t.Principal, out.Method, out.URL.RequestURI(), body, ts, ekm))

	once := &oneConn{conn: conn}
	tr := &http.Transport{
		DialTLSContext:        once.dial,
		DisableKeepAlives:     true,
		TLSNextProto:          map[string]func(string, *tls.Conn) http.RoundTripper{},
		ResponseHeaderTimeout: t.ResponseHeaderTimeout,
		MaxIdleConns:          -1,
	}
	resp, err := tr.RoundTrip(out)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return resp, nil
}

// dial opens a new TCP connection to u's host and completes the TLS
// handshake on it, offering only HTTP/1.1.
func (t *Transport) dial(ctx context.Context, u *url.URL) (*tls.Conn, error) {
	if t.TLSConfig == nil || t.Key == nil || t.Principal == "" {
		return nil, errors.New("reqsign: Transport needs Key, Principal and TLSConfig")
	}
	return dialTLS(ctx, t.TLSConfig, t.Dialer, hostPort(u.Hostname(), u.Port()), u.Hostname(), u.Host)
}

// dialTLS dials addr over TLS for HTTP/1.1 with a copy of cfg (its
// ServerName host unless set) through d (nil: a net.Dialer with a 30 s
// timeout); what names the peer in the error.
func dialTLS(ctx context.Context, cfg *tls.Config, d *net.Dialer, addr, host, what string) (*tls.Conn, error) {
	cfg = cfg.Clone()
	if cfg.ServerName == "" {
		cfg.ServerName = host
	}
	cfg.NextProtos = []string{"http/1.1"}
	if d == nil {
		d = &net.Dialer{Timeout: 30 * time.Second}
	}
	td := &tls.Dialer{NetDialer: d, Config: cfg}
	c, err := td.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("reqsign: dial %s: %w", what, err)
	}
	return c.(*tls.Conn), nil
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// oneConn hands its connection to the first dial and refuses every later
// one, so the HTTP transport can never send the signed request on another
// connection.
type oneConn struct {
	mu   sync.Mutex
	conn net.Conn
}

var errConnUsed = errors.New("reqsign: connection already used; sign again on a new one")

func (o *oneConn) dial(context.Context, string, string) (net.Conn, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	c := o.conn
	if c == nil {
		return nil, errConnUsed
	}
	o.conn = nil
	return c, nil
}
