package hubclient

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/pki"
	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/reqsign"
)

// reply is one scripted answer of the fake hub.
type reply struct {
	status int
	body   string
	header map[string]string
}

// seen is one request as the fake hub verified it.
type seen struct {
	method, target, principal, sig string
	body                           []byte
}

// fakeHub is a TLS 1.3 server (hub/pki certificates) that verifies every
// request's signature with reqsign.VerifyRequest, counts connections and
// answers each route from a script.
type fakeHub struct {
	t       testing.TB
	srv     *httptest.Server
	caPEM   []byte
	pub     ed25519.PublicKey
	key     ed25519.PrivateKey
	mu      sync.Mutex
	script  map[string][]reply // by route pattern; guarded by mu
	reqs    []seen             // guarded by mu
	conns   int                // new connections; guarded by mu
	resumed int                // requests on resumed TLS sessions; guarded by mu
	// fallback answers a route whose script is empty; nil: 418.
	fallback *reply
}

const principal = "relay-test"

func newFakeHub(t testing.TB) *fakeHub {
	t.Helper()
	b, err := pki.Ensure(t.TempDir(), nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key, err := reqsign.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	h := &fakeHub{t: t, caPEM: b.CACertPEM, key: key, pub: key.Public().(ed25519.PublicKey), script: map[string][]reply{}}
	mux := http.NewServeMux()
	for _, route := range []string{client.RouteCapacity, client.RouteReserve, client.RouteTicketGet, client.RouteTicketDelete,
		client.RouteClaim, client.RouteOutcome, client.RouteRenew, client.RouteReservationDelete, client.RouteSubmit,
		client.RouteJobGet, client.RouteOutput, client.RouteCancel, client.RouteSettle, client.RouteClients} {
		mux.HandleFunc(route, h.serve(route))
	}
	h.srv = httptest.NewUnstartedServer(mux)
	h.srv.TLS = pki.ServerConfig(b.Server)
	h.srv.Config.ConnContext = reqsign.ConnContext
	h.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			h.mu.Lock()
			h.conns++
			h.mu.Unlock()
		}
	}
	h.srv.StartTLS()
	t.Cleanup(h.srv.Close)
	return h
}

func (h *fakeHub) serve(route string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.TLS == nil || r.TLS.Version != tls.VersionTLS13 {
			http.Error(w, "want TLS 1.3", http.StatusBadRequest)
			return
		}
		lookup := func(_ context.Context, id string) (ed25519.PublicKey, error) {
			if id != principal {
				return nil, errors.New("unknown principal")
			}
			return h.pub, nil
		}
		id, err := reqsign.VerifyRequest(r, body, lookup, time.Now(), 0)
		if err != nil {
			h.t.Errorf("%s: signature refused: %v", route, err)
			writeBody(w, http.StatusUnauthorized, `{"error":"bad signature","code":"unauthorized"}`, nil)
			return
		}
		h.mu.Lock()
		if r.TLS.DidResume {
			h.resumed++
		}
		h.reqs = append(h.reqs, seen{method: r.Method, target: r.RequestURI, principal: id, sig: r.Header.Get(client.HeaderSignature), body: body})
		var rep reply
		if q := h.script[route]; len(q) > 0 {
			rep, h.script[route] = q[0], q[1:]
		} else if h.fallback != nil {
			rep = *h.fallback
		} else {
			rep = reply{status: http.StatusTeapot, body: `{"error":"not scripted","code":"mystery"}`}
		}
		h.mu.Unlock()
		writeBody(w, rep.status, rep.body, rep.header)
	}
}

func writeBody(w http.ResponseWriter, status int, body string, header map[string]string) {
	for k, v := range header {
		w.Header().Set(k, v)
	}
	if body != "" && w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(status)
	io.WriteString(w, body)
}

func (h *fakeHub) answer(route string, r ...reply) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.script[route] = append(h.script[route], r...)
}

func (h *fakeHub) requests() []seen {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]seen(nil), h.reqs...)
}

func (h *fakeHub) connCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.conns
}

func (h *fakeHub) client(t *testing.T, clk clock.Clock) *Client {
	t.Helper()
	c, err := New(Config{HubURL: h.srv.URL, CAPEM: h.caPEM, Key: h.key, Principal: principal, Clock: clk, Log: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// instantClock tells real time (signatures must verify) but fires every
// timer at once, recording the durations asked for: retry loops over real
// sockets run without sleeping, and the test reads the backoff chosen.
type instantClock struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (c *instantClock) Now() time.Time { return time.Now() }

func (c *instantClock) NewTimer(d time.Duration) clock.Timer {
	c.mu.Lock()
	c.waits = append(c.waits, d)
	c.mu.Unlock()
	ch := make(chan time.Time, 1)
	ch <- time.Now()
	return instantTimer{ch}
}

func (c *instantClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	c.NewTimer(d)
	go f()
	return instantTimer{make(chan time.Time)}
}

func (c *instantClock) recorded() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.waits...)
}

type instantTimer struct{ c chan time.Time }

func (t instantTimer) C() <-chan time.Time      { return t.c }
func (t instantTimer) Stop() bool               { return false }
func (t instantTimer) Reset(time.Duration) bool { return false }

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func statusOf(err error) (int, client.Code) {
	var se *client.StatusError
	if errors.As(err, &se) {
		return se.Status, se.Body.Code
	}
	return 0, ""
}
