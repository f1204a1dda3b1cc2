package reqsign

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// spec: AUTH-11, AUTH-14
// A WebSocket session upgrade is a signed GET of the session path with an
// empty body, made through Transport like any other request; the server
// checks it before accepting the session.
func TestWebSocketSession(t *testing.T) {
	key := fixedKey(5)
	pub := key.Public().(ed25519.PublicKey)
	now := time.Now()
	verdicts := make(chan error, 4)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := VerifyRequest(r, nil, func(context.Context, string) (ed25519.PublicKey, error) { return pub, nil }, now, 0)
		verdicts <- err
		if err != nil {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		typ, msg, err := c.Read(r.Context())
		if err != nil {
			return
		}
		c.Write(r.Context(), typ, []byte(strings.ToUpper(string(msg))))
		c.Close(websocket.StatusNormalClosure, "")
	}))
	srv.TLS = &tls.Config{MinVersion: tls.VersionTLS13}
	srv.StartTLS()
	defer srv.Close()
	roots := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS13}

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	wsURL := "wss" + strings.TrimPrefix(srv.URL, "https") + "/v1/gitlab/session"
	tr := &Transport{Key: key, Principal: "relay-1", TLSConfig: cfg, Now: func() time.Time { return now }}
	c, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		t.Fatalf("signed session dial: %v", err)
	}
	defer c.CloseNow()
	if err := <-verdicts; err != nil {
		t.Fatalf("server refused the signed upgrade: %v", err)
	}
	if err := c.Write(ctx, websocket.MessageText, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	_, msg, err := c.Read(ctx)
	if err != nil || string(msg) != "HELLO" {
		t.Fatalf("echo = %q, %v", msg, err)
	}
	c.Close(websocket.StatusNormalClosure, "")

	// Unsigned, the same upgrade is refused.
	plain := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
	_, resp, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPClient: plain})
	if err == nil {
		t.Fatal("unsigned session dial succeeded")
	}
	if resp != nil {
		io.Copy(io.Discard, resp.Body)
	}
	if err := <-verdicts; !errors.Is(err, ErrMissing) {
		t.Fatalf("unsigned upgrade verdict %v, want %v", err, ErrMissing)
	}
}
