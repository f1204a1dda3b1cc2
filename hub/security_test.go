package hub

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"testing"

	"github.com/vk-ci/vk/hub/pki"
	"github.com/vk-ci/vk/hub/session"
	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/reqsign"
)

// plainClient returns an HTTPS client that trusts h's hub and signs
// nothing (an attacker's client).
func plainClient(h *harness) *http.Client {
	h.t.Helper()
	cfg, err := pki.ClientConfig(h.srv.CAPEM(), "127.0.0.1")
	if err != nil {
		h.t.Fatal(err)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// TestStoredIdentityKeyRefused: a principal whose stored key is the
// identity point (enrolled before join checked keys) cannot authenticate
// with the constant signature that verifies against it for any message.
//
// spec: AUTH-13
func TestStoredIdentityKeyRefused(t *testing.T) {
	h := newHarness(t)
	identity := make([]byte, 32)
	identity[0] = 1
	if err := h.srv.Store().CreatePrincipal(t.Context(), store.Principal{ID: "relay-weak", Kind: store.KindRelay, PublicKey: identity, Created: testStart}); err != nil {
		t.Fatal(err)
	}
	sig := make([]byte, 64)
	sig[0] = 1 // R = identity, S = 0
	req, _ := http.NewRequest("GET", h.srv.URL()+"/v1/jobs/j-0000000000000001", nil)
	req.Header.Set(reqsign.HeaderPrincipal, "relay-weak")
	req.Header.Set(reqsign.HeaderTime, strconv.FormatInt(h.clk.Now().Unix(), 10))
	req.Header.Set(reqsign.HeaderSignature, base64.StdEncoding.EncodeToString(sig))
	resp, err := plainClient(h).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("forged request with a stored identity key = %d, want 401", resp.StatusCode)
	}
}

// TestSessionLookupRefusesWeakKey: a node or relay whose stored key is
// weak reads as unknown to the session servers, so its session is refused.
//
// spec: AUTH-06
func TestSessionLookupRefusesWeakKey(t *testing.T) {
	h := newHarness(t)
	if err := h.srv.Store().CreatePrincipal(t.Context(), store.Principal{ID: "node-weak", Kind: store.KindNode, PublicKey: make([]byte, 32), Created: testStart}); err != nil {
		t.Fatal(err)
	}
	_, err := principalLookup{h.srv.Store()}.LookupPrincipal(t.Context(), session.KindNode, "node-weak")
	if !errors.Is(err, session.ErrUnknownPrincipal) {
		t.Fatalf("lookup of a node with the all-zeros key = %v, want ErrUnknownPrincipal", err)
	}
	h.enrolNode("node-good")
	if _, err := (principalLookup{h.srv.Store()}).LookupPrincipal(t.Context(), session.KindNode, "node-good"); err != nil {
		t.Fatalf("lookup of a real node key = %v", err)
	}
}

// TestV1ErrorShape: every error answer under /v1/, the mux's own
// included (unknown route, wrong method, a path it would redirect), is
// the API's JSON error body with a code; nothing redirects.
//
// spec: API-55, API-46, API-50
func TestV1ErrorShape(t *testing.T) {
	h := newHarness(t)
	hc := plainClient(h)
	for _, tc := range []struct {
		method, path string
		status       int
		code         client.Code
	}{
		{"GET", "/v1/nope", 404, client.CodeNotFound},
		{"GET", "/v1", 404, client.CodeNotFound},
		{"GET", "/v1/", 404, client.CodeNotFound},
		{"GET", "/v1/jobs", 405, client.CodeInvalid},
		{"DELETE", "/v1/capacity", 405, client.CodeInvalid},
		{"GET", "/v1/join", 405, client.CodeInvalid},
		{"POST", "/v1/node/session", 405, client.CodeInvalid},
		{"GET", "/v1//jobs/j-1", 404, client.CodeNotFound},
		{"GET", "/v1/reservations/../jobs/j-1", 404, client.CodeNotFound},
		{"GET", "/v1/./jobs/j-1", 404, client.CodeNotFound},
		{"GET", "/v1/jobs/j-1", 401, client.CodeUnauthorized},
		{"GET", "/v1/node/session", 401, client.CodeUnauthorized},
	} {
		req, _ := http.NewRequest(tc.method, h.srv.URL()+"/", nil)
		req.URL.Path, req.URL.RawPath = tc.path, tc.path
		req.URL.Opaque = "//" + h.srv.Addr() + tc.path // send the path as written, uncleaned
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e client.Error
		derr := json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != tc.status || derr != nil || e.Code != tc.code || e.Error == "" ||
			resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("Location") != "" {
			t.Errorf("%s %s = %d %q %+v (%v), want %d with code %s", tc.method, tc.path, resp.StatusCode,
				resp.Header.Get("Content-Type"), e, derr, tc.status, tc.code)
		}
		if tc.status == 405 && resp.Header.Get("Allow") == "" {
			t.Errorf("%s %s: 405 without Allow", tc.method, tc.path)
		}
	}
	// Outside /v1 nothing changes.
	resp, err := hc.Get(h.srv.URL() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/healthz = %d", resp.StatusCode)
	}
}
