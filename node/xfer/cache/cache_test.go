package cache

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/registrytest"
	"github.com/vk-ci/vk/node/xfer/internal/treetest"
	"oras.land/oras-go/v2/registry/remote"
)

var testStart = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// proxy records the requests that reach the registry and can inject
// answers.
type proxy struct {
	srv *httptest.Server
	mu  sync.Mutex
	log []string // "METHOD /path"
	// inject, when set, may answer a request itself (return true).
	inject func(w http.ResponseWriter, r *http.Request) bool
}

func newProxy(t *testing.T, reg *registrytest.Registry) *proxy {
	p := &proxy{}
	target, _ := url.Parse(reg.URL())
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ErrorLog = log.New(io.Discard, "", 0)
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.log = append(p.log, r.Method+" "+r.URL.Path)
		inj := p.inject
		p.mu.Unlock()
		if inj != nil && inj(w, r) {
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *proxy) reset() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.log
	p.log = nil
	return l
}

func (p *proxy) writes() int {
	n := 0
	for _, l := range p.reset() {
		m, _, _ := strings.Cut(l, " ")
		if m != http.MethodGet && m != http.MethodHead {
			n++
		}
	}
	return n
}

func (p *proxy) host() string { return strings.TrimPrefix(p.srv.URL, "http://") }

type env struct {
	reg   *registrytest.Registry
	proxy *proxy
	store *Store
	clk   *clock.Fake
}

func newEnv(t *testing.T) *env {
	reg := registrytest.New(t)
	p := newProxy(t, reg)
	clk := clock.NewFake(testStart)
	st := &Store{Registry: p.host(), PlainHTTP: true, Clock: clk, TempDir: t.TempDir()}
	return &env{reg: reg, proxy: p, store: st, clk: clk}
}

var scope = Scope{GitLabURL: "https://GitLab.example.com:8443/sub/path", ProjectID: 42, Protected: true}

func outcomes(rs []Result) []Outcome {
	var o []Outcome
	for _, r := range rs {
		o = append(o, r.Outcome)
	}
	return o
}

var vendor = map[string]string{
	"vendor/a.txt":        "alpha",
	"vendor/sub/b.bin":    "\x00\x01beta",
	"vendor/link":         "->a.txt",
	"node_modules/x/y.js": "y",
	"src/main.go":         "not cached",
}

var vendorSpec = Spec{Key: "deps-protected", Paths: []string{"vendor", "node_modules/**/*.js"}}

// spec: XFER-07, XFER-08, XFER-09
func TestSaveRestoreUnchanged(t *testing.T) {
	e := newEnv(t)
	src := t.TempDir()
	treetest.Write(t, src, vendor)
	old := testStart.Add(-time.Hour)
	os.Chtimes(filepath.Join(src, "vendor/a.txt"), old, old)
	var trace bytes.Buffer
	res := e.store.Archive(t.Context(), Request{Scope: scope, Caches: []Spec{vendorSpec}, Dir: src, Trace: &trace})
	if res[0].Outcome != Saved {
		t.Fatalf("Archive = %+v\n%s", res, trace.String())
	}
	if e.proxy.writes() == 0 {
		t.Fatal("a first save wrote nothing to the registry")
	}
	// The repository and tag are where XFER-07/08 say.
	repo, _ := remote.NewRepository(e.store.Registry + "/ci-cache/gitlab.example.com-8443/sub/path/42")
	repo.PlainHTTP = true
	if _, err := repo.Resolve(t.Context(), "protected-"+KeyDigest("deps-protected")); err != nil {
		t.Errorf("cache not at the expected repository/tag: %v", err)
	}
	e.proxy.reset()

	dst := t.TempDir()
	trace.Reset()
	res = e.store.Restore(t.Context(), Request{Scope: scope, Caches: []Spec{vendorSpec}, Dir: dst, Trace: &trace})
	if res[0].Outcome != Restored || res[0].From != "deps-protected" {
		t.Fatalf("Restore = %+v\n%s", res, trace.String())
	}
	want := map[string]string{}
	for k, v := range vendor {
		if !strings.HasPrefix(k, "src/") {
			want[k] = v
		}
	}
	if d := cmp.Diff(want, treetest.Read(t, dst)); d != "" {
		t.Errorf("restored tree (-want +got):\n%s", d)
	}
	if fi, _ := os.Stat(filepath.Join(dst, "vendor/a.txt")); !fi.ModTime().Equal(old) {
		t.Errorf("mtime = %v, want %v restored", fi.ModTime(), old)
	}
	for _, l := range []string{"Checking cache for deps-protected...", "Successfully extracted cache"} {
		if !strings.Contains(trace.String(), l) {
			t.Errorf("trace lacks %q:\n%s", l, trace.String())
		}
	}

	// Archiving the restored, untouched tree changes nothing: only probes.
	e.proxy.reset()
	res = e.store.Archive(t.Context(), Request{Scope: scope, Caches: []Spec{vendorSpec}, Dir: dst})
	if res[0].Outcome != Unchanged {
		t.Fatalf("re-archive = %+v, want unchanged", res)
	}
	reqs := e.proxy.reset()
	for _, r := range reqs {
		if !strings.HasPrefix(r, "HEAD ") {
			t.Errorf("unchanged cache sent %s; want only HEAD probes", r)
		}
	}
	if len(reqs) > 2 {
		t.Errorf("unchanged cache cost %d requests %q, want ≤ 2", len(reqs), reqs)
	}
}

// spec: XFER-09
func TestLastWriteWins(t *testing.T) {
	e := newEnv(t)
	for _, v := range []string{"one", "two"} {
		src := t.TempDir()
		treetest.Write(t, src, map[string]string{"vendor/v": v})
		if res := e.store.Archive(t.Context(), Request{Scope: scope, Caches: []Spec{vendorSpec}, Dir: src}); res[0].Outcome != Saved {
			t.Fatalf("Archive %s = %+v", v, res)
		}
	}
	dst := t.TempDir()
	e.store.Restore(t.Context(), Request{Scope: scope, Caches: []Spec{vendorSpec}, Dir: dst})
	if b, _ := os.ReadFile(filepath.Join(dst, "vendor/v")); string(b) != "two" {
		t.Errorf("restored %q, want the last write", b)
	}
}

// spec: XFER-08
func TestFallbackAndProtection(t *testing.T) {
	e := newEnv(t)
	src := t.TempDir()
	treetest.Write(t, src, map[string]string{"vendor/v": "main"})
	e.store.Archive(t.Context(), Request{Scope: scope, Caches: []Spec{{Key: "main-protected", Paths: []string{"vendor"}}}, Dir: src})

	tests := []struct {
		name      string
		protected bool
		spec      Spec
		want      Outcome
		from      string
	}{
		{"fallback hit", true, Spec{Key: "feature-protected", FallbackKeys: []string{"other", "main-protected"}}, Restored, "main-protected"},
		{"unprotected never sees protected", false, Spec{Key: "main-protected"}, Miss, ""},
		{"all miss", true, Spec{Key: "x", FallbackKeys: []string{"y"}}, Miss, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sc := scope
			sc.Protected = tc.protected
			dst := t.TempDir()
			var trace bytes.Buffer
			res := e.store.Restore(t.Context(), Request{Scope: sc, Caches: []Spec{tc.spec}, Dir: dst, Trace: &trace})
			if res[0].Outcome != tc.want || res[0].From != tc.from {
				t.Errorf("Restore = %+v, want %s from %q\n%s", res[0], tc.want, tc.from, trace.String())
			}
		})
	}
}

// spec: XFER-09
func TestPolicyAndWhen(t *testing.T) {
	e := newEnv(t)
	src := t.TempDir()
	treetest.Write(t, src, map[string]string{"vendor/v": "x"})
	specs := []Spec{
		{Key: "pull", Paths: []string{"vendor"}, Policy: "pull"},
		{Key: "push", Paths: []string{"vendor"}, Policy: "push"},
		{Key: "fail", Paths: []string{"vendor"}, When: "on_failure"},
		{Key: "always", Paths: []string{"vendor"}, When: "always"},
		{Key: "empty", Paths: []string{"nothing"}},
	}
	got := outcomes(e.store.Archive(t.Context(), Request{Scope: scope, Caches: specs, Dir: src}))
	if d := cmp.Diff([]Outcome{Skipped, Saved, Skipped, Saved, Skipped}, got); d != "" {
		t.Errorf("archive on success (-want +got):\n%s", d)
	}
	got = outcomes(e.store.Restore(t.Context(), Request{Scope: scope, Caches: specs, Dir: t.TempDir()}))
	if d := cmp.Diff([]Outcome{Miss, Skipped, Miss, Restored, Miss}, got); d != "" {
		t.Errorf("restore (-want +got):\n%s", d)
	}
}

// spec: XFER-10
func TestRegistryDownThenUp(t *testing.T) {
	e := newEnv(t)
	src := t.TempDir()
	treetest.Write(t, src, map[string]string{"vendor/v": "x"})
	e.store.Registry = e.reg.Addr // real refused connections, no proxy
	e.reg.Stop()
	retries := 0
	e.store.OnRetry = func(attempt int, wait time.Duration, err error) {
		retries++
		if attempt == 3 {
			if err := e.reg.Start(); err != nil {
				t.Error(err)
			}
		}
		e.clk.Advance(wait)
	}
	var trace bytes.Buffer
	res := e.store.Archive(t.Context(), Request{Scope: scope, Caches: []Spec{vendorSpec}, Dir: src, Trace: &trace})
	if res[0].Outcome != Saved {
		t.Fatalf("Archive across an outage = %+v\n%s", res, trace.String())
	}
	if retries != 3 {
		t.Errorf("retries = %d, want 3", retries)
	}
}

// spec: XFER-10, XFER-11
func TestRegistryDownTooLong(t *testing.T) {
	e := newEnv(t)
	src := t.TempDir()
	treetest.Write(t, src, map[string]string{"vendor/v": "x"})
	e.store.Registry = e.reg.Addr // real refused connections, no proxy
	e.reg.Stop()
	e.store.OnRetry = func(_ int, wait time.Duration, _ error) { e.clk.Advance(wait) }
	var trace bytes.Buffer
	res := e.store.Archive(t.Context(), Request{Scope: scope, Caches: []Spec{vendorSpec, {Key: "second", Paths: []string{"vendor"}}}, Dir: src, Trace: &trace})
	if res[0].Outcome != Failed || !errors.Is(res[0].Err, ErrUnavailable) {
		t.Fatalf("first cache = %+v, want failed/ErrUnavailable", res[0])
	}
	if el := e.clk.Now().Sub(testStart); el != DefaultConnRetryWindow {
		t.Errorf("gave up after %v, want %v", el, DefaultConnRetryWindow)
	}
	if res[1].Outcome != Skipped || res[1].Err == nil {
		t.Errorf("second cache = %+v, want skipped after the failure", res[1])
	}
	if !strings.Contains(trace.String(), "WARNING: Failed to create cache deps-protected") {
		t.Errorf("no warning in trace:\n%s", trace.String())
	}
}

// spec: XFER-10
func TestBusyRegistryRetried(t *testing.T) {
	for _, tc := range []struct {
		name    string
		busyFor int // answers 503/429 this many times
		want    Outcome
		elapsed time.Duration
	}{
		{"recovers", 4, Saved, 0},
		{"busy beyond 3 minutes", 1 << 30, Failed, DefaultBusyRetryWindow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			src := t.TempDir()
			treetest.Write(t, src, map[string]string{"vendor/v": "x"})
			var calls atomic.Int64
			e.proxy.inject = func(w http.ResponseWriter, r *http.Request) bool {
				n := calls.Add(1)
				if n > int64(tc.busyFor) {
					return false
				}
				if n%2 == 0 {
					w.WriteHeader(http.StatusTooManyRequests)
				} else {
					w.WriteHeader(http.StatusServiceUnavailable)
				}
				return true
			}
			e.store.OnRetry = func(_ int, wait time.Duration, _ error) { e.clk.Advance(wait) }
			res := e.store.Archive(t.Context(), Request{Scope: scope, Caches: []Spec{vendorSpec}, Dir: src})
			if res[0].Outcome != tc.want {
				t.Fatalf("Archive = %+v, want %s", res[0], tc.want)
			}
			if tc.elapsed != 0 {
				if el := e.clk.Now().Sub(testStart); el != tc.elapsed {
					t.Errorf("gave up after %v, want %v", el, tc.elapsed)
				}
			}
		})
	}
}

// spec: XFER-11
func TestRequestTimeoutNotRetried(t *testing.T) {
	e := newEnv(t)
	e.store.requestTimeout = 200 * time.Millisecond
	release := make(chan struct{})
	defer close(release)
	var hung atomic.Int32
	e.proxy.inject = func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodHead {
			return false
		}
		hung.Add(1)
		select {
		case <-r.Context().Done():
		case <-release:
		}
		return true
	}
	e.store.OnRetry = func(int, time.Duration, error) { t.Error("a timed-out request was retried") }
	var trace bytes.Buffer
	specs := []Spec{{Key: "a", Paths: []string{"vendor"}}, {Key: "b", Paths: []string{"vendor"}}}
	res := e.store.Restore(context.Background(), Request{Scope: scope, Caches: specs, Dir: t.TempDir(), Trace: &trace})
	if res[0].Outcome != Failed || !errors.Is(res[0].Err, ErrRequestTimeout) {
		t.Fatalf("first = %+v, want failed with ErrRequestTimeout", res[0])
	}
	if res[1].Outcome != Skipped {
		t.Errorf("second = %+v, want skipped", res[1])
	}
	if hung.Load() != 1 {
		t.Errorf("%d requests hung, want exactly 1 (no retry, rest skipped)", hung.Load())
	}
	if !strings.Contains(trace.String(), "WARNING: Failed to restore cache a") {
		t.Errorf("no warning:\n%s", trace.String())
	}
}

// spec: XFER-13, XFER-14
func TestJobRegistryRepository(t *testing.T) {
	e := newEnv(t)
	src := t.TempDir()
	treetest.Write(t, src, map[string]string{"vendor/v": "x"})
	sc := scope
	sc.Job = &JobRegistry{Repository: "/tenants/acme/ci-cache/protected/42", Token: "registry-token", Expires: testStart.Add(time.Hour)}
	if res := e.store.Archive(t.Context(), Request{Scope: sc, Caches: []Spec{vendorSpec}, Dir: src}); res[0].Outcome != Saved {
		t.Fatalf("Archive = %+v", res)
	}
	repo, _ := remote.NewRepository(e.store.Registry + "/tenants/acme/ci-cache/protected/42")
	repo.PlainHTTP = true
	if _, err := repo.Resolve(t.Context(), KeyDigest(vendorSpec.Key)); err != nil {
		t.Errorf("cache not tagged by the key's sha256 alone: %v", err)
	}
	for _, bad := range []*JobRegistry{
		{Repository: "Not A Repo!", Token: "t"},
		{Repository: "ok/repo", Token: "t", Expires: testStart.Add(-time.Second)},
	} {
		sc.Job = bad
		e.proxy.reset()
		var trace bytes.Buffer
		res := e.store.Restore(t.Context(), Request{Scope: sc, Caches: []Spec{vendorSpec}, Dir: t.TempDir(), Trace: &trace})
		if res[0].Outcome != Skipped || !strings.Contains(trace.String(), "WARNING: Skipping the cache") {
			t.Errorf("job registry %+v: %+v, want skipped with a warning\n%s", bad, res[0], trace.String())
		}
		if n := len(e.proxy.reset()); n != 0 {
			t.Errorf("skipped cache still sent %d requests", n)
		}
	}
}
