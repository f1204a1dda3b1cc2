package hub

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/pki"
	"github.com/vk-ci/vk/reqsign"
)

// hubConn is one TLS connection to the hub on which a test writes
// requests one after another.
type hubConn struct {
	c   *tls.Conn
	br  *bufio.Reader
	ekm []byte
	cs  tls.ConnectionState
}

func dialHub(t *testing.T, h *harness, cfg *tls.Config) *hubConn {
	t.Helper()
	c, err := tls.Dial("tcp", h.srv.Addr(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	cs := c.ConnectionState()
	ekm, err := reqsign.Exporter(&cs)
	if err != nil {
		t.Fatal(err)
	}
	return &hubConn{c: c, br: bufio.NewReader(c), ekm: ekm, cs: cs}
}

// noop is the signed request that does no work: a relay's client hello,
// authenticated and then refused 403 (API-09).
const noopPath = "/v1/clients"

var noopBody = []byte(`{}`)

// signNoop returns the headers of the no-op signed for seq on ekm.
func signNoop(h *harness, seq uint64, ekm []byte) http.Header {
	now := h.clk.Now()
	hdr := http.Header{"Content-Type": {"application/json"}}
	reqsign.SetHeadersSeq(hdr, h.relay, now, seq, reqsign.SignSeq(h.key, h.relay, "POST", noopPath, noopBody, now, seq, ekm))
	return hdr
}

// send writes the no-op with hdr and returns the answer's status and
// whether the hub said it closes the connection.
func (c *hubConn) send(t *testing.T, hdr http.Header) (int, bool) {
	t.Helper()
	req, _ := http.NewRequest("POST", "https://hub"+noopPath, bytes.NewReader(noopBody))
	req.Header = hdr.Clone()
	if err := req.Write(c.c); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(c.br, req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Close
}

// closedByHub waits (10 s at most) for the hub to close c.
func (c *hubConn) closedByHub(t *testing.T) bool {
	t.Helper()
	c.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := c.br.ReadByte()
	if err == nil {
		t.Fatalf("the hub sent %q unasked", n)
	}
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, net.ErrClosed)
}

// spec: AUTH-13, AUTH-14
// On one kept-alive connection the hub verifies every request against
// that connection's exporter and sequence: new sequence numbers are
// accepted one after another; the same signed request sent again on its
// connection is refused 401 and the connection closed; those signatures
// are refused 401 on a fresh connection and on one resuming the session.
func TestKeepAliveBinding(t *testing.T) {
	h := newHarness(t)
	cfg, err := pki.ClientConfig(h.srv.CAPEM(), "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	cfg.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	k := dialHub(t, h, cfg)
	var signed []http.Header
	for seq := uint64(1); seq <= 20; seq++ {
		hdr := signNoop(h, seq, k.ekm)
		if code, closing := k.send(t, hdr); code != http.StatusForbidden || closing {
			t.Fatalf("request %d on the kept connection: %d (closing %v), want 403 and kept open", seq, code, closing)
		}
		signed = append(signed, hdr)
	}

	for _, tc := range []struct {
		name   string
		resume bool
	}{{"fresh", false}, {"resumed", true}} {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			if !tc.resume {
				c = cfg.Clone()
				c.ClientSessionCache = nil
			}
			other := dialHub(t, h, c)
			if other.cs.DidResume != tc.resume {
				t.Fatalf("resumed = %v, want %v: the test proves nothing", other.cs.DidResume, tc.resume)
			}
			if code, closing := other.send(t, signed[4]); code != http.StatusUnauthorized || !closing {
				t.Fatalf("signature of another connection: %d (closing %v), want 401 and close", code, closing)
			}
		})
	}

	t.Run("in-stream replay", func(t *testing.T) {
		if code, closing := k.send(t, signed[19]); code != http.StatusUnauthorized || !closing {
			t.Fatalf("last request resent on its connection: %d (closing %v), want 401 and close", code, closing)
		}
		if !k.closedByHub(t) {
			t.Fatal("the hub kept the connection open after a 401")
		}
	})

	t.Run("v1 twice", func(t *testing.T) {
		c := dialHub(t, h, cfg)
		now := h.clk.Now()
		hdr := http.Header{"Content-Type": {"application/json"}}
		reqsign.SetHeaders(hdr, h.relay, now, reqsign.Sign(h.key, h.relay, "POST", noopPath, noopBody, now, c.ekm))
		if code, _ := c.send(t, hdr); code != http.StatusForbidden {
			t.Fatalf("v1 request: %d, want 403", code)
		}
		if code, _ := c.send(t, hdr); code != http.StatusUnauthorized {
			t.Fatalf("second v1 request on one connection: %d, want 401", code)
		}
	})
}

// spec: AUTH-13
// A connection that has not authenticated serves one request: the hub
// closes it after the answer (an unsigned /healthz, a refused signature),
// so it never idles on its address's unauthenticated slot; an
// authenticated connection left idle is closed after
// limits.idle_timeout_secs.
func TestKeepAliveLimits(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Limits.IdleTimeoutSecs = 1 })
	cfg, err := pki.ClientConfig(h.srv.CAPEM(), "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}

	c := dialHub(t, h, cfg)
	req, _ := http.NewRequest("GET", "https://hub/healthz", nil)
	req.Write(c.c)
	resp, err := http.ReadResponse(c.br, req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !resp.Close || !c.closedByHub(t) {
		t.Fatalf("unauthenticated /healthz: %d, close %v; want 200 and the connection closed", resp.StatusCode, resp.Close)
	}

	bad := dialHub(t, h, cfg)
	if code, closing := bad.send(t, signNoop(h, 1, make([]byte, reqsign.ExporterLen))); code != http.StatusUnauthorized || !closing || !bad.closedByHub(t) {
		t.Fatalf("bad signature: %d (closing %v), want 401 and the connection closed", code, closing)
	}
	waitStats(t, h, "no unauthenticated connection left", func(_, unauth int) bool { return unauth == 0 })

	idle := dialHub(t, h, cfg)
	if code, closing := idle.send(t, signNoop(h, 1, idle.ekm)); code != http.StatusForbidden || closing {
		t.Fatalf("signed request: %d (closing %v), want 403 and kept open", code, closing)
	}
	start := time.Now()
	if !idle.closedByHub(t) {
		t.Fatal("the hub kept an idle connection past limits.idle_timeout_secs")
	}
	if d := time.Since(start); d < 500*time.Millisecond {
		t.Fatalf("idle connection closed after %v, before the 1 s idle timeout", d)
	}
}

// spec: AUTH-14
// reqsign.Pool against the real hub: many sequential requests travel on
// one connection.
func TestPoolAgainstHub(t *testing.T) {
	h := newHarness(t)
	cfg, err := pki.ClientConfig(h.srv.CAPEM(), "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	var dials atomic.Int64
	d := &net.Dialer{Timeout: 5 * time.Second, ControlContext: func(context.Context, string, string, syscall.RawConn) error {
		dials.Add(1)
		return nil
	}}
	hc := &http.Client{Transport: &reqsign.Pool{Key: h.key, Principal: h.relay, TLSConfig: cfg, Dialer: d, Now: h.clk.Now}}
	t.Cleanup(hc.CloseIdleConnections)
	for i := range 30 {
		resp, err := hc.Post(h.srv.URL()+noopPath, "application/json", bytes.NewReader(noopBody))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("request %d: %d, want 403", i, resp.StatusCode)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("30 requests dialled %d connections, want 1", n)
	}
}
