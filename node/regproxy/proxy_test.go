package regproxy

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/testlog"
)

// do sends one request straight to the handler.
func do(p http.Handler, method, target string, h http.Header) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, nil)
	r.Host = Host
	for k, v := range h {
		r.Header[k] = v
	}
	w := httptest.NewRecorder()
	p.ServeHTTP(w, r)
	return w
}

// spec: XFER-19
func TestRefusesEverythingWithoutToken(t *testing.T) {
	f := newFront(t, jobToken, nil)
	noToken, err := New(Config{Upstream: f.upstreamURL(), Log: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	proxies := []struct {
		name string
		p    *Proxy
		want error
	}{
		{"job without token", noToken, ErrNoToken},
		{"local gitlab-runner job", Refusing(ErrLocalRunner, testlog.New(t)), ErrLocalRunner},
		{"zero value", &Proxy{}, ErrNoToken},
		{"nil reason", Refusing(nil, nil), ErrNoToken},
	}
	requests := []struct{ method, target string }{
		{"GET", "/v2/"},
		{"HEAD", "/v2/acme/app/manifests/v1"},
		{"PUT", "/v2/acme/app/manifests/v1"},
		{"POST", "/v2/acme/app/blobs/uploads/"},
		{"POST", "/lock/acme/ci"},
		{"GET", "/dav/files/acme/a.txt"},
		{"PUT", "/dav/files/acme/a.txt"},
		{"MOVE", "/dav/files/acme/a.txt"},
		{"GET", "/"},
		{"GET", "/v2/../secret"},
		{"TRACE", "/v2/"},
	}
	for _, px := range proxies {
		if !errors.Is(px.p.Refusal(), px.want) {
			t.Errorf("%s: Refusal() = %v, want %v", px.name, px.p.Refusal(), px.want)
		}
		msg := strings.TrimPrefix(px.want.Error(), "regproxy: ")
		for _, rq := range requests {
			w := do(px.p, rq.method, rq.target, nil)
			if w.Code != http.StatusForbidden {
				t.Errorf("%s: %s %s = %d, want 403", px.name, rq.method, rq.target, w.Code)
			}
			if rq.method != "HEAD" && !strings.Contains(w.Body.String(), "vk registry proxy: "+msg) {
				t.Errorf("%s: %s %s body %q lacks %q", px.name, rq.method, rq.target, w.Body.String(), msg)
			}
		}
	}
	// Under /v2/ the body is a distribution error, so registry clients
	// print the reason.
	w := do(Refusing(ErrLocalRunner, nil), "GET", "/v2/acme/app/tags/list", nil)
	var body struct {
		Errors []struct{ Code, Message string }
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || len(body.Errors) != 1 || body.Errors[0].Code != "DENIED" {
		t.Errorf("/v2/ refusal body = %q (%v), want one DENIED distribution error", w.Body.String(), err)
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("a refusing proxy sent %d requests upstream", n)
	}
}

// spec: XFER-20
func TestForwardsOnlyThreePrefixes(t *testing.T) {
	f := newFront(t, jobToken, nil)
	p := mustNew(t, Config{Upstream: f.upstreamURL()})
	cases := []struct {
		method, target string
		want           int
		wantUpstream   string // RequestURI the registry sees; "" = none
	}{
		{"GET", "/v2/", 200, "/v2/"},
		{"GET", "/v2/acme/app/manifests/v1", 200, "/v2/acme/app/manifests/v1"},
		{"GET", "/v2/_catalog?n=10&last=a", 200, "/v2/_catalog?n=10&last=a"},
		{"PATCH", "/v2/acme/app/blobs/uploads/abc?_state=xyz", 200, "/v2/acme/app/blobs/uploads/abc?_state=xyz"},
		{"DELETE", "/v2/acme/app/manifests/sha256:00", 200, "/v2/acme/app/manifests/sha256:00"},
		{"POST", "/lock/acme/ci", 200, "/lock/acme/ci"},
		{"DELETE", "/lock/acme/ci", 200, "/lock/acme/ci"},
		{"PUT", "/dav/files/acme/a%20b.txt", 200, "/dav/files/acme/a%20b.txt"},
		{"GET", "/%76%32/", 200, "/v2/"}, // forwarded in canonical form
		{"GET", "/v2/a%2Fb", 200, "/v2/a/b"},
		{"GET", "/", 404, ""},
		{"GET", "/v2", 404, ""},
		{"GET", "/V2/", 404, ""},
		{"GET", "/v1/", 404, ""},
		{"GET", "/lock", 404, ""},
		{"GET", "/dav/", 404, ""},
		{"GET", "/dav/files", 404, ""},
		{"GET", "/dav/filesx/a", 404, ""},
		{"GET", "/metrics", 404, ""},
		{"GET", "/debug/pprof/", 404, ""},
		{"GET", "/auth/token?scope=repository:acme/app:push", 404, ""},
		{"GET", "/v2/../metrics", 400, ""},
		{"GET", "/v2/a/./b", 400, ""},
		{"GET", "/v2//a", 400, ""},
		{"GET", "/v2/a%2F..%2F..%2Fmetrics", 400, ""},
		{"GET", "/dav/files/..%2f..%2fv2/", 400, ""},
		{"GET", "/v2/a\\b", 400, ""},
		{"GET", "/v2/a%00b", 400, ""},
		{"GET", "*", 400, ""},
		{"TRACE", "/v2/", 405, ""},
		{"CONNECT", "/v2/", 405, ""},
	}
	for _, tc := range cases {
		f.reset()
		w := do(p, tc.method, tc.target, nil)
		if w.Code != tc.want {
			t.Errorf("%s %s = %d %q, want %d", tc.method, tc.target, w.Code, w.Body.String(), tc.want)
		}
		reqs := f.reset()
		switch {
		case tc.wantUpstream == "" && len(reqs) != 0:
			t.Errorf("%s %s reached the registry as %s %s", tc.method, tc.target, reqs[0].Method, reqs[0].RequestURI)
		case tc.wantUpstream != "" && (len(reqs) != 1 || reqs[0].RequestURI != tc.wantUpstream || reqs[0].Method != tc.method):
			t.Errorf("%s %s: registry saw %+v, want one %s %s", tc.method, tc.target, reqs, tc.method, tc.wantUpstream)
		}
		if tc.want == 404 && !strings.Contains(w.Body.String(), "only /v2/, /lock/ and /dav/files/ are proxied") {
			t.Errorf("%s %s: 404 body %q is not clear", tc.method, tc.target, w.Body.String())
		}
	}
}

// spec: XFER-21
func TestFileMethods(t *testing.T) {
	f := newFront(t, jobToken, nil)
	p := mustNew(t, Config{Upstream: f.upstreamURL()})
	allowed := map[string]bool{"GET": true, "HEAD": true, "PROPFIND": true, "PUT": true, "MKCOL": true, "DELETE": true, "OPTIONS": true}
	for _, m := range []string{"GET", "HEAD", "PROPFIND", "PUT", "MKCOL", "DELETE", "OPTIONS", "MOVE", "COPY", "LOCK", "UNLOCK", "PROPPATCH", "POST", "PATCH", "SEARCH", "get"} {
		f.reset()
		h := http.Header{"Destination": {URL + "/dav/files/acme/elsewhere.txt"}, "Overwrite": {"T"}}
		w := do(p, m, "/dav/files/acme/a.txt", h)
		reqs := f.reset()
		if allowed[m] {
			if w.Code != 200 || len(reqs) != 1 || reqs[0].Method != m {
				t.Errorf("%s /dav/files/: %d, registry saw %d requests; want it forwarded", m, w.Code, len(reqs))
				continue
			}
			if d := reqs[0].Header.Get("Destination"); d != "" {
				t.Errorf("%s: Destination %q forwarded", m, d)
			}
			continue
		}
		if w.Code != http.StatusMethodNotAllowed || len(reqs) != 0 {
			t.Errorf("%s /dav/files/: %d and %d upstream requests, want 405 and none", m, w.Code, len(reqs))
		}
		if got, want := w.Header().Get("Allow"), "GET, HEAD, PROPFIND, PUT, MKCOL, DELETE, OPTIONS"; got != want {
			t.Errorf("%s: Allow = %q, want %q", m, got, want)
		}
		if !strings.Contains(w.Body.String(), m+" is not allowed under /dav/files/") {
			t.Errorf("%s: body %q", m, w.Body.String())
		}
	}
}

// spec: XFER-18
func TestTokenExpiry(t *testing.T) {
	f := newFront(t, jobToken, nil)
	clk := clock.NewFake(testStart)
	p := mustNew(t, Config{Upstream: f.upstreamURL(), Expires: testStart.Add(time.Hour), Clock: clk})
	if w := do(p, "GET", "/v2/", nil); w.Code != 200 {
		t.Fatalf("before expiry: %d, want 200", w.Code)
	}
	clk.Advance(time.Hour - time.Second)
	if w := do(p, "PUT", "/dav/files/a", nil); w.Code != 200 {
		t.Fatalf("a second before expiry: %d, want 200", w.Code)
	}
	f.reset()
	clk.Advance(time.Second)
	if !errors.Is(p.Refusal(), ErrTokenExpired) {
		t.Errorf("Refusal() = %v, want ErrTokenExpired", p.Refusal())
	}
	for _, rq := range []struct{ m, path string }{{"GET", "/v2/"}, {"PUT", "/dav/files/a"}, {"POST", "/lock/x"}, {"GET", "/nope"}} {
		w := do(p, rq.m, rq.path, nil)
		if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "job registry token expired") {
			t.Errorf("at expiry %s %s = %d %q, want 403 job registry token expired", rq.m, rq.path, w.Code, w.Body.String())
		}
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("%d requests forwarded after expiry", n)
	}
	// No expiry: forwards however late.
	p2 := mustNew(t, Config{Upstream: f.upstreamURL(), Clock: clk})
	clk.Advance(1000 * time.Hour)
	if w := do(p2, "GET", "/v2/", nil); w.Code != 200 {
		t.Errorf("no expiry: %d, want 200", w.Code)
	}
}

func TestNewRejectsBadUpstream(t *testing.T) {
	for _, u := range []string{"", "registry.example.com", "ftp://r.example.com", "http://", "https://r.example.com/sub", "https://r.example.com/?x=1", "https://u:" + nodeSecret + "@r.example.com/sub", "http://r.example.com/#f", "::", "http://u:" + nodeSecret + "@[::1", "http://u:" + nodeSecret + "@r.example.com:port"} {
		_, err := New(Config{Upstream: u, Token: jobToken})
		if !errors.Is(err, ErrBadUpstream) {
			t.Errorf("New(%q) = %v, want ErrBadUpstream", u, err)
		}
		if err != nil && strings.Contains(err.Error(), nodeSecret) {
			t.Errorf("New(%q) error leaks the credential: %v", u, err)
		}
	}
	for _, u := range []string{"https://r.example.com", "http://127.0.0.1:5000/", "https://" + nodeUser + ":" + nodeSecret + "@r.example.com"} {
		if _, err := New(Config{Upstream: u, Token: jobToken}); err != nil {
			t.Errorf("New(%q) = %v, want nil", u, err)
		}
	}
	// Without a token the upstream is not looked at: the proxy refuses.
	if p, err := New(Config{Upstream: "::"}); err != nil || !errors.Is(p.Refusal(), ErrNoToken) {
		t.Errorf("New(no token) = %v, %v; want a refusing proxy", p, err)
	}
}

// spec: XFER-18
func TestHopByHopHeadersStripped(t *testing.T) {
	f := newFront(t, jobToken, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Connection", "X-Resp-Hop")
		h.Set("X-Resp-Hop", "1")
		h.Set("Keep-Alive", "timeout=5")
		h.Set("Proxy-Authenticate", "Basic")
		h.Set("Docker-Content-Digest", "sha256:abc")
		w.Write([]byte("ok"))
	}))
	p := mustNew(t, Config{Upstream: f.upstreamURL()})
	g := serve(t, p)
	req, _ := http.NewRequestWithContext(t.Context(), "GET", URL+"/v2/acme/app/manifests/v1", nil)
	req.Header.Set("Connection", "X-Hop")
	req.Header.Set("X-Hop", "secret-hop")
	req.Header.Set("Keep-Alive", "300")
	req.Header.Set("Proxy-Authorization", "Basic eA==")
	req.Header.Set("X-Forwarded-For", "10.0.0.1")
	req.Header.Set("X-Forwarded-Host", "evil.example")
	req.Header.Set("Forwarded", "for=10.0.0.1")
	req.Header.Set("Te", "gzip")
	req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json")
	req.Header.Set("X-End-To-End", "kept")
	resp, err := g.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	reqs := f.requests()
	if len(reqs) != 1 {
		t.Fatalf("registry saw %d requests, want 1", len(reqs))
	}
	up := reqs[0].Header
	for _, k := range []string{"Connection", "X-Hop", "Keep-Alive", "Proxy-Authorization", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded", "Te", "Upgrade"} {
		if v, ok := up[k]; ok {
			t.Errorf("request header %s: %q reached the registry", k, v)
		}
	}
	if up.Get("Accept") == "" || up.Get("X-End-To-End") != "kept" {
		t.Errorf("end-to-end headers lost: %v", up)
	}
	for _, k := range []string{"X-Resp-Hop", "Keep-Alive", "Proxy-Authenticate"} {
		if v, ok := resp.Header[k]; ok {
			t.Errorf("response header %s: %q reached the guest", k, v)
		}
	}
	if resp.Header.Get("Docker-Content-Digest") != "sha256:abc" {
		t.Errorf("end-to-end response header lost: %v", resp.Header)
	}
	checkNoNodeCredential(t, reqs)
}

// spec: XFER-20
func TestUpgradeNotProxied(t *testing.T) {
	f := newFront(t, jobToken, nil)
	p := mustNew(t, Config{Upstream: f.upstreamURL()})
	w := do(p, "GET", "/v2/", http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}})
	reqs := f.requests()
	if w.Code != 200 || len(reqs) != 1 {
		t.Fatalf("got %d with %d upstream requests", w.Code, len(reqs))
	}
	if reqs[0].Header.Get("Upgrade") != "" || reqs[0].Header.Get("Connection") != "" {
		t.Errorf("upgrade forwarded: %v", reqs[0].Header)
	}
}

// spec: XFER-20
func TestRewriteURL(t *testing.T) {
	const up = "https://reg.example.com"
	cases := []struct{ in, want string }{
		{"https://reg.example.com/v2/a/blobs/uploads/u?_state=s", URL + "/v2/a/blobs/uploads/u?_state=s"},
		{"https://REG.example.com:443/v2/x", URL + "/v2/x"},
		{"https://user:pw@reg.example.com/v2/x", URL + "/v2/x"},
		{"/v2/relative?x=1", "/v2/relative?x=1"},
		{"http://reg.example.com/v2/x", "http://reg.example.com/v2/x"}, // another origin (scheme)
		{"https://reg.example.com:8443/v2/x", "https://reg.example.com:8443/v2/x"},
		{"https://storage.example.com/blob?sig=1", "https://storage.example.com/blob?sig=1"},
		{"%zz", "%zz"},
	}
	for _, tc := range cases {
		if got := rewriteURL(tc.in, up, URL); got != tc.want {
			t.Errorf("rewriteURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got, want := rewriteLink(`<https://reg.example.com/v2/_catalog?n=1&last=a>; rel="next", </rel>; rel="x"`, up, URL),
		`<`+URL+`/v2/_catalog?n=1&last=a>; rel="next", </rel>; rel="x"`; got != want {
		t.Errorf("rewriteLink = %q, want %q", got, want)
	}
}

// spec: XFER-18
func TestRequestTrailersDropped(t *testing.T) {
	rt := &recordingTransport{}
	p := mustNew(t, Config{Upstream: "http://upstream.test", Transport: rt})
	r := httptest.NewRequest("PUT", "/dav/files/a", strings.NewReader("body"))
	r.ContentLength = -1
	r.Trailer = http.Header{"Authorization": {"Basic " + nodeSecretForms[1]}}
	w := httptest.NewRecorder()
	p.ServeHTTP(w, r)
	if len(rt.reqs) != 1 {
		t.Fatalf("%d outbound requests, want 1", len(rt.reqs))
	}
	if tr := rt.reqs[0].Trailer; len(tr) != 0 {
		t.Errorf("trailers forwarded: %v", tr)
	}
}
