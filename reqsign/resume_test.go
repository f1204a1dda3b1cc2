package reqsign

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

// rawConn sends one request over a new TLS connection dialled with cfg
// (which may carry a session cache), letting sign compute the headers from
// that connection's exporter. It returns the status code and whether the
// connection resumed an earlier TLS session.
func (s *signedServer) rawConn(t *testing.T, cfg *tls.Config, method, target string, body []byte, sign func(ekm []byte, h http.Header)) (int, bool) {
	t.Helper()
	c, err := tls.Dial("tcp", s.srv.Listener.Addr().String(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cs := c.ConnectionState()
	ekm, err := Exporter(&cs)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(method, "https://"+s.srv.Listener.Addr().String()+target, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	sign(ekm, req.Header)
	if err := req.Write(c); err != nil {
		t.Fatal(err)
	}
	// Reading the answer also reads the server's session ticket, which
	// arrives before it, into cfg's cache.
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, cs.DidResume
}

// spec: AUTH-14
// TLS 1.3 session resumption keeps the binding: a resumed connection has
// its own exporter, so a signature made on the connection whose session it
// resumes is refused on it (401), while a fresh signature over the
// resumed connection's exporter is accepted.
func TestResumedConnectionBinding(t *testing.T) {
	key := fixedKey(1)
	now := time.Now()
	s := newSignedServer(t, map[string]ed25519.PublicKey{"relay-1": key.Public().(ed25519.PublicKey)}, now)
	cfg := s.client.Clone()
	cfg.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	body := []byte(`{"runner":"r1"}`)
	sign := func(ekm []byte, h http.Header) {
		SetHeaders(h, "relay-1", now, Sign(key, "relay-1", "POST", "/v1/jobs", body, now, ekm))
	}

	var captured http.Header
	code, resumed := s.rawConn(t, cfg, "POST", "/v1/jobs", body, func(ekm []byte, h http.Header) {
		sign(ekm, h)
		captured = h.Clone()
	})
	if err := s.result(t); err != nil || code != http.StatusOK {
		t.Fatalf("first request: %d %v", code, err)
	}
	if resumed {
		t.Fatal("the first connection resumed a session it cannot have")
	}

	t.Run("replayed on a resumed connection", func(t *testing.T) {
		code, resumed := s.rawConn(t, cfg, "POST", "/v1/jobs", body, func(_ []byte, h http.Header) {
			for k, v := range captured {
				h[k] = v
			}
		})
		if !resumed {
			t.Fatal("the second connection did not resume: the test proves nothing")
		}
		if err := s.result(t); !errors.Is(err, ErrBadSignature) {
			t.Fatalf("replay verdict %v, want %v", err, ErrBadSignature)
		}
		if code != http.StatusUnauthorized {
			t.Fatalf("replay status %d, want 401", code)
		}
	})

	t.Run("fresh signature on a resumed connection", func(t *testing.T) {
		code, resumed := s.rawConn(t, cfg, "POST", "/v1/jobs", body, sign)
		if !resumed {
			t.Fatal("the connection did not resume")
		}
		if err := s.result(t); err != nil || code != http.StatusOK {
			t.Fatalf("fresh signature refused: %d %v", code, err)
		}
	})

	t.Run("two resumptions of one session differ", func(t *testing.T) {
		// Both resume (the cache holds the newest ticket); a signature of
		// the first is still refused on the second.
		var first http.Header
		s.rawConn(t, cfg, "POST", "/v1/jobs", body, func(ekm []byte, h http.Header) {
			sign(ekm, h)
			first = h.Clone()
		})
		if err := s.result(t); err != nil {
			t.Fatal(err)
		}
		code, resumed := s.rawConn(t, cfg, "POST", "/v1/jobs", body, func(_ []byte, h http.Header) {
			for k, v := range first {
				h[k] = v
			}
		})
		if err := s.result(t); !resumed || !errors.Is(err, ErrBadSignature) || code != http.StatusUnauthorized {
			t.Fatalf("replay across resumptions: resumed=%v verdict %v status %d", resumed, err, code)
		}
	})
}

// spec: AUTH-14
// The Transport resumes TLS sessions when its TLSConfig carries a session
// cache, still one connection per request, and the hub-side verification
// accepts each request's own signature.
func TestTransportResumes(t *testing.T) {
	key := fixedKey(1)
	now := time.Now()
	s := newSignedServer(t, map[string]ed25519.PublicKey{"relay-1": key.Public().(ed25519.PublicKey)}, now)
	cfg := s.client.Clone()
	cfg.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	client := &http.Client{Transport: &Transport{Key: key, Principal: "relay-1", TLSConfig: cfg, Now: func() time.Time { return now }}}
	before := s.conns.Load()
	for i := range 3 {
		resp, err := client.Post(s.srv.URL+"/v1/jobs", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if err := s.result(t); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d %v", i, resp.StatusCode, err)
		}
		if got, want := s.resumes.Load(), int64(i); got != want {
			t.Errorf("after request %d: %d resumed, want %d", i, got, want)
		}
	}
	if got := s.conns.Load() - before; got != 3 {
		t.Errorf("3 requests used %d connections, want 3", got)
	}
}
