package regproxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// spec: XFER-20
func TestRequestBodyStreamed(t *testing.T) {
	gotFirst := make(chan string, 1)
	done := make(chan string, 1)
	f := newFront(t, jobToken, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 5)
		if _, err := io.ReadFull(r.Body, buf); err != nil {
			gotFirst <- "error: " + err.Error()
			return
		}
		gotFirst <- string(buf)
		rest, _ := io.ReadAll(r.Body)
		done <- string(rest)
		w.WriteHeader(http.StatusCreated)
	}))
	p := mustNew(t, Config{Upstream: f.upstreamURL()})
	g := serve(t, p)
	pr, pw := io.Pipe()
	req, _ := http.NewRequestWithContext(t.Context(), "PATCH", URL+"/v2/acme/app/blobs/uploads/u1", pr)
	respc := make(chan *http.Response, 1)
	go func() {
		resp, err := g.Do(req)
		if err != nil {
			t.Error(err)
			respc <- nil
			return
		}
		respc <- resp
	}()
	pw.Write([]byte("part1"))
	// The registry has the first part while the guest has not finished
	// sending: the proxy does not buffer request bodies.
	if got := waitFor(t, gotFirst, "the first part upstream"); got != "part1" {
		t.Fatalf("upstream read %q, want part1", got)
	}
	pw.Write([]byte("part2"))
	pw.Close()
	if got := waitFor(t, done, "the rest upstream"); got != "part2" {
		t.Errorf("rest = %q, want part2", got)
	}
	if resp := waitFor(t, respc, "the response"); resp != nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Errorf("status %d, want 201", resp.StatusCode)
		}
	}
}

// spec: XFER-20
func TestResponseBodyStreamed(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	f := newFront(t, jobToken, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("part1"))
		w.(http.Flusher).Flush()
		<-release
		w.Write([]byte("part2"))
	}))
	p := mustNew(t, Config{Upstream: f.upstreamURL()})
	g := serve(t, p)
	resp, err := g.Get(URL + "/v2/acme/app/blobs/sha256:aa")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first := make(chan string, 1)
	go func() {
		buf := make([]byte, 5)
		io.ReadFull(resp.Body, buf)
		first <- string(buf)
	}()
	// The guest reads the first part while the registry still holds the
	// rest back.
	if got := waitFor(t, first, "the first part at the guest"); got != "part1" {
		t.Fatalf("guest read %q, want part1", got)
	}
	unblock()
	rest, _ := io.ReadAll(resp.Body)
	if string(rest) != "part2" {
		t.Errorf("rest = %q, want part2", rest)
	}
}

// storage is a blob store on another origin that registry redirects
// point to; it records what reaches it.
type storage struct {
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []seen
}

func newStorage(t *testing.T, h http.HandlerFunc, tlsServer bool) *storage {
	s := &storage{}
	wrapped := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.reqs = append(s.reqs, seen{Method: r.Method, RequestURI: r.RequestURI, Path: r.URL.Path, Header: r.Header.Clone()})
		s.mu.Unlock()
		h(w, r)
	})
	if tlsServer {
		s.srv = httptest.NewTLSServer(wrapped)
	} else {
		s.srv = httptest.NewServer(wrapped)
	}
	t.Cleanup(s.srv.Close)
	return s
}

func (s *storage) requests() []seen {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seen(nil), s.reqs...)
}

// spec: XFER-18, XFER-20
func TestRedirects(t *testing.T) {
	blobStore := newStorage(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("sig") != "presigned" {
			http.Error(w, "bad signature", http.StatusForbidden)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write([]byte("blob bytes from storage"))
	}, false)
	var loop *storage
	loop = newStorage(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, loop.srv.URL+"/again", http.StatusFound)
	}, false)
	var f *front
	f = newFront(t, jobToken, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v2/acme/app/blobs/sha256:aa": // blob storage redirect
			http.Redirect(w, r, blobStore.srv.URL+"/blobs/aa?sig=presigned", http.StatusTemporaryRedirect)
		case "/v2/acme/app/manifests/old": // same-origin, absolute
			http.Redirect(w, r, f.origin()+"/v2/acme/app/manifests/new", http.StatusMovedPermanently)
		case "/v2/acme/app/manifests/new":
			w.Write([]byte("new manifest"))
		case "/v2/acme/app/blobs/uploads/":
			w.Header().Set("Location", f.origin()+"/v2/acme/app/blobs/uploads/u1?_state=s")
			w.Header().Set("Link", "<"+f.origin()+"/v2/_catalog?last=b&n=1>; rel=\"next\"")
			w.WriteHeader(http.StatusAccepted)
		case "/v2/acme/app/blobs/loop":
			http.Redirect(w, r, loop.srv.URL+"/start", http.StatusFound)
		case "/dav/files/moved.txt": // a PUT redirected off-origin
			http.Redirect(w, r, blobStore.srv.URL+"/put-here", http.StatusTemporaryRedirect)
		default:
			http.NotFound(w, r)
		}
	}))
	p := mustNew(t, Config{Upstream: f.upstreamURL()})
	g := serve(t, p)
	noFollow := &http.Client{Transport: g.Transport, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	t.Run("cross-origin GET followed by the proxy without credentials", func(t *testing.T) {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", URL+"/v2/acme/app/blobs/sha256:aa", nil)
		req.Header.Set("Range", "bytes=0-")
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "blob bytes from storage" {
			t.Fatalf("guest got %d %q, want the blob (the proxy follows)", resp.StatusCode, body)
		}
		reqs := blobStore.requests()
		if len(reqs) != 1 {
			t.Fatalf("storage saw %d requests, want 1", len(reqs))
		}
		if reqs[0].Header.Get("Range") != "bytes=0-" {
			t.Errorf("Range not carried to storage: %v", reqs[0].Header)
		}
		for k, v := range reqs[0].Header {
			if k == "Authorization" || k == "Cookie" || k == "Proxy-Authorization" {
				t.Errorf("storage got %s: %q; no credential may leave the registry's origin", k, v)
			}
			for _, vv := range v {
				if strings.Contains(vv, jobToken) || strings.Contains(vv, nodeSecret) {
					t.Errorf("storage got a credential in %s", k)
				}
			}
		}
	})
	t.Run("same-origin redirect rewritten to registry.vk", func(t *testing.T) {
		resp, err := noFollow.Get(URL + "/v2/acme/app/manifests/old")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got, want := resp.Header.Get("Location"), URL+"/v2/acme/app/manifests/new"; resp.StatusCode != 301 || got != want {
			t.Errorf("got %d Location %q, want 301 %q", resp.StatusCode, got, want)
		}
		// A following client ends up at the new manifest, via the proxy.
		resp, err = g.Get(URL + "/v2/acme/app/manifests/old")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "new manifest" {
			t.Errorf("followed body %q", body)
		}
	})
	t.Run("upload Location and Link rewritten", func(t *testing.T) {
		resp, err := noFollow.Post(URL+"/v2/acme/app/blobs/uploads/", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got, want := resp.Header.Get("Location"), URL+"/v2/acme/app/blobs/uploads/u1?_state=s"; got != want {
			t.Errorf("Location %q, want %q", got, want)
		}
		if got, want := resp.Header.Get("Link"), "<"+URL+"/v2/_catalog?last=b&n=1>; rel=\"next\""; got != want {
			t.Errorf("Link %q, want %q", got, want)
		}
	})
	t.Run("redirect loop ends in 502", func(t *testing.T) {
		resp, err := noFollow.Get(URL + "/v2/acme/app/blobs/loop")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "too many redirects") {
			t.Errorf("got %d %q, want 502 too many redirects", resp.StatusCode, body)
		}
		if n := len(loop.requests()); n != MaxRedirects {
			t.Errorf("loop saw %d hops, want %d", n, MaxRedirects)
		}
	})
	t.Run("cross-origin redirect of a PUT passed back unchanged", func(t *testing.T) {
		req, _ := http.NewRequestWithContext(t.Context(), "PUT", URL+"/dav/files/moved.txt", strings.NewReader("x"))
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got, want := resp.Header.Get("Location"), blobStore.srv.URL+"/put-here"; resp.StatusCode != 307 || got != want {
			t.Errorf("got %d %q, want 307 %q", resp.StatusCode, got, want)
		}
	})
	checkNoNodeCredential(t, f.requests())
	g.checkOnlyProxy()
}

// spec: XFER-18
func TestRedirectDowngradeRefused(t *testing.T) {
	plain := newStorage(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("plain")) }, false)
	reg := newStorage(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+jobToken {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		http.Redirect(w, r, plain.srv.URL+"/blob", http.StatusTemporaryRedirect)
	}, true)
	tr := reg.srv.Client().Transport.(*http.Transport).Clone() // trusts the test CA
	p := mustNew(t, Config{Upstream: reg.srv.URL, Transport: tr})
	w := do(p, "GET", "/v2/acme/app/blobs/sha256:aa", nil)
	if w.Code != http.StatusBadGateway || !strings.Contains(w.Body.String(), "redirect from https to http refused") {
		t.Errorf("got %d %q, want 502 redirect from https to http refused", w.Code, w.Body.String())
	}
	if n := len(plain.requests()); n != 0 {
		t.Errorf("the http target saw %d requests", n)
	}
	if n := len(reg.requests()); n != 1 {
		t.Errorf("the https registry saw %d requests, want 1", n)
	}
}
