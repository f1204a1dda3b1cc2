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
// on its own connection only (AUTH-14). A client may send many requests,
// one after another, on one connection it owns, signing each afresh over
// that connection's exporter; or open a new connection per request.
// [Pool] does the former (keep-alive), [Transport] the latter (what
// WebSocket upgrades use: the session then owns the connection). TLS 1.3
// session resumption does not change the binding either (each resumed
// handshake has its own exporter), so clients may resume to make new
// connections cheap.
//
// # Sequence numbers (message v2)
//
// A request sent on a kept-alive connection carries vk-seq: its ordinal on
// that connection, decimal, 1 for the first, each later request's larger
// than every earlier one's. Its signature is over client_request_message
// v2 (tag "vk-client-request-v2\n"), which adds the sequence number as a
// field between the time and the exporter. A request without vk-seq is
// signed over v1 (tag "vk-client-request-v1\n", no sequence field) and
// counts as sequence number 0. The verifier keeps, per connection, the
// largest sequence number it accepted ([TrackConn], [CheckSeq]) and refuses
// a request whose number is not larger: a request replayed on its own
// connection (a misbehaving client resending the same bytes) is refused,
// as is a second v1 request on one connection, so a v1 client keeps the
// one-request-per-connection contract it was written for.
//
// A TLS-terminating proxy in front of the hub breaks the binding and is not
// supported. WebSocket sessions authenticate the same way: the upgrade
// request is a signed GET of the session path with an empty body (Transport
// signs it like any other request).
//
// The hub accepts a signature whose time is within the skew window of its
// own clock, [DefaultSkew] (300 s, DECISIONS 10) unless configured. Within
// the window a signature is still good on its own connection only, and there
// only once (its sequence number); creates are idempotent by request_id
// (API-42) as well.
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
	// HeaderSeq carries the request's sequence number on its connection
	// (message v2); absent on v1 requests.
	HeaderSeq = "vk-seq"
)

// ExporterLabel is the RFC 5705/8446 exporter label of client_request_message.
const ExporterLabel = "EXPORTER-vk-request-v1"

// ExporterLen is the exporter value's length in bytes.
const ExporterLen = 32

// DefaultSkew is the largest accepted difference between vk-time and the
// verifier's clock, either way (DECISIONS 10).
const DefaultSkew = 300 * time.Second

// messageTag starts every client_request_message; it versions the format:
// v1 has no sequence number, v2 has one.
const (
	messageTag   = "vk-client-request-v1\n"
	messageTagV2 = "vk-client-request-v2\n"
)

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
	// ErrReplay: the request's sequence number is not larger than one the
	// verifier already accepted on this connection (an in-stream replay),
	// or the verifier tracks no sequence for the connection of a v2
	// request.
	ErrReplay = errors.New("reqsign: request sequence already used on this connection")
)

// Message returns the canonical client_request_message v1 for the given
// fields (AUTH-12): the one request of its connection. t is reduced to
// whole Unix seconds, as sent in vk-time.
func Message(principal, method, pathQuery string, body []byte, t time.Time, exporter []byte) []byte {
	return MessageSeq(principal, method, pathQuery, body, t, 0, exporter)
}

// MessageSeq returns client_request_message for a request with sequence
// number seq on its connection: v2 when seq > 0, v1 (as [Message]) when
// seq is 0.
func MessageSeq(principal, method, pathQuery string, body []byte, t time.Time, seq uint64, exporter []byte) []byte {
	sum := sha256.Sum256(body)
	return message(principal, method, pathQuery, sum[:], t.Unix(), seq, exporter)
}

func message(principal, method, pathQuery string, bodySum []byte, unix int64, seq uint64, exporter []byte) []byte {
	ts := strconv.FormatInt(unix, 10)
	tag := messageTag
	fields := [][]byte{[]byte(principal), []byte(method), []byte(pathQuery), bodySum, []byte(ts), exporter}
	if seq > 0 {
		tag = messageTagV2
		fields = [][]byte{[]byte(principal), []byte(method), []byte(pathQuery), bodySum, []byte(ts),
			strconv.AppendUint(nil, seq, 10), exporter}
	}
	n := len(tag)
	for _, f := range fields {
		n += 4 + len(f)
	}
	m := make([]byte, 0, n)
	m = append(m, tag...)
	for _, f := range fields {
		m = binary.BigEndian.AppendUint32(m, uint32(len(f)))
		m = append(m, f...)
	}
	return m
}

// Sign returns the base64 vk-signature value for a request (AUTH-11/12),
// the only one of its connection (v1). exporter must be the connection's
// exporter value ([Exporter]).
func Sign(key ed25519.PrivateKey, principal, method, pathQuery string, body []byte, t time.Time, exporter []byte) string {
	return SignSeq(key, principal, method, pathQuery, body, t, 0, exporter)
}

// SignSeq is [Sign] for the request with sequence number seq on its
// connection (v2 when seq > 0; send seq in vk-seq).
func SignSeq(key ed25519.PrivateKey, principal, method, pathQuery string, body []byte, t time.Time, seq uint64, exporter []byte) string {
	sig := ed25519.Sign(key, MessageSeq(principal, method, pathQuery, body, t, seq, exporter))
	return base64.StdEncoding.EncodeToString(sig)
}

// Verify checks sig (the vk-signature value) over the request fields by
// pub, for a v1 request (no sequence number). It returns nil, or an error
// wrapping [ErrMissing] (empty sig), [ErrMalformed], [ErrSkew] (|now - t| >
// skew; skew <= 0 means [DefaultSkew]) or [ErrBadSignature]. The skew is
// checked before the signature.
func Verify(pub ed25519.PublicKey, principal, method, pathQuery string, body []byte, t time.Time, exporter []byte, sig string, now time.Time, skew time.Duration) error {
	return VerifySeq(pub, principal, method, pathQuery, body, t, 0, exporter, sig, now, skew)
}

// VerifySeq is [Verify] for a request with sequence number seq (0: v1). It
// checks the signature only; whether seq is new on its connection is
// [CheckSeq]'s.
func VerifySeq(pub ed25519.PublicKey, principal, method, pathQuery string, body []byte, t time.Time, seq uint64, exporter []byte, sig string, now time.Time, skew time.Duration) error {
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
	if !ed25519.Verify(pub, MessageSeq(principal, method, pathQuery, body, t, seq, exporter), raw) {
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
	// Seq is the vk-seq value: the request's sequence number on its
	// connection; 0 when absent (a v1 request).
	Seq uint64
}

// SetHeaders writes the three signing headers of a v1 request onto h.
func SetHeaders(h http.Header, principal string, t time.Time, sig string) {
	h.Set(HeaderPrincipal, principal)
	h.Set(HeaderTime, strconv.FormatInt(t.Unix(), 10))
	h.Set(HeaderSignature, sig)
}

// SetHeadersSeq writes the signing headers of a request with sequence
// number seq onto h: those of [SetHeaders], and vk-seq when seq > 0.
func SetHeadersSeq(h http.Header, principal string, t time.Time, seq uint64, sig string) {
	SetHeaders(h, principal, t, sig)
	if seq > 0 {
		h.Set(HeaderSeq, strconv.FormatUint(seq, 10))
	} else {
		h.Del(HeaderSeq)
	}
}

// ParseHeaders reads the signing headers from h. It returns an error
// wrapping [ErrMissing] when any is absent or empty, and [ErrMalformed]
// when the principal is over-long or contains control characters, the
// time is not decimal Unix seconds, or a vk-seq present is not a decimal
// number from 1 to 2^63-1 without leading zeros.
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
	var seq uint64
	if vals := h.Values(HeaderSeq); len(vals) > 0 {
		if seq, err = parseSeq(vals); err != nil {
			return Headers{}, err
		}
	}
	return Headers{Principal: p, Time: time.Unix(unix, 0).UTC(), Signature: sig, Seq: seq}, nil
}

// parseSeq reads the vk-seq values: exactly one, decimal, no leading zero,
// at least 1 and at most 2^63-1.
func parseSeq(vals []string) (uint64, error) {
	s := vals[0]
	if len(vals) != 1 || s == "" || len(s) > 19 || s[0] == '0' || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("%w: %s is not one decimal number from 1", ErrMalformed, HeaderSeq)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %v", ErrMalformed, HeaderSeq, err)
	}
	return uint64(n), nil
}
