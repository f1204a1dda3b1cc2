package reqsign

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// keptConn is one TLS connection to the signed server on which a test
// sends requests one after another, signing each itself.
type keptConn struct {
	c   *tls.Conn
	br  *bufio.Reader
	ekm []byte
	cs  tls.ConnectionState
}

func (s *signedServer) keep(t *testing.T, cfg *tls.Config) *keptConn {
	t.Helper()
	c, err := tls.Dial("tcp", s.srv.Listener.Addr().String(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	cs := c.ConnectionState()
	ekm, err := Exporter(&cs)
	if err != nil {
		t.Fatal(err)
	}
	return &keptConn{c: c, br: bufio.NewReader(c), ekm: ekm, cs: cs}
}

// send writes one request with headers h on the connection and returns
// the answer's status.
func (k *keptConn) send(t *testing.T, s *signedServer, method, target string, body []byte, h http.Header) int {
	t.Helper()
	req, err := http.NewRequest(method, "https://"+s.srv.Listener.Addr().String()+target, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range h {
		req.Header[name] = v
	}
	if err := req.Write(k.c); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(k.br, req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func signedSeq(key ed25519.PrivateKey, now time.Time, method, target string, body []byte, seq uint64, ekm []byte) http.Header {
	h := http.Header{}
	SetHeadersSeq(h, "relay-1", now, seq, SignSeq(key, "relay-1", method, target, body, now, seq, ekm))
	return h
}

// spec: AUTH-14
// On a kept-alive connection every request is signed afresh: a request
// with a new sequence number is accepted, the same signed request sent
// again on its own connection is refused 401 (an in-stream replay), and a
// second v1 request on one connection is refused too.
func TestInStreamReplay(t *testing.T) {
	key := fixedKey(1)
	now := time.Now()
	s := newSignedServer(t, map[string]ed25519.PublicKey{"relay-1": key.Public().(ed25519.PublicKey)}, now)
	body := []byte(`{"runner":"r1"}`)

	k := s.keep(t, s.client)
	first := signedSeq(key, now, "POST", "/v1/jobs", body, 1, k.ekm)
	if code := k.send(t, s, "POST", "/v1/jobs", body, first); code != http.StatusOK {
		t.Fatalf("first request: %d %v", code, s.result(t))
	}
	if err := s.result(t); err != nil {
		t.Fatal(err)
	}
	if code := k.send(t, s, "POST", "/v1/jobs", body, first); code != http.StatusUnauthorized {
		t.Fatalf("replay in-stream: status %d, want 401", code)
	}
	if err := s.result(t); !errors.Is(err, ErrReplay) {
		t.Fatalf("replay in-stream verdict %v, want %v", err, ErrReplay)
	}
	// The stream goes on with the next number.
	if code := k.send(t, s, "POST", "/v1/jobs", body, signedSeq(key, now, "POST", "/v1/jobs", body, 2, k.ekm)); code != http.StatusOK {
		t.Fatalf("next request: %d %v", code, s.result(t))
	}
	if err := s.result(t); err != nil {
		t.Fatal(err)
	}

	v1 := s.keep(t, s.client)
	h := http.Header{}
	SetHeaders(h, "relay-1", now, Sign(key, "relay-1", "POST", "/v1/jobs", body, now, v1.ekm))
	if code := v1.send(t, s, "POST", "/v1/jobs", body, h); code != http.StatusOK {
		t.Fatalf("v1 request: %d %v", code, s.result(t))
	}
	s.result(t)
	if code := v1.send(t, s, "POST", "/v1/jobs", body, h); code != http.StatusUnauthorized {
		t.Fatalf("second v1 request on one connection: %d, want 401", code)
	}
	if err := s.result(t); !errors.Is(err, ErrReplay) {
		t.Fatalf("second v1 verdict %v, want %v", err, ErrReplay)
	}
}

// spec: AUTH-14
// A request signed on a kept-alive connection does not verify on any
// other: neither on a fresh connection nor on one resuming its session,
// whatever sequence number it carries.
func TestKeptAliveSignatureOtherConnection(t *testing.T) {
	key := fixedKey(1)
	now := time.Now()
	s := newSignedServer(t, map[string]ed25519.PublicKey{"relay-1": key.Public().(ed25519.PublicKey)}, now)
	cfg := s.client.Clone()
	cfg.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	body := []byte(`{}`)

	k := s.keep(t, cfg)
	var signed []http.Header
	for seq := uint64(1); seq <= 3; seq++ {
		h := signedSeq(key, now, "POST", "/v1/jobs", body, seq, k.ekm)
		if code := k.send(t, s, "POST", "/v1/jobs", body, h); code != http.StatusOK {
			t.Fatalf("request %d: %d", seq, code)
		}
		if err := s.result(t); err != nil {
			t.Fatal(err)
		}
		signed = append(signed, h)
	}
	for _, tc := range []struct {
		name   string
		cfg    *tls.Config
		resume bool
	}{{"fresh", s.client, false}, {"resumed", cfg, true}} {
		t.Run(tc.name, func(t *testing.T) {
			other := s.keep(t, tc.cfg)
			if other.cs.DidResume != tc.resume {
				t.Fatalf("resumed = %v, want %v: the test proves nothing", other.cs.DidResume, tc.resume)
			}
			for i, h := range signed {
				if code := other.send(t, s, "POST", "/v1/jobs", body, h); code != http.StatusUnauthorized {
					t.Fatalf("request %d replayed: %d, want 401", i+1, code)
				}
				if err := s.result(t); !errors.Is(err, ErrBadSignature) {
					t.Fatalf("request %d replayed: verdict %v, want %v", i+1, err, ErrBadSignature)
				}
			}
		})
	}
}

// spec: AUTH-14
// The Pool sends many requests one after another on one connection,
// each verified, and concurrent requests open no more connections than
// there are requests in flight.
func TestPoolReusesConnections(t *testing.T) {
	key := fixedKey(1)
	now := time.Now()
	s := newSignedServer(t, map[string]ed25519.PublicKey{"relay-1": key.Public().(ed25519.PublicKey)}, now)
	s.results = make(chan error, 1024)
	pool := &Pool{Key: key, Principal: "relay-1", TLSConfig: s.client, Now: func() time.Time { return now }}
	hc := &http.Client{Transport: pool}
	t.Cleanup(hc.CloseIdleConnections)
	post := func() error {
		resp, err := hc.Post(s.srv.URL+"/v1/jobs", "application/json", strings.NewReader(`{"n":1}`))
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(b) != "hello relay-1" {
			return errors.New("answer " + resp.Status + ": " + string(b))
		}
		return <-s.results
	}

	before := s.conns.Load()
	for i := range 50 {
		if err := post(); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if got := s.conns.Load() - before; got != 1 {
		t.Fatalf("50 sequential requests used %d connections, want 1", got)
	}

	const loops = 8
	before = s.conns.Load()
	var wg sync.WaitGroup
	errs := make(chan error, loops)
	for range loops {
		wg.Go(func() {
			for range 20 {
				if err := post(); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := s.conns.Load() - before; got > loops {
		t.Fatalf("%d loops opened %d connections, want at most %d", loops, got, loops)
	}
}

// idleOf returns the pool's idle connections to the test server.
func (p *Pool) idleOf(s *signedServer) []*poolConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*poolConn(nil), p.idle[s.srv.Listener.Addr().String()]...)
}

// An idle connection the server closes leaves the pool as soon as its
// reader sees the close, and the next request dials a new one; an idle
// connection past the idle timeout is closed by the pool.
func TestPoolDropsClosedAndIdle(t *testing.T) {
	key := fixedKey(1)
	now := time.Now()
	s := newSignedServer(t, map[string]ed25519.PublicKey{"relay-1": key.Public().(ed25519.PublicKey)}, now)
	pool := &Pool{Key: key, Principal: "relay-1", TLSConfig: s.client, Now: func() time.Time { return now }}
	hc := &http.Client{Transport: pool}
	t.Cleanup(hc.CloseIdleConnections)
	post := func() {
		t.Helper()
		resp, err := hc.Post(s.srv.URL+"/v1/jobs", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err := s.result(t); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %v", resp.StatusCode, err)
		}
	}
	post()
	idle := pool.idleOf(s)
	if len(idle) != 1 {
		t.Fatalf("%d idle connections after a request, want 1", len(idle))
	}
	s.srv.CloseClientConnections()
	<-idle[0].watchDone
	if n := len(pool.idleOf(s)); n != 0 {
		t.Fatalf("%d idle connections after the server closed them, want 0", n)
	}
	before := s.conns.Load()
	post()
	if got := s.conns.Load() - before; got != 1 {
		t.Fatalf("request after the close used %d new connections, want 1", got)
	}

	pool.IdleTimeout = 50 * time.Millisecond
	pool.CloseIdleConnections()
	post()
	idle = pool.idleOf(s)
	if len(idle) != 1 {
		t.Fatalf("%d idle connections, want 1", len(idle))
	}
	<-idle[0].watchDone // the idle timeout
	if n := len(pool.idleOf(s)); n != 0 {
		t.Fatalf("%d idle connections past the idle timeout, want 0", n)
	}
}

// dropSecond is a TLS server that answers the first request of each
// connection 200 and closes the connection on reading its second, without
// an answer: the race of a hub closing a connection as it is reused.
func dropSecond(t *testing.T) (addr string, cfg *tls.Config, conns func() int) {
	t.Helper()
	s := newSignedServer(t, nil, time.Now()) // only for its certificate
	cert := s.srv.TLS.Certificates
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: cert, MinVersion: tls.VersionTLS13})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var mu sync.Mutex
	n := 0
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			n++
			mu.Unlock()
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for i := 0; ; i++ {
					req, err := http.ReadRequest(br)
					if err != nil || i == 1 {
						return
					}
					io.Copy(io.Discard, req.Body)
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			}()
		}
	}()
	return ln.Addr().String(), s.client, func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// A request that finds its reused connection closed before any answer is
// sent again on a new connection when it is safe to repeat (GET); a POST
// is not repeated by the pool but fails, for the caller's retry rules.
func TestPoolRetriesSafeRequests(t *testing.T) {
	addr, cfg, conns := dropSecond(t)
	pool := &Pool{Key: fixedKey(1), Principal: "relay-1", TLSConfig: cfg}
	hc := &http.Client{Transport: pool}
	t.Cleanup(hc.CloseIdleConnections)
	do := func(method string) error {
		req, _ := http.NewRequest(method, "https://"+addr+"/x", nil)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil
	}
	// The server reads the second request only after the pool has taken
	// the connection, so its reader cannot see the close first.
	if err := do("GET"); err != nil {
		t.Fatal(err)
	}
	if err := do("GET"); err != nil {
		t.Fatalf("GET on a connection closed under it: %v", err)
	}
	if got := conns(); got != 2 {
		t.Fatalf("%d connections, want 2 (the GET sent again on a new one)", got)
	}
	if err := do("POST"); err == nil {
		t.Fatal("POST on a connection closed under it succeeded; the pool repeated it")
	}
}
