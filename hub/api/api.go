// Package api serves the hub's client API (API-01..56): HTTP/1.1 + JSON
// over TLS 1.3, every route under /v1/, registered with method patterns on
// an [http.ServeMux] (STYLE C10).
//
// Every request passes one wrapper ([API.handle]) that first checks what
// the headers tell (signature headers present, the principal an enrolled,
// not removed relay with a sound key, the time within the skew; else 401
// unauthorized, AUTH-13; a declared length over the limit is 413
// too_large), only then reads the body (bounded in size, in time by the
// body deadline and in memory by the unauthenticated body budget), checks
// the signature over it (401 when bad), marks the connection
// authenticated (internal/connlimit), runs the handler — func(w, r, principal, body)
// error — and maps a returned error through ONE writer: an [*Error]
// found with errors.As becomes the spec's {error, code,
// retry_after_secs?, approval_url?} body with Msg to the client and Err
// only to the log; any other error is 500 internal.
//
// The scheduling state lives behind [Backend], implemented by the hub's
// driver; this package owns HTTP shapes, strict decoding, long-poll
// bounds (≤ 60 s, API-10) and request_id idempotency over the store
// (API-42..44).
//
// Principals: only enrolled relays (kind "gitlab") call the client API
// today. API keys are not built yet, so POST /v1/clients, meant for
// API-key clients, always answers 403 to the relays that can reach it
// (API-09). Node keys authenticate only their session (AUTH-06): a node
// principal gets 401 here.
package api

import (
	"bytes"
	"cmp"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/vk-ci/vk/hub/output"
	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/connlimit"
	"github.com/vk-ci/vk/internal/edkey"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/reqsign"
)

// Error is an API error answer. Status 0 means Code.Status(). Msg is sent
// to the client; Err is logged only (it may hold internal detail).
type Error struct {
	Status      int
	Code        client.Code
	Msg         string
	RetryAfter  int // seconds; 0 means none
	ApprovalURL string
	Err         error
	// Header, when set, is added to the answer (e.g. vk-output-length on 416).
	Header http.Header
}

// Errorf returns an *Error with code and a formatted message.
func Errorf(code client.Code, format string, a ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, a...)}
}

// Error formats the code and message (and the logged cause).
func (e *Error) Error() string {
	s := string(e.Code) + ": " + e.Msg
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the logged cause.
func (e *Error) Unwrap() error { return e.Err }

func (e *Error) status() int {
	if e.Status != 0 {
		return e.Status
	}
	return e.Code.Status()
}

// DefaultBodyPerMiB is the default body deadline per started MiB.
const DefaultBodyPerMiB = 4 * time.Second

// Principal is the authenticated caller of a request.
type Principal struct {
	// ID is the principal's enrolled ID (vk-relay).
	ID string
	// Kind is what it is; only relays reach handlers today.
	Kind store.PrincipalKind
}

// Backend is what the handlers need of the hub's scheduling state. The
// hub's driver implements it. Every method returns nil or an error the
// error writer maps (an [*Error] for API answers). Objects of another
// principal read as not found (API-25, API-50).
type Backend interface {
	// Capacity answers POST /v1/capacity; it waits up to wait for the
	// revision to pass req.After.
	Capacity(ctx context.Context, p Principal, req client.CapacityRequest, wait time.Duration) (client.Capacity, error)
	// Reserve queues a reservation. With req.Queue it answers promptly: a
	// grant when one is ready (the hub may hold the request briefly, about
	// a second, for a node's answer to offers sent at once, API-17), else
	// the ticket (grant nil). Without, it waits up to wait for a grant,
	// then 503 no_capacity.
	Reserve(ctx context.Context, p Principal, req client.ReservationRequest, wait time.Duration) (grant *client.ReservationGrant, ticket string, err error)
	// Ticket polls a ticket, waiting up to wait for a grant; grant nil
	// means still waiting (202). Gone tickets are 410 reservation_gone.
	Ticket(ctx context.Context, p Principal, ticket string, wait time.Duration) (*client.ReservationGrant, error)
	// CancelTicket cancels a ticket (204, 409 once claimed, 404 another's).
	CancelTicket(ctx context.Context, p Principal, ticket string) error
	// Claim claims a grant by admission (or reservation) ID.
	Claim(ctx context.Context, p Principal, id string) error
	// Outcome records an admission's outcome.
	Outcome(ctx context.Context, p Principal, admission string, o client.Outcome) error
	// Renew renews the reservation's lease and returns the grant with the
	// lease the node granted.
	Renew(ctx context.Context, p Principal, id string, leaseSecs int) (client.ReservationGrant, error)
	// Release releases a reservation; never an error for a gone one.
	Release(ctx context.Context, p Principal, id string) error
	// EndAdmission ends an admission whose job the hub refused with a 4xx
	// (API-34): as empty, its reservation released. Unknown or another
	// principal's admissions are ignored.
	EndAdmission(ctx context.Context, p Principal, admission string)
	// Submit creates a job (201 JobView). ans is the create's request_id
	// answer as far as the caller knows it (principal, request_id, body
	// hash, time): a job it creates is stored together with ans, completed
	// with the 201 (status, body, job), in one durable write (API-42), and
	// recorded is that completed answer, whose body the caller answers.
	// recorded is nil when no job was created: a refusal, or a repeated
	// submission answered with the job an earlier one made (whose answer
	// the caller then records itself). Its own 4xx refusals end the
	// admission itself.
	Submit(ctx context.Context, p Principal, sub client.JobSubmission, ans store.Answer) (view client.JobView, recorded *store.Answer, err error)
	// Job returns a job's view, waiting up to wait for Revision > after.
	Job(ctx context.Context, p Principal, id string, after uint64, wait time.Duration) (client.JobView, error)
	// OutputReadable checks that the job exists, is p's, and still has its
	// output (not settled).
	OutputReadable(ctx context.Context, p Principal, id string) error
	// Cancel cancels a job and returns its view.
	Cancel(ctx context.Context, p Principal, id string, mode client.CancelMode) (client.JobView, error)
	// Settle settles a finished job (409 until finished).
	Settle(ctx context.Context, p Principal, id string) error
}

// Observer is told about every answered request (metrics); route is the
// mux pattern.
type Observer func(route string, status int, elapsed time.Duration)

// Store is what the API asks of the hub's store: the principal a request
// is signed by, and the first answers to creates by request_id (API-42).
type Store interface {
	GetPrincipal(ctx context.Context, id string) (store.Principal, error)
	PutAnswer(ctx context.Context, a store.Answer) error
	GetAnswer(ctx context.Context, principal, requestID string, now store.Time) (store.Answer, error)
}

// Config configures an [API]. Backend, Store and Output are required.
type Config struct {
	Backend Backend
	Store   Store
	Output  output.Store
	// Clock is the hub's clock (signature skew, answer TTLs); nil is real.
	Clock clock.Clock
	// Log receives one line per failed request; nil discards.
	Log *slog.Logger
	// Skew is the accepted signing-time skew; 0 means reqsign.DefaultSkew.
	Skew time.Duration
	// MaxBody bounds request bodies in bytes; 0 means 2 MiB.
	MaxBody int64
	// BodyPerMiB is how long reading a body may take per started MiB of
	// its length (at least one MiB); 0 means DefaultBodyPerMiB.
	BodyPerMiB time.Duration
	// Budget bounds the body bytes being read before their requests are
	// authenticated (connlimit pools); nil means no bound.
	Budget *connlimit.Budget
	// Observe, when set, is called once per request.
	Observe Observer
	// Releases serves relay updates' downloads (OPS-04); nil answers 404.
	Releases Releases
}

// API is the client API's handler set. Create it with [New] and mount it
// with [API.Register].
type API struct {
	cfg Config
	clk clock.Clock
	log *slog.Logger
}

// New returns an API over cfg.
func New(cfg Config) *API {
	cfg.Log = cmp.Or(cfg.Log, slog.New(slog.DiscardHandler))
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = 2 << 20
	}
	if cfg.BodyPerMiB <= 0 {
		cfg.BodyPerMiB = DefaultBodyPerMiB
	}
	return &API{cfg: cfg, clk: clock.Or(cfg.Clock), log: cfg.Log}
}

// handlerFunc is a client API handler: it writes its success answer itself
// and returns an error for the single error writer.
type handlerFunc func(w http.ResponseWriter, r *http.Request, p Principal, body []byte) error

// Register mounts every client API route on mux.
func (a *API) Register(mux *http.ServeMux) {
	routes := []struct {
		pattern string
		h       handlerFunc
	}{
		{client.RouteCapacity, a.capacity},
		{client.RouteReserve, a.reserve},
		{client.RouteTicketGet, a.ticketGet},
		{client.RouteTicketDelete, a.ticketDelete},
		{client.RouteClaim, a.claim},
		{client.RouteOutcome, a.outcome},
		{client.RouteRenew, a.renew},
		{client.RouteReservationDelete, a.release},
		{client.RouteSubmit, a.submit},
		{client.RouteJobGet, a.jobGet},
		{client.RouteOutput, a.outputGet},
		{client.RouteCancel, a.cancel},
		{client.RouteSettle, a.settle},
		{client.RouteClients, a.clients},
		{client.RouteRelease, a.releaseGet},
	}
	for _, rt := range routes {
		mux.Handle(rt.pattern, a.handle(rt.pattern, rt.h))
	}
}

// statusWriter records the status written.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// handle wraps h: body limit, signature check, error writing, metrics.
func (a *API) handle(route string, h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		err := a.serve(sw, r, h)
		if err != nil {
			a.writeError(sw, r, route, err)
		}
		if a.cfg.Observe != nil {
			a.cfg.Observe(route, sw.status, time.Since(start))
		}
	})
}

func (a *API) serve(w http.ResponseWriter, r *http.Request, h handlerFunc) error {
	// Everything the headers can refuse is refused before a byte of the
	// body is read: missing or malformed signature headers, an unknown,
	// removed or weak-keyed principal, a time outside the skew, a declared
	// length over the limit.
	hdr, err := reqsign.ParseHeaders(r.Header)
	if err != nil {
		return &Error{Code: client.CodeUnauthorized, Msg: "request signature refused", Err: err}
	}
	pub, kind, err := a.principalKey(r.Context(), hdr.Principal)
	var unread principalUnread
	if errors.As(err, &unread) {
		// The store could not be read (its database restarting, say):
		// nothing is refused yet, so the client retries.
		return &Error{Code: client.CodeUnavailable, Msg: "principal store unavailable", RetryAfter: 1, Err: err}
	}
	if err != nil {
		return &Error{Code: client.CodeUnauthorized, Msg: "request signature refused", Err: fmt.Errorf("principal %q: %w", hdr.Principal, err)}
	}
	now := a.clk.Now()
	if d := now.Sub(hdr.Time).Abs(); d > a.skew() {
		return &Error{Code: client.CodeUnauthorized, Msg: "request signature refused",
			Err: fmt.Errorf("%w: %s off (allowed %s)", reqsign.ErrSkew, d.Round(time.Second), a.skew())}
	}
	body, err := a.readBody(w, r)
	if err != nil {
		return err
	}
	// Derived once per connection (the signature is still checked below).
	ekm, err := reqsign.ConnExporter(r.Context(), r.TLS)
	if err != nil {
		return &Error{Code: client.CodeUnauthorized, Msg: "request signature refused", Err: err}
	}
	target := cmp.Or(r.RequestURI, r.URL.RequestURI())
	if err := reqsign.VerifySeq(pub, hdr.Principal, r.Method, target, body, hdr.Time, hdr.Seq, ekm, hdr.Signature, now, a.cfg.Skew); err != nil {
		return &Error{Code: client.CodeUnauthorized, Msg: "request signature refused", Err: err}
	}
	// A request resent on its own kept-alive connection is refused
	// (AUTH-14).
	if err := reqsign.CheckSeq(r.Context(), hdr.Seq); err != nil {
		return &Error{Code: client.CodeUnauthorized, Msg: "request signature refused", Err: err}
	}
	connlimit.Authenticated(r.Context())
	return h(w, r, Principal{ID: hdr.Principal, Kind: kind}, body)
}

func (a *API) skew() time.Duration {
	if a.cfg.Skew > 0 {
		return a.cfg.Skew
	}
	return reqsign.DefaultSkew
}

// principalUnread is a principal lookup that failed in the store, not
// one that found no principal: the request is answered 503, not 401.
type principalUnread struct{ err error }

func (e principalUnread) Error() string { return "reading the principal: " + e.err.Error() }
func (e principalUnread) Unwrap() error { return e.err }

// principalKey returns the key of an enrolled relay that is not removed
// and whose stored key is not weak (AUTH-13).
func (a *API) principalKey(ctx context.Context, id string) (ed25519.PublicKey, store.PrincipalKind, error) {
	pr, err := a.cfg.Store.GetPrincipal(ctx, id)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, "", principalUnread{err}
	}
	if err != nil {
		return nil, "", err
	}
	if pr.Removed {
		return nil, "", errors.New("principal removed")
	}
	if pr.Kind != store.KindRelay {
		return nil, "", fmt.Errorf("principal of kind %q may not use the client API", pr.Kind)
	}
	if err := edkey.Check(pr.PublicKey); err != nil {
		return nil, "", fmt.Errorf("stored key refused: %w", err)
	}
	return ed25519.PublicKey(pr.PublicKey), pr.Kind, nil
}

// readBody reads the request body of a request whose headers passed:
// bounded in size (413 too_large, refused from Content-Length before
// reading when it says so), in time (the body deadline, from the declared
// length or the limit), and in memory over all requests (the
// unauthenticated body budget; 503 unavailable when it is spent).
func (a *API) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.ContentLength == 0 {
		return nil, nil
	}
	if r.ContentLength > a.cfg.MaxBody {
		return nil, &Error{Code: client.CodeTooLarge, Msg: fmt.Sprintf("request body over %d bytes", a.cfg.MaxBody)}
	}
	n := r.ContentLength
	if n < 0 {
		n = a.cfg.MaxBody
	}
	release, ok := a.cfg.Budget.Acquire(r.Context(), n)
	if !ok {
		return nil, &Error{Code: client.CodeUnavailable, Msg: "too many request bodies being received", RetryAfter: 1}
	}
	defer release()
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Now().Add(connlimit.BodyDeadline(n, a.cfg.BodyPerMiB))); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return nil, &Error{Code: client.CodeInternal, Msg: "internal error", Err: err}
	}
	var body []byte
	var err error
	if r.ContentLength > 0 {
		// Exactly the declared length (already reserved): no growth, no
		// garbage copies.
		body = make([]byte, r.ContentLength)
		_, err = io.ReadFull(r.Body, body)
	} else {
		body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, a.cfg.MaxBody))
	}
	// The server's background read (which notices a client going away)
	// must not inherit the body deadline: a long poll outlives it.
	rc.SetReadDeadline(time.Time{})
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &Error{Code: client.CodeTooLarge, Msg: fmt.Sprintf("request body over %d bytes", a.cfg.MaxBody)}
		}
		return nil, &Error{Code: client.CodeInvalid, Msg: "reading the request body failed (or took longer than its deadline)", Err: err}
	}
	return body, nil
}

// writeError is the one place errors become answers (STYLE C9).
func (a *API) writeError(w http.ResponseWriter, r *http.Request, route string, err error) {
	var ae *Error
	if !errors.As(err, &ae) {
		ae = &Error{Code: client.CodeInternal, Msg: "internal error", Err: err}
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			ae = &Error{Code: client.CodeUnavailable, Msg: "request ended before an answer", RetryAfter: 1, Err: err}
		}
	}
	status := ae.status()
	lvl := slog.LevelInfo
	if status >= 500 && !errors.Is(ae.Err, context.Canceled) {
		// A request whose client went away, or that the hub's shutdown
		// ended, is routine: it needs no operator's attention.
		lvl = slog.LevelWarn
	}
	a.log.Log(r.Context(), lvl, "request refused", logkey.Route, route, logkey.Status, status,
		"code", string(ae.Code), "msg", ae.Msg, logkey.Err, ae.Err, logkey.RelayID, r.Header.Get(client.HeaderRelay))
	for k, vs := range ae.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	WriteJSON(w, status, errorBody(ae))
}

func errorBody(ae *Error) client.Error {
	return client.Error{Error: ae.Msg, Code: ae.Code, RetryAfterSecs: ae.RetryAfter, ApprovalURL: ae.ApprovalURL}
}

// WriteJSON answers status with v as JSON (a newline after it); one that
// does not encode is a 500 internal error body. The admin socket and the
// join route answer through it too.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"internal error","code":"internal"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// decode decodes body strictly into v: unknown fields, trailing data and
// malformed JSON are 400 invalid (STYLE C10). An empty body is allowed
// when emptyOK (v keeps its zero value).
func decode(body []byte, v any, emptyOK bool) error {
	if len(bytes.TrimSpace(body)) == 0 {
		if emptyOK {
			return nil
		}
		return Errorf(client.CodeInvalid, "request body missing")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &Error{Code: client.CodeInvalid, Msg: "unparseable request body: " + err.Error()}
	}
	if _, err := dec.Token(); err != io.EOF {
		return Errorf(client.CodeInvalid, "trailing data after the request body")
	}
	return nil
}

// waitParam parses ?wait=<secs> (absent: 0), capped at 60 s (API-10).
func waitParam(r *http.Request) (time.Duration, error) {
	s := r.URL.Query().Get("wait")
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, Errorf(client.CodeInvalid, "wait %q is not a number of seconds", s)
	}
	return capWait(n), nil
}

func capWait(secs int) time.Duration {
	return time.Duration(min(max(secs, 0), client.MaxWaitSecs)) * time.Second
}

// uintParam parses an unsigned query parameter (absent: 0).
func uintParam(r *http.Request, name string) (uint64, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 10, 63)
	if err != nil {
		return 0, Errorf(client.CodeInvalid, "%s %q is not a non-negative integer", name, s)
	}
	return n, nil
}
