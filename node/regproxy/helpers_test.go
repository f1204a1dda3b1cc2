package regproxy

import (
	"context"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/testlog"
)

var testStart = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

const (
	jobToken   = "job-token-0123456789"
	nodeUser   = "vk-node"
	nodeSecret = "node-secret-s3cr3t"
)

// nodeSecretForms are the ways the node's credential could appear on the
// wire: the password itself and the Basic encoding of user:password.
var nodeSecretForms = []string{
	nodeSecret,
	base64.StdEncoding.EncodeToString([]byte(nodeUser + ":" + nodeSecret)),
	base64.RawStdEncoding.EncodeToString([]byte(nodeUser + ":" + nodeSecret)),
}

// seen is one request as it reached the upstream.
type seen struct {
	Method     string
	RequestURI string // as sent on the wire
	Path       string // decoded
	Host       string
	Header     http.Header
	Body       string // only when the handler read it into the record
}

// front stands between the proxy and the registry (or a test handler): it
// records every request and answers 401 unless it carries the job token,
// as a registry enforcing the token would.
type front struct {
	srv   *httptest.Server
	token string
	next  http.Handler

	mu   sync.Mutex
	reqs []seen
}

func newFront(t *testing.T, token string, next http.Handler) *front {
	t.Helper()
	f := &front{token: token, next: next}
	f.srv = httptest.NewServer(f)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.reqs = append(f.reqs, seen{Method: r.Method, RequestURI: r.RequestURI, Path: r.URL.Path, Host: r.Host, Header: r.Header.Clone()})
	f.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+f.token {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		w.Write([]byte(`{"errors":[{"code":"UNAUTHORIZED","message":"front: job token missing"}]}`))
		return
	}
	if f.next == nil {
		w.Write([]byte("ok " + r.Method + " " + r.URL.Path))
		return
	}
	f.next.ServeHTTP(w, r)
}

func (f *front) requests() []seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seen(nil), f.reqs...)
}

func (f *front) reset() []seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.reqs
	f.reqs = nil
	return r
}

// upstreamURL is the front's URL with the node's credential as user info,
// the way an operator might have written [registry] url.
func (f *front) upstreamURL() string {
	return strings.Replace(f.srv.URL, "http://", "http://"+nodeUser+":"+nodeSecret+"@", 1)
}

func (f *front) origin() string { return f.srv.URL }

// checkNoNodeCredential fails the test if any recorded request carries the
// node's credential in any header, or any Authorization other than the
// job's bearer token.
func checkNoNodeCredential(t *testing.T, reqs []seen) {
	t.Helper()
	for _, r := range reqs {
		if got := r.Header.Values("Authorization"); len(got) != 1 || got[0] != "Bearer "+jobToken {
			t.Errorf("%s %s reached the registry with Authorization %q, want exactly the job's bearer token", r.Method, r.RequestURI, got)
		}
		for k, vs := range r.Header {
			for _, v := range vs {
				for _, s := range nodeSecretForms {
					if strings.Contains(v, s) {
						t.Errorf("%s %s: header %s carries the node credential: %q", r.Method, r.RequestURI, k, v)
					}
				}
			}
		}
		for _, s := range nodeSecretForms {
			if strings.Contains(r.RequestURI, s) {
				t.Errorf("%s %s: the URL carries the node credential", r.Method, r.RequestURI)
			}
		}
	}
}

// guest is an HTTP client that reaches only registry.vk, which it dials
// at the proxy's listener: any other dial fails the test, so a response
// that sent it elsewhere (an unrewritten Location) is caught.
type guest struct {
	*http.Client
	t *testing.T

	mu     sync.Mutex
	others []string // addresses other than registry.vk it tried
}

func newGuest(t *testing.T, proxyAddr string) *guest {
	g := &guest{t: t}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr != Host+":80" {
				g.mu.Lock()
				g.others = append(g.others, addr)
				g.mu.Unlock()
				return nil, errors.New("guest network: only registry.vk is reachable")
			}
			var d net.Dialer
			return d.DialContext(ctx, network, proxyAddr)
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	g.Client = &http.Client{Transport: tr}
	return g
}

func (g *guest) checkOnlyProxy() {
	g.t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.others) > 0 {
		g.t.Errorf("the guest was sent to %v; it must only ever talk to %s", g.others, Host)
	}
}

// serve starts an HTTP server for the proxy, as a host would on the
// guest's network, and returns a guest client bound to it.
func serve(t *testing.T, p *Proxy) *guest {
	t.Helper()
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return newGuest(t, srv.Listener.Addr().String())
}

// mustNew builds a token-holding proxy for upstream.
func mustNew(t *testing.T, cfg Config) *Proxy {
	t.Helper()
	if cfg.Token == "" {
		cfg.Token = jobToken
	}
	if cfg.Log == nil {
		cfg.Log = testlog.New(t)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p
}

// waitFor waits for ch with a deadline so a broken proxy fails the test
// instead of hanging it.
func waitFor[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}
