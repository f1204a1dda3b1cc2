// Package reqsign signs and verifies vk client API requests (AUTH-11 to
// AUTH-14). The relay, the node and the hub all import it; it depends on the
// standard library only.
//
// A signature is an ed25519 signature by the principal's key over the
// canonical client_request_message ([Message]), which binds:
//
//   - the principal ID (relay or node ID), sent in the vk-relay header;
//   - the HTTP method, upper case as sent;
//   - the path with query exactly as it appears on the request line
//     (the request-target, e.g. "/v1/jobs/abc/output?offset=0");
//   - the SHA-256 of the request body (of the empty string when there is none);
//   - the signing time, sent in the vk-time header as decimal Unix seconds
//     (UTC, no fraction, no time zone to get wrong);
//   - the TLS exporter value of the connection the request travels on:
//     [tls.ConnectionState.ExportKeyingMaterial] with label [ExporterLabel]
//     ("EXPORTER-vk-request-v1"), no context, and length [ExporterLen] (32).
//
// The signature goes base64 (standard alphabet, padded) in vk-signature.
//
// The message is a fixed ASCII tag followed by each field as a 4-byte
// big-endian length and its bytes, so no choice of field contents can make
// two different requests produce the same message.
//
// Because the exporter differs for every TLS connection, a signature is good
// on its own connection only (AUTH-14): a client opens a fresh connection for
// every request and signs every retry afresh. [Transport] does exactly that.
// TLS 1.3 session resumption does not change this (each resumed handshake
// has its own exporter), so clients may resume to make those connections
// cheap.
// A TLS-terminating proxy in front of the hub breaks the binding and is not
// supported. WebSocket sessions authenticate the same way: the upgrade
// request is a signed GET of the session path with an empty body (Transport
// signs it like any other request).
//
// The hub accepts a signature whose time is within the skew window of its
// own clock, [DefaultSkew] (300 s, DECISIONS 10) unless configured. Replay
// within the window on the same connection is not prevented here: a TLS
// connection carries a single request (the hub closes it after answering),
// and creates are idempotent by request_id (API-42).
package reqsign

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header names carried by every signed request (AUTH-11).
const (
	// HeaderPrincipal carries the principal's ID (relay ID, or node ID).
	HeaderPrincipal = "vk-relay"
	// HeaderTime carries the signing time as decimal Unix seconds.
	HeaderTime = "vk-time"
	// HeaderSignature carries the base64 (std, padded) ed25519 signature.
	HeaderSignature = "vk-signature"
)

// ExporterLabel is the RFC 5705/8446 exporter label of client_request_message.
const ExporterLabel = "EXPORTER-vk-request-v1"

// ExporterLen is the exporter value's length in bytes.
const ExporterLen = 32

// DefaultSkew is the largest accepted difference between vk-time and the
// verifier's clock, either way (DECISIONS 10).
const DefaultSkew = 300 * time.Second

// messageTag starts every client_request_message; it versions the format.
const messageTag = "vk-client-request-v1\n"

// maxPrincipalLen bounds the principal header; IDs are far shorter.
const maxPrincipalLen = 256

// Errors returned by [Verify], [ParseHeaders] and [VerifyRequest]. Each is
// returned wrapped; test with errors.Is. All of them mean 401 unauthorized
// at the API edge (API-47).
var (
	// ErrMissing: a signing header is absent or empty.
	ErrMissing = errors.New("reqsign: missing signature header")
	// ErrMalformed: a header is present but unparseable (bad base64, wrong
	// signature length, non-numeric time, over-long principal, bad key).
	ErrMalformed = errors.New("reqsign: malformed signature header")
	// ErrSkew: vk-time is further from the verifier's clock than the skew.
	ErrSkew = errors.New("reqsign: signing time outside the allowed skew")
	// ErrBadSignature: the signature does not verify over this request on
	// this connection.
	ErrBadSignature = errors.New("reqsign: bad signature")
	// ErrNoTLS: the request did not arrive over TLS, so there is no exporter
	// to bind to.
	ErrNoTLS = errors.New("reqsign: request not over TLS")
)

// Message returns the canonical client_request_message for the given
// fields (AUTH-12). t is reduced to whole Unix seconds, as sent in vk-time.
func Message(principal, method, pathQuery string, body []byte, t time.Time, exporter []byte) []byte {
	sum := sha256.Sum256(body)
	return message(principal, method, pathQuery, sum[:], t.Unix(), exporter)
}

func message(principal, method, pathQuery string, bodySum []byte, unix int64, exporter []byte) []byte {
	ts := strconv.FormatInt(unix, 10)
	fields := [][]byte{[]byte(principal), []byte(method), []byte(pathQuery), bodySum, []byte(ts), exporter}
	n := len(messageTag)
	for _, f := range fields {
		n += 4 + len(f)
	}
	m := make([]byte, 0, n)
	m = append(m, messageTag...)
	for _, f := range fields {
		m = binary.BigEndian.AppendUint32(m, uint32(len(f)))
		m = append(m, f...)
	}
	return m
}

// Sign returns the base64 vk-signature value for a request (AUTH-11/12).
// exporter must be the connection's exporter value ([Exporter]).
func Sign(key ed25519.PrivateKey, principal, method, pathQuery string, body []byte, t time.Time, exporter []byte) string {
	sig := ed25519.Sign(key, Message(principal, method, pathQuery, body, t, exporter))
	return base64.StdEncoding.EncodeToString(sig)
}

// Verify checks sig (the vk-signature value) over the request fields by
// pub. It returns nil, or an error wrapping [ErrMissing] (empty sig),
// [ErrMalformed], [ErrSkew] (|now - t| > skew; skew <= 0 means
// [DefaultSkew]) or [ErrBadSignature]. The skew is checked before the
// signature.
func Verify(pub ed25519.PublicKey, principal, method, pathQuery string, body []byte, t time.Time, exporter []byte, sig string, now time.Time, skew time.Duration) error {
	if sig == "" || principal == "" {
		return fmt.Errorf("%w: empty signature or principal", ErrMissing)
	}
	if len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("%w: public key of %d bytes", ErrMalformed, len(pub))
	}
	raw, err := base64.StdEncoding.DecodeString(sig)
	if err != nil || len(raw) != ed25519.SignatureSize {
		return fmt.Errorf("%w: signature is not %d bytes of base64", ErrMalformed, ed25519.SignatureSize)
	}
	if skew <= 0 {
		skew = DefaultSkew
	}
	if d := now.Sub(t); d > skew || d < -skew {
		return fmt.Errorf("%w: %s off (allowed %s)", ErrSkew, d.Round(time.Second), skew)
	}
	if !ed25519.Verify(pub, Message(principal, method, pathQuery, body, t, exporter), raw) {
		return ErrBadSignature
	}
	return nil
}

// Headers are the parsed signing headers of a request.
type Headers struct {
	// Principal is the vk-relay value: the signer's relay or node ID.
	Principal string
	// Time is the vk-time value, whole seconds, UTC.
	Time time.Time
	// Signature is the vk-signature value, still base64.
	Signature string
}

// SetHeaders writes the three signing headers onto h.
func SetHeaders(h http.Header, principal string, t time.Time, sig string) {
	h.Set(HeaderPrincipal, principal)
	h.Set(HeaderTime, strconv.FormatInt(t.Unix(), 10))
	h.Set(HeaderSignature, sig)
}

// ParseHeaders reads the signing headers from h. It returns an error
// wrapping [ErrMissing] when any is absent or empty, and [ErrMalformed]
// when the principal is over-long or contains control characters, or the
// time is not decimal Unix seconds.
func ParseHeaders(h http.Header) (Headers, error) {
	p, ts, sig := h.Get(HeaderPrincipal), h.Get(HeaderTime), h.Get(HeaderSignature)
	if p == "" || ts == "" || sig == "" {
		return Headers{}, fmt.Errorf("%w: need %s, %s and %s", ErrMissing, HeaderPrincipal, HeaderTime, HeaderSignature)
	}
	if len(p) > maxPrincipalLen || strings.IndexFunc(p, func(r rune) bool { return r < 0x21 || r == 0x7f }) >= 0 {
		return Headers{}, fmt.Errorf("%w: %s", ErrMalformed, HeaderPrincipal)
	}
	if len(ts) > 19 || strings.TrimLeft(ts, "0123456789") != "" {
		return Headers{}, fmt.Errorf("%w: %s is not decimal Unix seconds", ErrMalformed, HeaderTime)
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return Headers{}, fmt.Errorf("%w: %s: %v", ErrMalformed, HeaderTime, err)
	}
	return Headers{Principal: p, Time: time.Unix(unix, 0).UTC(), Signature: sig}, nil
}
