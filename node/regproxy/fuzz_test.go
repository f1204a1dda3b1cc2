package regproxy

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// recordingTransport stands in for the network in the fuzz target: it
// records every outbound request and answers 200, with a Location on the
// registry's origin so response rewriting runs too.
type recordingTransport struct {
	mu   sync.Mutex
	reqs []*http.Request
}

func (rt *recordingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	rt.mu.Lock()
	rt.reqs = append(rt.reqs, r)
	rt.mu.Unlock()
	return &http.Response{
		StatusCode: 200, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:  http.Header{"Location": {"http://upstream.test/v2/x"}},
		Body:    io.NopCloser(strings.NewReader("ok")),
		Request: r,
	}, nil
}

// FuzzProxy sends arbitrary guest requests (method, request target, a
// header and an Authorization of the guest's choosing) and checks what
// the proxy forwards: only canonical paths under /v2/, /lock/ and
// /dav/files/, only the allowed methods under /dav/files/, never CONNECT
// or TRACE, always to the configured registry, always with exactly the
// job's bearer token and never the node's credential (which sits in the
// upstream URL's user info); a token-less proxy forwards nothing.
//
// spec: XFER-18, XFER-19, XFER-20, XFER-21
func FuzzProxy(f *testing.F) {
	for _, s := range [][4]string{
		{"GET", "/v2/", "", ""},
		{"PUT", "/dav/files/a.txt", "Basic dm9kZTp4", "Destination: http://registry.vk/dav/files/b"},
		{"MOVE", "/dav/files/a.txt", "", "Destination: http://registry.vk/dav/files/b"},
		{"COPY", "/dav/files/a", "", "Overwrite: T"},
		{"PROPFIND", "/dav/files/", "", "Depth: 1"},
		{"POST", "/lock/acme", "Bearer guest", ""},
		{"GET", "/v2/../metrics", "", ""},
		{"GET", "/v2/a%2F..%2F..%2Fx", "", ""},
		{"GET", "/%76%32/", "", ""},
		{"GET", "http://evil.example/v2/", "", "Host: evil.example"},
		{"CONNECT", "evil.example:443", "", ""},
		{"TRACE", "/v2/", "", ""},
		{"GET", "/dav/files/../../lock/x", "", ""},
		{"OPTIONS", "*", "", ""},
		{"GET", "/v2/?x=%zz", "", "Connection: Authorization"},
		{"DELETE", "/dav/files/x", "", "Proxy-Authorization: Basic eA=="},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	f.Fuzz(func(t *testing.T, method, target, auth, header string) {
		for _, in := range []string{method, target, auth, header} {
			for _, s := range nodeSecretForms {
				if strings.Contains(in, s) {
					return // the guest cannot know the node's credential
				}
			}
			if strings.Contains(in, jobToken) || strings.ContainsAny(in, "\r\n") {
				return
			}
		}
		raw := method + " " + target + " HTTP/1.1\r\nHost: registry.vk\r\n"
		if auth != "" {
			raw += "Authorization: " + auth + "\r\n"
		}
		if header != "" {
			raw += header + "\r\n"
		}
		raw += "\r\n"
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err != nil {
			return
		}
		rt := &recordingTransport{}
		p, err := New(Config{Upstream: "http://" + nodeUser + ":" + nodeSecret + "@upstream.test", Token: jobToken, Transport: rt})
		if err != nil {
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		p.ServeHTTP(w, req.Clone(t.Context()))
		if len(rt.reqs) > 1 {
			t.Fatalf("%d outbound requests for one guest request", len(rt.reqs))
		}
		for _, out := range rt.reqs {
			u := out.URL
			if u.Scheme != "http" || u.Host != "upstream.test" || u.User != nil || out.Host != "" {
				t.Fatalf("forwarded to %s (Host %q), want http://upstream.test without user info", u, out.Host)
			}
			if !canonical(u.Path) || u.RawPath != "" && u.RawPath != u.EscapedPath() {
				t.Fatalf("forwarded a non-canonical path %q (raw %q)", u.Path, u.RawPath)
			}
			files := strings.HasPrefix(u.Path, PrefixFiles)
			if !files && !strings.HasPrefix(u.Path, PrefixDistribution) && !strings.HasPrefix(u.Path, PrefixLock) {
				t.Fatalf("forwarded %s outside the three prefixes", u.Path)
			}
			if u.Path != req.URL.Path {
				t.Fatalf("forwarded path %q, the guest asked for %q", u.Path, req.URL.Path)
			}
			if out.Method == http.MethodConnect || out.Method == http.MethodTrace {
				t.Fatalf("forwarded %s", out.Method)
			}
			if files && out.Method != "GET" && out.Method != "HEAD" && out.Method != "PROPFIND" && out.Method != "PUT" && out.Method != "MKCOL" && out.Method != "DELETE" && out.Method != "OPTIONS" {
				t.Fatalf("forwarded %s under /dav/files/", out.Method)
			}
			if got := out.Header.Values("Authorization"); len(got) != 1 || got[0] != "Bearer "+jobToken {
				t.Fatalf("Authorization %q, want exactly the job's token", got)
			}
			for _, k := range []string{"Proxy-Authorization", "Cookie", "Destination", "Connection", "Upgrade"} {
				if _, ok := out.Header[k]; ok {
					t.Fatalf("header %s forwarded", k)
				}
			}
			for k, vs := range out.Header {
				for _, v := range vs {
					for _, s := range nodeSecretForms {
						if strings.Contains(k, s) || strings.Contains(v, s) {
							t.Fatalf("node credential forwarded in %s", k)
						}
					}
				}
			}
		}
		if len(rt.reqs) == 1 {
			if loc := w.Header().Get("Location"); loc != "http://registry.vk/v2/x" {
				t.Fatalf("Location %q not rewritten to the guest's origin", loc)
			}
		} else if w.Code < 400 || w.Code >= 500 {
			t.Fatalf("refused with %d, want a 4xx", w.Code)
		}
		// Without a token nothing is forwarded and everything is 403.
		rt2 := &recordingTransport{}
		p2, _ := New(Config{Upstream: "http://upstream.test", Transport: rt2})
		w2 := httptest.NewRecorder()
		p2.ServeHTTP(w2, req.Clone(t.Context()))
		if len(rt2.reqs) != 0 || w2.Code != http.StatusForbidden {
			t.Fatalf("token-less proxy: %d and %d outbound, want 403 and none", w2.Code, len(rt2.reqs))
		}
	})
}
