package sessiontest

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func okHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.URL.Path) })
}

// Start serves over TLS 1.3 on loopback with its own CA, at the URL it
// names, and counts the requests that reach the handler.
func TestStart(t *testing.T) {
	s := Start(t, "/v1/node/session", okHandler())
	if !strings.HasPrefix(s.Origin, "https://127.0.0.1:") {
		t.Fatalf("Origin = %q, want https://127.0.0.1:port", s.Origin)
	}
	if want := "wss://" + strings.TrimPrefix(s.Origin, "https://") + "/v1/node/session"; s.URL != want {
		t.Fatalf("URL = %q, want %q", s.URL, want)
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: s.ClientTLS(t)}}
	defer c.CloseIdleConnections()
	for i, path := range []string{"/v1/node/session", "/other"} {
		resp, err := c.Get(s.Origin + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != path {
			t.Fatalf("GET %s = %d %q, want 200 and the path from the handler", path, resp.StatusCode, body)
		}
		if resp.TLS == nil || resp.TLS.Version != tls.VersionTLS13 || len(resp.TLS.VerifiedChains) == 0 {
			t.Fatalf("GET %s: TLS state %+v, want verified TLS 1.3", path, resp.TLS)
		}
		if got := s.Dials(); got != int64(i+1) {
			t.Fatalf("Dials = %d after %d requests", got, i+1)
		}
	}
	// The certificate chains to this server's CA only.
	plain := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS13}}}
	defer plain.CloseIdleConnections()
	if _, err := plain.Get(s.Origin); err == nil {
		t.Fatal("a client without the server's CA connected")
	}
	if got := s.Dials(); got != 2 {
		t.Fatalf("Dials = %d, want 2: a failed handshake is no request", got)
	}
}

// CutAll closes the accepted connections from the server's side and
// leaves the server accepting new ones.
func TestCutAll(t *testing.T) {
	s := Start(t, "", okHandler())
	addr := strings.TrimPrefix(s.Origin, "https://")
	get := func() (*tls.Conn, *bufio.Reader) {
		t.Helper()
		c, err := tls.Dial("tcp", addr, s.ClientTLS(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := io.WriteString(c, "GET /x HTTP/1.1\r\nHost: "+addr+"\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(c)
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return c, r
	}
	c1, r1 := get()
	c2, r2 := get()
	s.CutAll()
	for i, c := range []*tls.Conn{c1, c2} {
		c.SetReadDeadline(time.Now().Add(Wait))
		r := []*bufio.Reader{r1, r2}[i]
		_, err := r.ReadByte()
		var ne net.Error
		if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
			t.Fatalf("connection %d after CutAll: read %v, want it closed by the server", i+1, err)
		}
	}
	get() // a new connection is served
	if got := s.Dials(); got != 3 {
		t.Fatalf("Dials = %d, want 3", got)
	}
}
