package admin

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/vk-ci/vk/hub/enrol"
)

// get sends a GET over the admin socket and returns status and body.
func (e *env) get(t *testing.T, path string) (int, string) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", e.sock)
	}}}
	resp, err := hc.Get("http://admin" + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// The admin socket serves the runtime's profiles for operators.
func TestPprofOnSocket(t *testing.T) {
	e := newEnv(t)
	for _, tt := range []struct{ path, want string }{
		{"/debug/pprof/", "goroutine"},
		{"/debug/pprof/heap?debug=1", "heap profile"},
		{"/debug/pprof/goroutine?debug=1", "goroutine profile"},
		{"/debug/pprof/cmdline", ""},
	} {
		code, body := e.get(t, tt.path)
		if code != http.StatusOK || !strings.Contains(body, tt.want) {
			t.Errorf("GET %s = %d %.200q, want 200 containing %q", tt.path, code, body, tt.want)
		}
	}
}

// The profiles pass the same peer check as every admin route: a user the
// hub does not allow gets 403.
func TestPprofPeerCheck(t *testing.T) {
	e := newEnv(t)
	srv, err := NewServer(Config{Store: e.st, Backend: e.be, Enroller: &enrol.Enroller{}, Clock: e.clk})
	if err != nil {
		t.Fatal(err)
	}
	srv.peer = func(net.Conn) (int, error) { return 4242, nil }
	w := httptest.NewRecorder()
	srv.peerCheck(srv.mux).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/debug/pprof/heap?debug=1", nil))
	if w.Code != http.StatusForbidden || strings.Contains(w.Body.String(), "heap profile") {
		t.Errorf("uid 4242: %d %.200q, want 403 and no profile", w.Code, w.Body)
	}
}
