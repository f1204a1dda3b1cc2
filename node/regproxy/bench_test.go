package regproxy

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// BenchmarkForward measures a GET of a blob from a loopback upstream,
// directly and through the proxy (a guest -> proxy -> registry hop on
// loopback), so the difference is the proxy's cost.
func BenchmarkForward(b *testing.B) {
	for _, size := range []int{1 << 10, 1 << 20} {
		body := bytes.Repeat([]byte("x"), size)
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			w.Write(body)
		}))
		p, err := New(Config{Upstream: up.URL, Token: jobToken, Log: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		px := httptest.NewServer(p)
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
		for _, tc := range []struct{ name, base string }{{"direct", up.URL}, {"proxy", px.URL}} {
			b.Run(tc.name+"/"+strconv.Itoa(size), func(b *testing.B) {
				b.SetBytes(int64(size))
				for b.Loop() {
					resp, err := client.Get(tc.base + "/v2/acme/app/blobs/sha256:aa")
					if err != nil {
						b.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Fatalf("status %d", resp.StatusCode)
					}
				}
			})
		}
		px.Close()
		up.Close()
	}
}

// BenchmarkCheck measures the routing decision alone.
func BenchmarkCheck(b *testing.B) {
	for b.Loop() {
		check("PROPFIND", "/dav/files/tenants/acme/reports/2026/01/result.json")
	}
}
