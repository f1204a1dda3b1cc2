// Package sessiontest serves a hub session handler (hub/session's
// NodeServer or RelayServer) over loopback TLS with a fresh PKI for the
// session client tests of node/session and relay/hubsession: it counts
// upgrade requests, can cut every TCP connection from the hub's side, and
// has the channel and polling helpers both suites use. Only tests import
// it.
package sessiontest

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/pki"
)

// Wait bounds every wait of this package: a test fails when what it
// waits for does not happen within it.
const Wait = 20 * time.Second

// Server is a loopback TLS server around a session handler.
type Server struct {
	// URL is the session URL, wss://127.0.0.1:port followed by the path.
	URL string
	// Origin is https://127.0.0.1:port, without the path: the hub URL a
	// node's or relay's configuration names, which derives the session
	// route itself.
	Origin string
	// Bundle is the server's PKI (its CA pins the client's TLS config).
	Bundle *pki.Bundle

	dials atomic.Int64

	mu    sync.Mutex
	conns []net.Conn // TCP connections accepted since the last CutAll; guarded by mu
}

// Start serves h at wss://127.0.0.1:port+path until the test ends, over
// TLS 1.3 with a server certificate from a fresh hub CA (hub/pki). h sees
// every request, whatever its path: a mux serving several routes is
// started with path "" and its routes appended to URL. Each request (a
// dial) is counted. Register h's own Close after Start so that it runs
// first.
func Start(t testing.TB, path string, h http.Handler) *Server {
	t.Helper()
	b, err := pki.Ensure(t.TempDir(), []string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Bundle: b}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.dials.Add(1)
		h.ServeHTTP(w, r)
	}))
	srv.TLS = pki.ServerConfig(b.Server)
	srv.Config.ConnState = func(c net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	s.Origin = srv.URL
	s.URL = "wss://" + strings.TrimPrefix(srv.URL, "https://") + path
	return s
}

// Dials returns how many requests reached the handler.
func (s *Server) Dials() int64 { return s.dials.Load() }

// CutAll closes every TCP connection accepted so far, without a
// WebSocket close handshake: to both sides the session is lost.
func (s *Server) CutAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.Close()
	}
	s.conns = nil
}

// ClientTLS returns a client TLS config pinning the server's CA.
func (s *Server) ClientTLS(t testing.TB) *tls.Config {
	t.Helper()
	c, err := pki.ClientConfig(s.Bundle.CACertPEM, "")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// WaitDials polls until at least n requests reached the handler.
func (s *Server) WaitDials(t testing.TB, n int64) {
	t.Helper()
	WaitFor(t, "dials", func() bool { return s.Dials() >= n })
}

// Run runs run (a client's Run) until the test ends, then cancels its
// context and fails the test unless it returned context.Canceled.
func Run(t testing.TB, run func(context.Context) error) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v", err)
		}
	})
}

// Recv returns the next value from ch, failing the test when none comes
// within [Wait].
func Recv[T any](t testing.TB, ch chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(Wait):
		t.Fatalf("no %s in %v", what, Wait)
	}
	var zero T
	return zero
}

// WaitFor polls cond until it holds, failing the test after [Wait]. It
// is for state on the far side of real sockets, which no channel
// announces.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // polling across real sockets
	}
}

// Buffer is a bytes.Buffer safe for concurrent writes: give a
// slog.TextHandler one to read what a client logged. The zero value is
// usable.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
