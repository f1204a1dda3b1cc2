// Package enrol is the hub's side of enrolment (AUTH-08): one-time tokens
// minted by the operator (`vk-hub token create --kind gitlab|node`) and
// the unsigned `POST /v1/join` endpoint that spends one to pin a relay's
// or node's ed25519 key.
//
// # Tokens
//
// A token is "vkj_<kind>_" followed by 52 base32 characters (32 bytes
// from crypto/rand), e.g. vkj_gitlab_3q…; the kind in the text lets a
// join name a wrong-kind token plainly. The hub stores only its SHA-256
// ([store.Token]), so a copy of the database does not hold usable tokens.
// A token lives [DefaultTTL] (24 h) unless asked otherwise, at most
// [MaxTTL] (7 days), and is spent by the first join that presents it —
// also when that join then fails to create the principal.
//
// # Join
//
// POST /v1/join takes a [client.JoinRequest] {token, public_key, name,
// kind}, decoded strictly (unknown fields, trailing data, bodies over
// 16 KiB are refused). It mints the principal ID ("relay-" or "node-"
// and 12 random base32 characters), spends the token for that kind
// ([store.Principals.UseToken]), stores the principal with its key pinned
// ([store.Principals.CreatePrincipal]), appends an audit entry, and answers 201
// [client.JoinResponse] {id, ca_pem}. The request is not signed — the
// token authenticates it — and runs over the hub's TLS listener, where the
// joiner either pins the CA file it was given (`--ca FILE`) or trusts on
// first use and prints the CA's fingerprint for the operator to compare
// with the one vk-hub printed (see hubclient.Join and docs/enrolment.md).
//
// Errors are the client API's {error, code} bodies: 400 invalid for a bad
// body, key, name or kind; 401 unauthorized for an unknown, expired,
// used or wrong-kind token; 413 too_large; 500 internal.
//
// Re-enrolment (`join --replace`) is a new join with a new token: it makes
// a new principal, and the old one stays until an operator removes it
// (`vk-hub relays remove <id>`).
package enrol

import (
	"bytes"
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base32"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/vk-ci/vk/hub/api"

	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/connlimit"
	"github.com/vk-ci/vk/internal/edkey"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/proto/client"
)

// Token lifetimes.
const (
	// DefaultTTL is a token's life when none is asked.
	DefaultTTL = 24 * time.Hour
	// MaxTTL is the longest life a token may be given.
	MaxTTL = 7 * 24 * time.Hour
	// MaxJoinBody bounds a join request body, in bytes.
	MaxJoinBody = 16 << 10
	// MaxNameLen bounds a principal's display name, in bytes (a DNS name).
	MaxNameLen = 253
)

// TokenPrefix starts every token; the kind and "_" follow.
const TokenPrefix = "vkj_"

// Sentinel errors.
var (
	// ErrKind: a kind other than "gitlab" or "node".
	ErrKind = errors.New("enrol: unknown principal kind")
	// ErrTTL: a token lifetime outside (0, MaxTTL].
	ErrTTL = errors.New("enrol: token lifetime out of range")
	// ErrToken: a join presented an unknown, expired, used or wrong-kind
	// token.
	ErrToken = errors.New("enrol: token refused")
	// ErrInvalid: a join request is malformed.
	ErrInvalid = errors.New("enrol: invalid join request")
)

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

// Store is what enrolment asks of the hub's store: tokens and
// principals, and the audit log.
type Store interface {
	store.Principals
	store.Audit
}

// Config configures an [Enroller]. Store and CAPEM are required.
type Config struct {
	// Store keeps tokens, principals and the audit log.
	Store Store
	// CAPEM is the hub's CA certificate, PEM, answered to every join.
	CAPEM []byte
	// Clock stamps tokens, principals and audit entries; nil means real.
	Clock clock.Clock
	// Log receives one Info line per join and token; nil discards.
	Log *slog.Logger
	// Rand supplies token and ID randomness; nil means crypto/rand.
	Rand io.Reader
	// BodyTimeout bounds the read of a join body (it is at most
	// MaxJoinBody); 0 means DefaultBodyTimeout.
	BodyTimeout time.Duration
	// Budget bounds the body bytes being read before their requests are
	// authenticated, shared with the client API; nil means no bound.
	Budget *connlimit.Budget
}

// DefaultBodyTimeout is the default deadline of a join body's read.
const DefaultBodyTimeout = 4 * time.Second

// Enroller mints tokens and serves joins. Create it with [New]. Safe for
// concurrent use.
type Enroller struct {
	st    Store
	caPEM []byte
	clk   clock.Clock
	log   *slog.Logger
	rand  io.Reader
	bodyT time.Duration
	bud   *connlimit.Budget
}

// New returns an Enroller over cfg.
func New(cfg Config) (*Enroller, error) {
	if cfg.Store == nil || len(cfg.CAPEM) == 0 {
		return nil, errors.New("enrol: Config needs Store and CAPEM")
	}
	e := &Enroller{st: cfg.Store, caPEM: cfg.CAPEM, clk: clock.Or(cfg.Clock), log: cmp.Or(cfg.Log, slog.New(slog.DiscardHandler)),
		rand: cmp.Or(cfg.Rand, rand.Reader), bodyT: cfg.BodyTimeout, bud: cfg.Budget}
	if e.bodyT <= 0 {
		e.bodyT = DefaultBodyTimeout
	}
	return e, nil
}

// ParseKind checks a kind string: "gitlab" or "node"; errors wrap
// [ErrKind].
func ParseKind(s string) (store.PrincipalKind, error) {
	switch k := store.PrincipalKind(s); k {
	case store.KindRelay, store.KindNode:
		return k, nil
	}
	return "", fmt.Errorf("%w: %q (want gitlab or node)", ErrKind, s)
}

// Token is a freshly minted enrolment token.
type Token struct {
	// Text is the token itself; shown once, never stored.
	Text string
	// Kind is what it enrols.
	Kind store.PrincipalKind
	// Expires is when it stops working.
	Expires time.Time
	// Hash is its SHA-256 as stored.
	Hash store.Hash
}

// LogValue redacts the token text (STYLE C14).
func (t Token) LogValue() slog.Value {
	return slog.GroupValue(slog.String("kind", string(t.Kind)), slog.Time("expires", t.Expires),
		slog.String("hash", shortHash(t.Hash)))
}

// NewToken mints a one-time token for kind living ttl (0 means
// [DefaultTTL]) and stores its hash. actor names the operator for the
// audit log.
func (e *Enroller) NewToken(ctx context.Context, kind store.PrincipalKind, ttl time.Duration, actor string) (Token, error) {
	if _, err := ParseKind(string(kind)); err != nil {
		return Token{}, err
	}
	ttl = cmp.Or(ttl, DefaultTTL)
	if ttl < 0 || ttl > MaxTTL {
		return Token{}, fmt.Errorf("%w: %v (at most %v)", ErrTTL, ttl, MaxTTL)
	}
	var raw [32]byte
	if _, err := io.ReadFull(e.rand, raw[:]); err != nil {
		return Token{}, fmt.Errorf("enrol: token randomness: %w", err)
	}
	text := TokenPrefix + string(kind) + "_" + strings.ToLower(b32.EncodeToString(raw[:]))
	now := e.clk.Now().UTC()
	t := Token{Text: text, Kind: kind, Expires: now.Add(ttl), Hash: store.Sum([]byte(text))}
	if err := e.st.CreateToken(ctx, store.Token{Hash: t.Hash, Kind: kind, Created: now, Expires: t.Expires}); err != nil {
		return Token{}, fmt.Errorf("enrol: store token: %w", err)
	}
	if _, err := e.st.AppendAudit(ctx, store.AuditEntry{Time: now, Actor: actor, Action: "token.create",
		Subject: shortHash(t.Hash), Detail: fmt.Sprintf("kind=%s expires=%s", kind, t.Expires.Format(time.RFC3339))}); err != nil {
		return Token{}, fmt.Errorf("enrol: audit: %w", err)
	}
	e.log.InfoContext(ctx, "enrolment token created", "token", t, "actor", actor)
	return t, nil
}

func shortHash(h store.Hash) string {
	b, _ := h.MarshalText()
	return string(b[:12])
}

// Register mounts POST /v1/join on mux. The hub mounts it on its TLS
// listener next to (not inside) the signed client API.
func (e *Enroller) Register(mux *http.ServeMux) {
	mux.Handle(client.RouteJoin, e)
}

// httpError is a join refusal: status, code and message for the client,
// err for the log only.
type httpError struct {
	code client.Code
	msg  string
	err  error
}

func (h *httpError) Error() string { return string(h.code) + ": " + h.msg }
func (h *httpError) Unwrap() error { return h.err }

// ServeHTTP serves POST /v1/join (see the package doc). It is idempotent
// only in refusing: a second join with the same token is 401.
func (e *Enroller) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	resp, err := e.serve(w, r)
	if err == nil {
		api.WriteJSON(w, http.StatusCreated, resp)
		return
	}
	var he *httpError
	if !errors.As(err, &he) {
		he = &httpError{code: client.CodeInternal, msg: "internal error", err: err}
	}
	status := he.code.Status()
	e.log.InfoContext(r.Context(), "join refused", logkey.Status, status, "code", string(he.code), "msg", he.msg,
		logkey.Err, he.err, "remote", r.RemoteAddr)
	api.WriteJSON(w, status, client.Error{Error: he.msg, Code: he.code})
}

func (e *Enroller) serve(w http.ResponseWriter, r *http.Request) (client.JoinResponse, error) {
	// A join is unauthenticated until its token is spent: refuse a
	// declared length over the limit unread, and bound the read in time
	// and, with the client API's, in memory.
	tooLarge := &httpError{code: client.CodeTooLarge, msg: fmt.Sprintf("join body over %d bytes", MaxJoinBody)}
	if r.ContentLength > MaxJoinBody {
		return client.JoinResponse{}, tooLarge
	}
	release, ok := e.bud.Acquire(r.Context(), MaxJoinBody)
	if !ok {
		return client.JoinResponse{}, &httpError{code: client.CodeUnavailable, msg: "too many request bodies being received; retry"}
	}
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(e.bodyT))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxJoinBody))
	rc.SetReadDeadline(time.Time{})
	release()
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return client.JoinResponse{}, tooLarge
		}
		return client.JoinResponse{}, &httpError{code: client.CodeInvalid, msg: "reading the body failed", err: err}
	}
	req, err := DecodeJoin(body)
	if err != nil {
		return client.JoinResponse{}, &httpError{code: client.CodeInvalid, msg: err.Error()}
	}
	return e.Join(r.Context(), req)
}

// DecodeJoin decodes a join body strictly (unknown fields, trailing data
// and malformed JSON are errors) and checks its fields: kind known, key
// 32 bytes of standard base64, name 1..253 bytes of printable UTF-8,
// token present. Errors wrap [ErrInvalid] or [ErrKind].
func DecodeJoin(body []byte) (client.JoinRequest, error) {
	var req client.JoinRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return req, fmt.Errorf("%w: trailing data after the body", ErrInvalid)
	}
	if _, err := ParseKind(req.Kind); err != nil {
		return req, err
	}
	if req.Token == "" {
		return req, fmt.Errorf("%w: token missing", ErrInvalid)
	}
	if _, err := publicKey(req.PublicKey); err != nil {
		return req, err
	}
	if req.Name == "" || len(req.Name) > MaxNameLen || !utf8.ValidString(req.Name) || strings.ContainsFunc(req.Name, func(r rune) bool {
		return r < 0x20 || r == 0x7f
	}) {
		return req, fmt.Errorf("%w: name must be 1..%d bytes of printable UTF-8", ErrInvalid, MaxNameLen)
	}
	return req, nil
}

func publicKey(s string) (ed25519.PublicKey, error) {
	b, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("%w: public_key must be a base64 ed25519 public key (%d bytes)", ErrInvalid, ed25519.PublicKeySize)
	}
	// A weak key (identity, small order, non-canonical) would let a
	// constant signature authenticate without any private key.
	if err := edkey.Check(b); err != nil {
		return nil, fmt.Errorf("%w: public_key refused: %v; generate a fresh key", ErrInvalid, err)
	}
	return ed25519.PublicKey(b), nil
}

// Join spends req's token and enrols the principal (see the package doc).
// req must have passed [DecodeJoin]. Refusals are errors the handler maps
// (token ones wrap [ErrToken]).
func (e *Enroller) Join(ctx context.Context, req client.JoinRequest) (client.JoinResponse, error) {
	kind, err := ParseKind(req.Kind)
	if err != nil {
		return client.JoinResponse{}, &httpError{code: client.CodeInvalid, msg: err.Error()}
	}
	pub, err := publicKey(req.PublicKey)
	if err != nil {
		return client.JoinResponse{}, &httpError{code: client.CodeInvalid, msg: err.Error()}
	}
	if want := TokenPrefix + string(kind) + "_"; !strings.HasPrefix(req.Token, want) {
		return client.JoinResponse{}, &httpError{code: client.CodeUnauthorized,
			msg: fmt.Sprintf("token refused: not a %s token (it must start with %s)", kind, want), err: ErrToken}
	}
	id, err := e.newID(kind)
	if err != nil {
		return client.JoinResponse{}, err
	}
	now := e.clk.Now().UTC()
	h := store.Sum([]byte(req.Token))
	if _, err := e.st.UseToken(ctx, h, kind, id, now); err != nil {
		msg := "token refused"
		switch {
		case errors.Is(err, store.ErrNotFound):
			msg = "token refused: unknown, or for another kind"
		case errors.Is(err, store.ErrExpired):
			msg = "token refused: expired; create a new one with vk-hub token create"
		case errors.Is(err, store.ErrConflict):
			msg = "token refused: already used; each token enrols once"
		default:
			return client.JoinResponse{}, fmt.Errorf("enrol: use token: %w", err)
		}
		return client.JoinResponse{}, &httpError{code: client.CodeUnauthorized, msg: msg, err: fmt.Errorf("%w: %w", ErrToken, err)}
	}
	p := store.Principal{ID: id, Kind: kind, PublicKey: pub, Name: req.Name, Created: now}
	if err := e.st.CreatePrincipal(ctx, p); err != nil {
		return client.JoinResponse{}, fmt.Errorf("enrol: create principal %s: %w", id, err)
	}
	action := "relay.join"
	if kind == store.KindNode {
		action = "node.join"
	}
	if _, err := e.st.AppendAudit(ctx, store.AuditEntry{Time: now, Actor: id, Action: action, Subject: id,
		Detail: fmt.Sprintf("name=%s key=%s token=%s", strconv.Quote(req.Name), base64.StdEncoding.EncodeToString(pub), shortHash(h))}); err != nil {
		return client.JoinResponse{}, fmt.Errorf("enrol: audit: %w", err)
	}
	e.log.InfoContext(ctx, "principal enrolled", "principal", id, "kind", string(kind), "name", req.Name)
	return client.JoinResponse{ID: id, CAPEM: string(e.caPEM)}, nil
}

// newID mints "relay-…" or "node-…" with 12 random base32 characters.
func (e *Enroller) newID(kind store.PrincipalKind) (string, error) {
	var raw [8]byte
	if _, err := io.ReadFull(e.rand, raw[:]); err != nil {
		return "", fmt.Errorf("enrol: ID randomness: %w", err)
	}
	prefix := "relay-"
	if kind == store.KindNode {
		prefix = "node-"
	}
	return prefix + strings.ToLower(b32.EncodeToString(raw[:]))[:12], nil
}
