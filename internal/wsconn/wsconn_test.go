package wsconn

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/vk-ci/vk/hub/pki"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/reqsign"
)

// tlsPair returns a TLS 1.3 server config from a fresh hub CA and a
// client config pinning that CA.
func tlsPair(t testing.TB) (server, client *tls.Config) {
	t.Helper()
	b, err := pki.Ensure(t.TempDir(), []string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cc, err := pki.ClientConfig(b.CACertPEM, "")
	if err != nil {
		t.Fatal(err)
	}
	return pki.ServerConfig(b.Server), cc
}

func key(t testing.TB, seed byte) ed25519.PrivateKey {
	t.Helper()
	s := make([]byte, ed25519.SeedSize)
	s[0] = seed
	return ed25519.NewKeyFromSeed(s)
}

type testServer struct {
	url      string
	upgrades chan *Conn
	refusals chan error
	headers  chan http.Header
}

// startServerTLS serves Accept on loopback with srvTLS, verifying against keys.
func startServerTLS(t testing.TB, srvTLS *tls.Config, keys map[string]ed25519.PublicKey, opts *Options) *testServer {
	ts := &testServer{upgrades: make(chan *Conn, 16), refusals: make(chan error, 16), headers: make(chan http.Header, 16)}
	lookup := func(_ context.Context, id string) (ed25519.PublicKey, error) {
		if k, ok := keys[id]; ok {
			return k, nil
		}
		return nil, errors.New("unknown principal")
	}
	verify := SignedBy(lookup, nil, 0)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case ts.headers <- r.Header.Clone():
		default:
		}
		c, _, err := Accept(w, r, verify, opts)
		if err != nil {
			ts.refusals <- err
			return
		}
		ts.upgrades <- c
	}))
	srv.TLS = srvTLS
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ts.url = "wss://" + strings.TrimPrefix(srv.URL, "https://") + "/v1/node/session"
	return ts
}

// spec: AUTH-06, AUTH-14, NSESS-23
func TestDialAcceptExchange(t *testing.T) {
	k := key(t, 1)
	srvTLS, cliTLS := tlsPair(t)
	ts := startServerTLS(t, srvTLS, map[string]ed25519.PublicKey{"node-1": k.Public().(ed25519.PublicKey)}, nil)
	ctx := t.Context()
	// The dial's context ends right after the dial: the session must outlive it.
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	c, err := Dial(dctx, ts.url, k, "node-1", cliTLS, &Options{Logger: testlog.New(t)})
	cancel()
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer c.CloseNow()
	s := <-ts.upgrades
	defer s.CloseNow()
	if s.Principal() != "node-1" {
		t.Fatalf("server principal = %q, want node-1", s.Principal())
	}
	if err := c.WriteFrame(ctx, []byte(`{"type":"hello"}`)); err != nil {
		t.Fatal(err)
	}
	got, err := s.ReadFrame(ctx)
	if err != nil || string(got) != `{"type":"hello"}` {
		t.Fatalf("server ReadFrame = %q, %v", got, err)
	}
	big := make([]byte, MaxFrameBytes) // exactly the limit passes
	for i := range big {
		big[i] = 'a'
	}
	if err := s.WriteFrame(ctx, big); err != nil {
		t.Fatal(err)
	}
	got, err = c.ReadFrame(ctx)
	if err != nil || len(got) != MaxFrameBytes {
		t.Fatalf("client ReadFrame = %d bytes, %v; want %d", len(got), err, MaxFrameBytes)
	}
	if err := s.WriteFrame(ctx, append(big, 'b')); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("WriteFrame(limit+1) = %v, want ErrTooLarge", err)
	}
	read := make(chan error, 1)
	go func() { _, err := c.ReadFrame(ctx); read <- err }()
	if err := s.Close(StatusNormal, "bye"); err != nil {
		t.Fatalf("Close: %v", err)
	}
	err = <-read
	if CloseStatus(err) != StatusNormal || CloseReason(err) != "bye" {
		t.Fatalf("client after close: %v (status %d reason %q)", err, CloseStatus(err), CloseReason(err))
	}
}

// spec: AUTH-06, AUTH-14
func TestUnauthorizedUpgrades(t *testing.T) {
	good := key(t, 1)
	other := key(t, 2)
	srvTLS, cliTLS := tlsPair(t)
	ts := startServerTLS(t, srvTLS, map[string]ed25519.PublicKey{"node-1": good.Public().(ed25519.PublicKey)}, nil)
	ctx := t.Context()

	tests := []struct {
		name      string
		key       ed25519.PrivateKey
		principal string
		now       func() time.Time
		want      error
	}{
		{"wrong key", other, "node-1", nil, reqsign.ErrBadSignature},
		{"unknown principal", good, "node-2", nil, nil},
		{"stale time", good, "node-1", func() time.Time { return time.Now().Add(-time.Hour) }, reqsign.ErrSkew},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Dial(ctx, ts.url, tt.key, tt.principal, cliTLS, &Options{Now: tt.now})
			var de *DialError
			if !errors.As(err, &de) || !errors.Is(err, ErrUnauthorized) || de.Status != 401 || de.Code != "unauthorized" {
				t.Fatalf("Dial = %v, want 401 unauthorized DialError", err)
			}
			refusal := <-ts.refusals
			if !errors.Is(refusal, ErrUnauthorized) || (tt.want != nil && !errors.Is(refusal, tt.want)) {
				t.Fatalf("server refusal = %v, want %v", refusal, tt.want)
			}
			select {
			case c := <-ts.upgrades:
				c.CloseNow()
				t.Fatal("refused request was upgraded")
			default:
			}
		})
	}

	// A valid signature replayed on another TLS connection is refused: it
	// is bound to its own connection's exporter (AUTH-14).
	t.Run("replayed on another connection", func(t *testing.T) {
		for len(ts.headers) > 0 {
			<-ts.headers
		}
		c, err := Dial(ctx, ts.url, good, "node-1", cliTLS, nil)
		if err != nil {
			t.Fatal(err)
		}
		c.CloseNow()
		(<-ts.upgrades).CloseNow()
		h := <-ts.headers
		replay := http.Header{}
		for _, k := range []string{reqsign.HeaderPrincipal, reqsign.HeaderTime, reqsign.HeaderSignature} {
			replay.Set(k, h.Get(k))
		}
		plain := &http.Client{Transport: &http.Transport{TLSClientConfig: cliTLS.Clone()}}
		_, resp, err := websocket.Dial(ctx, ts.url, &websocket.DialOptions{HTTPClient: plain, HTTPHeader: replay})
		if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("replayed upgrade: resp %v err %v, want 401", resp, err)
		}
		if refusal := <-ts.refusals; !errors.Is(refusal, reqsign.ErrBadSignature) {
			t.Fatalf("server refusal = %v, want bad signature", refusal)
		}
	})
}

// spec: NSESS-23
func TestOversizeFrameEndsConnection(t *testing.T) {
	k := key(t, 1)
	srvTLS, cliTLS := tlsPair(t)
	ts := startServerTLS(t, srvTLS, map[string]ed25519.PublicKey{"n": k.Public().(ed25519.PublicKey)}, nil)
	ctx := t.Context()
	c, err := Dial(ctx, ts.url, k, "n", cliTLS, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	s := <-ts.upgrades
	defer s.CloseNow()
	// Bypass WriteFrame's own check to put an oversize message on the wire.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.ws.Write(ctx, websocket.MessageText, make([]byte, MaxFrameBytes+1))
	}()
	_, err = s.ReadFrame(ctx)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("server ReadFrame = %v, want ErrTooLarge", err)
	}
	_, err = c.ReadFrame(ctx)
	if CloseStatus(err) != StatusTooBig || !strings.Contains(CloseReason(err), "read limited") {
		t.Fatalf("client sees %v (status %d), want close 1009 with a reason", err, CloseStatus(err))
	}
	wg.Wait()
	select {
	case <-s.Done():
	default:
		t.Fatal("server Conn not done after oversize frame")
	}
}

// A peer that stops answering pings is dropped after the ping timeout.
func TestPingTimeout(t *testing.T) {
	k := key(t, 1)
	srvTLS, cliTLS := tlsPair(t)
	// The server never reads, so it never answers pings.
	ts := startServerTLS(t, srvTLS, map[string]ed25519.PublicKey{"n": k.Public().(ed25519.PublicKey)}, &Options{PingInterval: -1})
	ctx := t.Context()
	c, err := Dial(ctx, ts.url, k, "n", cliTLS, &Options{PingInterval: 20 * time.Millisecond, PingTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	s := <-ts.upgrades
	defer s.CloseNow()
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := c.ReadFrame(rctx); !errors.Is(err, ErrPingTimeout) {
		t.Fatalf("ReadFrame = %v, want ErrPingTimeout", err)
	}
}

// A peer that reads answers pings and the connection stays up.
func TestPingAnswered(t *testing.T) {
	k := key(t, 1)
	srvTLS, cliTLS := tlsPair(t)
	ts := startServerTLS(t, srvTLS, map[string]ed25519.PublicKey{"n": k.Public().(ed25519.PublicKey)}, &Options{PingInterval: -1})
	ctx := t.Context()
	c, err := Dial(ctx, ts.url, k, "n", cliTLS, &Options{PingInterval: 10 * time.Millisecond, PingTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	s := <-ts.upgrades
	defer s.CloseNow()
	go s.ReadFrame(ctx) // answers pings while pending
	// Several pings are answered while the client reads; then a frame
	// arrives on the same connection.
	pongs := make(chan error, 1)
	go func() { _, err := c.ReadFrame(ctx); pongs <- err }()
	deadline := time.Now().Add(20 * time.Second)
	for c.pongs.Load() < 3 {
		select {
		case err := <-pongs:
			t.Fatalf("client read ended while pings were answered: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d pongs in 20 s", c.pongs.Load())
		}
		time.Sleep(5 * time.Millisecond) // polling a real socket's progress
	}
	if err := s.WriteFrame(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := <-pongs; err != nil {
		t.Fatalf("ReadFrame = %v", err)
	}
}

func TestDialErrorBody(t *testing.T) {
	tests := []struct {
		status   int
		body     string
		wantCode string
		wantMsg  string
		is       error
	}{
		{401, `{"error":"unauthorized","code":"unauthorized"}`, "unauthorized", "unauthorized", ErrUnauthorized},
		{503, `{"error":"busy","code":"unavailable","retry_after_secs":3}`, "unavailable", "busy", ErrRefused},
		{426, "Upgrade Required\n", "", "Upgrade Required", ErrRefused},
	}
	for _, tt := range tests {
		resp := &http.Response{StatusCode: tt.status, Body: http.NoBody}
		resp.Body = nopCloser{strings.NewReader(tt.body)}
		err := dialError(resp)
		var de *DialError
		if !errors.As(err, &de) || de.Code != tt.wantCode || de.Message != tt.wantMsg || !errors.Is(err, tt.is) {
			t.Errorf("dialError(%d %q) = %#v", tt.status, tt.body, err)
		}
	}
}

type nopCloser struct{ *strings.Reader }

func (nopCloser) Close() error { return nil }

// FuzzDialErrorBody: the hub's refusal body is untrusted input.
func FuzzDialErrorBody(f *testing.F) {
	f.Add(401, []byte(`{"error":"unauthorized","code":"unauthorized"}`))
	f.Add(503, []byte(`{"code":`))
	f.Add(400, []byte("\xff\x00"))
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		resp := &http.Response{StatusCode: status, Body: nopCloser{strings.NewReader(string(body))}}
		err := dialError(resp)
		var de *DialError
		if !errors.As(err, &de) || de.Status != status {
			t.Fatalf("dialError = %v", err)
		}
		if errors.Is(err, ErrUnauthorized) != (status == 401) {
			t.Fatalf("status %d: Is(ErrUnauthorized) = %v", status, errors.Is(err, ErrUnauthorized))
		}
		_ = err.Error()
	})
}
