package reqsign

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// signedServer is a real TLS 1.3 server on loopback whose handler verifies
// every request and reports the outcome on results.
type signedServer struct {
	srv     *httptest.Server
	results chan error
	conns   atomic.Int64
	resumes atomic.Int64 // requests that arrived on a resumed TLS session
	now     time.Time
	client  *tls.Config
}

func newSignedServer(t *testing.T, keys map[string]ed25519.PublicKey, now time.Time) *signedServer {
	t.Helper()
	s := &signedServer{results: make(chan error, 16), now: now}
	lookup := func(_ context.Context, p string) (ed25519.PublicKey, error) {
		k, ok := keys[p]
		if !ok {
			return nil, fmt.Errorf("unknown principal")
		}
		return k, nil
	}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.TLS != nil && r.TLS.DidResume {
			s.resumes.Add(1)
		}
		p, err := VerifyRequest(r, body, lookup, s.now, 0)
		s.results <- err
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		fmt.Fprintf(w, "hello %s", p)
	}))
	s.srv.Config.ConnContext = ConnContext
	s.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.srv.TLS = &tls.Config{MinVersion: tls.VersionTLS13}
	s.srv.StartTLS()
	t.Cleanup(s.srv.Close)
	base := s.srv.Client().Transport.(*http.Transport).TLSClientConfig
	s.client = &tls.Config{RootCAs: base.RootCAs, MinVersion: tls.VersionTLS13}
	return s
}

func (s *signedServer) result(t *testing.T) error {
	t.Helper()
	select {
	case err := <-s.results:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("server saw no request")
		return nil
	}
}

// raw sends one request over a new TLS connection, letting sign compute the
// headers from that connection's exporter; it returns the status code.
func (s *signedServer) raw(t *testing.T, method, target string, body []byte, sign func(ekm []byte, h http.Header)) int {
	t.Helper()
	code, _ := s.rawConn(t, s.client, method, target, body, sign)
	return code
}

// spec: AUTH-11, AUTH-12, AUTH-13, AUTH-14
// Over real TLS 1.3 on loopback: the Transport's signatures are accepted,
// each request travels on its own new connection, and forged, replayed,
// stale and tampered requests are refused with the right sentinel.
func TestOverTLS(t *testing.T) {
	key := fixedKey(1)
	forger := fixedKey(2)
	now := time.Now()
	s := newSignedServer(t, map[string]ed25519.PublicKey{"relay-1": key.Public().(ed25519.PublicKey)}, now)
	tr := &Transport{Key: key, Principal: "relay-1", TLSConfig: s.client, Now: func() time.Time { return now }}
	client := &http.Client{Transport: tr}

	t.Run("good signatures, one connection each", func(t *testing.T) {
		before := s.conns.Load()
		for i := range 3 {
			resp, err := client.Post(s.srv.URL+"/v1/jobs?n="+fmt.Sprint(i), "application/json", strings.NewReader(`{"a":1}`))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err := s.result(t); err != nil {
				t.Fatalf("request %d refused: %v", i, err)
			}
			if resp.StatusCode != 200 || string(b) != "hello relay-1" {
				t.Fatalf("got %d %q", resp.StatusCode, b)
			}
		}
		resp, err := client.Get(s.srv.URL + "/v1/jobs/j1/output?offset=0")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if err := s.result(t); err != nil {
			t.Fatalf("GET refused: %v", err)
		}
		if got := s.conns.Load() - before; got != 4 {
			t.Errorf("4 requests used %d connections, want 4 (AUTH-14)", got)
		}
	})

	goodSign := func(k ed25519.PrivateKey, method, target string, body []byte, at time.Time) func([]byte, http.Header) {
		return func(ekm []byte, h http.Header) {
			SetHeaders(h, "relay-1", at, Sign(k, "relay-1", method, target, body, at, ekm))
		}
	}
	body := []byte(`{"runner":"r1"}`)
	tests := []struct {
		name   string
		method string
		target string
		body   []byte
		sign   func([]byte, http.Header)
		want   error
	}{
		{"raw good", "POST", "/v1/reservations", body, goodSign(key, "POST", "/v1/reservations", body, now), nil},
		{"forged key", "POST", "/v1/reservations", body, goodSign(forger, "POST", "/v1/reservations", body, now), ErrBadSignature},
		{"body tampered", "POST", "/v1/reservations", []byte(`{"runner":"r2"}`), goodSign(key, "POST", "/v1/reservations", body, now), ErrBadSignature},
		{"path tampered", "POST", "/v1/reservations/x/claim", body, goodSign(key, "POST", "/v1/reservations", body, now), ErrBadSignature},
		{"query tampered", "GET", "/v1/jobs/j?after=2", nil, goodSign(key, "GET", "/v1/jobs/j?after=1", nil, now), ErrBadSignature},
		{"method tampered", "DELETE", "/v1/reservations", nil, goodSign(key, "GET", "/v1/reservations", nil, now), ErrBadSignature},
		{"expired", "POST", "/v1/reservations", body, goodSign(key, "POST", "/v1/reservations", body, now.Add(-301*time.Second)), ErrSkew},
		{"future", "POST", "/v1/reservations", body, goodSign(key, "POST", "/v1/reservations", body, now.Add(301*time.Second)), ErrSkew},
		{"no headers", "POST", "/v1/reservations", body, func([]byte, http.Header) {}, ErrMissing},
		{"other exporter", "POST", "/v1/reservations", body, func(_ []byte, h http.Header) {
			goodSign(key, "POST", "/v1/reservations", body, now)(make([]byte, ExporterLen), h)
		}, ErrBadSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code := s.raw(t, tt.method, tt.target, tt.body, tt.sign)
			err := s.result(t)
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("server verdict %v, want %v", err, tt.want)
			}
			if (err == nil) != (code == 200) {
				t.Errorf("status %d for verdict %v", code, err)
			}
		})
	}

	t.Run("replayed on another connection", func(t *testing.T) {
		var captured http.Header
		code := s.raw(t, "POST", "/v1/jobs", body, func(ekm []byte, h http.Header) {
			goodSign(key, "POST", "/v1/jobs", body, now)(ekm, h)
			captured = h.Clone()
		})
		if err := s.result(t); err != nil || code != 200 {
			t.Fatalf("original refused: %d %v", code, err)
		}
		s.raw(t, "POST", "/v1/jobs", body, func(_ []byte, h http.Header) {
			for k, v := range captured {
				h[k] = v
			}
		})
		if err := s.result(t); !errors.Is(err, ErrBadSignature) {
			t.Fatalf("replay verdict %v, want %v", err, ErrBadSignature)
		}
	})

	t.Run("unknown principal", func(t *testing.T) {
		s.raw(t, "GET", "/v1/x", nil, func(ekm []byte, h http.Header) {
			SetHeaders(h, "relay-9", now, Sign(key, "relay-9", "GET", "/v1/x", nil, now, ekm))
		})
		if err := s.result(t); err == nil {
			t.Fatal("unknown principal accepted")
		}
	})

	t.Run("transport refuses plain http", func(t *testing.T) {
		if _, err := client.Get("http://127.0.0.1:1/"); err == nil {
			t.Fatal("signed a plain-HTTP request")
		}
	})
}

// spec: AUTH-13
// A request that did not come over TLS has no exporter and is refused.
func TestVerifyRequestNoTLS(t *testing.T) {
	r := httptest.NewRequest("GET", "/v1/x", nil)
	SetHeaders(r.Header, "relay-1", t0, "c2ln")
	_, err := VerifyRequest(r, nil, func(context.Context, string) (ed25519.PublicKey, error) {
		return fixedKey(1).Public().(ed25519.PublicKey), nil
	}, t0, 0)
	if !errors.Is(err, ErrNoTLS) {
		t.Fatalf("VerifyRequest = %v, want %v", err, ErrNoTLS)
	}
}

// spec: AUTH-02
func TestKeyFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "hub")
	path := filepath.Join(dir, "key.pk8")
	key, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := SaveKey(path, key); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{path: 0o600, dir: 0o700} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s mode %v, want %v", p, fi.Mode().Perm(), want)
		}
	}
	got, err := LoadKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Equal(key) {
		t.Fatal("loaded key differs")
	}
	pemBytes, _ := os.ReadFile(path)
	if !bytes.HasPrefix(pemBytes, []byte("-----BEGIN PRIVATE KEY-----")) {
		t.Errorf("key file is not PKCS#8 PEM: %q", pemBytes[:20])
	}

	// DER is accepted too.
	blkKey, _ := ParseKey(pemBytes)
	derPath := filepath.Join(dir, "key.der")
	der := mustDER(t, blkKey)
	if err := os.WriteFile(derPath, der, 0o600); err != nil {
		t.Fatal(err)
	}
	if k, err := LoadKey(derPath); err != nil || !k.Equal(key) {
		t.Fatalf("LoadKey(DER) = %v", err)
	}

	// A world-readable key is refused; garbage is ErrKeyFile.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKey(path); err == nil {
		t.Error("LoadKey accepted a 0644 key")
	}
	if _, err := ParseKey([]byte("not a key")); !errors.Is(err, ErrKeyFile) {
		t.Errorf("ParseKey(garbage) = %v, want %v", err, ErrKeyFile)
	}
}

func mustDER(t *testing.T, k ed25519.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return der
}
