package enrol

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/pki"
	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/hub/store/memstore"
	"github.com/vk-ci/vk/hubclient"
	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/reqsign"
)

var start = time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC)

// testHub is a TLS 1.3 server with the hub's PKI serving POST /v1/join and
// a signed probe route ("GET /v1/probe") that accepts a request only if
// reqsign.VerifyRequest passes with a lookup over the store.
type testHub struct {
	srv    *httptest.Server
	st     *memstore.Store
	enr    *Enroller
	clk    *clock.Fake
	bundle *pki.Bundle
}

func newTestHub(t *testing.T) *testHub {
	t.Helper()
	b, err := pki.Ensure(t.TempDir(), nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	h := &testHub{st: memstore.New(), clk: clock.NewFake(start), bundle: b}
	h.enr, err = New(Config{Store: h.st, CAPEM: b.CACertPEM, Clock: h.clk, Log: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	h.enr.Register(mux)
	mux.HandleFunc("GET /v1/probe", func(w http.ResponseWriter, r *http.Request) {
		lookup := func(ctx context.Context, id string) (ed25519.PublicKey, error) {
			p, err := h.st.GetPrincipal(ctx, id)
			if err != nil {
				return nil, err
			}
			if p.Removed {
				return nil, errors.New("removed")
			}
			return ed25519.PublicKey(p.PublicKey), nil
		}
		// Signatures carry real time; the fake clock only ages tokens.
		if _, err := reqsign.VerifyRequest(r, nil, lookup, time.Now(), 0); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	h.srv = httptest.NewUnstartedServer(mux)
	h.srv.TLS = pki.ServerConfig(b.Server)
	h.srv.StartTLS()
	t.Cleanup(h.srv.Close)
	return h
}

func (h *testHub) token(t *testing.T, kind store.PrincipalKind, ttl time.Duration) string {
	t.Helper()
	tok, err := h.enr.NewToken(t.Context(), kind, ttl, "operator")
	if err != nil {
		t.Fatal(err)
	}
	return tok.Text
}

// probe signs GET /v1/probe with key as id over a new TLS connection and
// returns the status.
func (h *testHub) probe(t *testing.T, id string, key ed25519.PrivateKey, caPEM []byte) int {
	t.Helper()
	cfg, err := pki.ClientConfig(caPEM, "")
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: &reqsign.Transport{Key: key, Principal: id, TLSConfig: cfg}}
	resp, err := c.Get(h.srv.URL + "/v1/probe")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func joinCode(err error) (int, client.Code) {
	var se *client.StatusError
	if errors.As(err, &se) {
		return se.Status, se.Body.Code
	}
	return 0, ""
}

// A gitlab token fed to join pins the relay's key: the hub stores the
// principal and an audit line, and the joined key then signs a request
// reqsign.VerifyRequest accepts against the store.
//
// spec: AUTH-08
func TestJoinPinsKey(t *testing.T) {
	h := newTestHub(t)
	tok := h.token(t, store.KindRelay, 0)
	if !strings.HasPrefix(tok, "vkj_gitlab_") || len(tok) != len("vkj_gitlab_")+52 {
		t.Errorf("token %q: want vkj_gitlab_ and 52 base32 characters", tok)
	}
	res, key, err := hubclient.Join(t.Context(), h.srv.URL, tok, h.bundle.CACertPEM, "ci-1.example", hubclient.KindGitLab)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(res.ID, "relay-") || res.TOFU || res.CAFingerprint != h.bundle.Fingerprint {
		t.Errorf("JoinResult = %+v", res)
	}
	p, err := h.st.GetPrincipal(t.Context(), res.ID)
	if err != nil {
		t.Fatal(err)
	}
	if p.Kind != store.KindRelay || p.Name != "ci-1.example" || !ed25519.PublicKey(p.PublicKey).Equal(key.Public()) || !p.Created.Equal(start) {
		t.Errorf("principal = %+v", p)
	}
	toks, _ := h.st.ListTokens(t.Context())
	if len(toks) != 1 || !toks[0].Used || toks[0].UsedBy != res.ID {
		t.Errorf("tokens after join = %+v", toks)
	}
	audit, _ := h.st.ListAudit(t.Context(), 0)
	if len(audit) != 2 || audit[0].Action != "relay.join" || audit[0].Subject != res.ID || audit[1].Action != "token.create" {
		t.Errorf("audit = %+v", audit)
	}
	for _, a := range audit {
		if strings.Contains(a.Detail+a.Subject, tok[len("vkj_gitlab_"):]) {
			t.Errorf("audit entry %+v holds the token", a)
		}
	}
	if st := h.probe(t, res.ID, key, res.CAPEM); st != http.StatusNoContent {
		t.Errorf("signed probe with the joined key = %d, want 204", st)
	}
	other, _ := reqsign.GenerateKey()
	if st := h.probe(t, res.ID, other, res.CAPEM); st != http.StatusUnauthorized {
		t.Errorf("signed probe with another key = %d, want 401", st)
	}
}

// Refused tokens: used twice, wrong kind, expired, unknown.
//
// spec: AUTH-08
func TestJoinRefusesTokens(t *testing.T) {
	h := newTestHub(t)
	ca := h.bundle.CACertPEM
	used := h.token(t, store.KindRelay, 0)
	if _, _, err := hubclient.Join(t.Context(), h.srv.URL, used, ca, "a", hubclient.KindGitLab); err != nil {
		t.Fatal(err)
	}
	node := h.token(t, store.KindNode, 0)
	short := h.token(t, store.KindRelay, time.Minute)
	h.clk.Advance(time.Minute)
	forged := "vkj_gitlab_" + strings.Repeat("a", 52)
	tests := []struct {
		name, token, kind, msg string
	}{
		{"used twice", used, hubclient.KindGitLab, "already used"},
		{"node token for a relay", node, hubclient.KindGitLab, "not a gitlab token"},
		{"node token relabelled gitlab", "vkj_gitlab_" + node[len("vkj_node_"):], hubclient.KindGitLab, "unknown"},
		{"expired", short, hubclient.KindGitLab, "expired"},
		{"unknown", forged, hubclient.KindGitLab, "unknown"},
	}
	for _, tt := range tests {
		_, _, err := hubclient.Join(t.Context(), h.srv.URL, tt.token, ca, "b", tt.kind)
		st, code := joinCode(err)
		if st != http.StatusUnauthorized || code != client.CodeUnauthorized || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: Join = %v, want 401 unauthorized mentioning %q", tt.name, err, tt.msg)
		}
	}
	ps, _ := h.st.ListPrincipals(t.Context())
	if len(ps) != 1 {
		t.Errorf("%d principals after refusals, want 1", len(ps))
	}
	// The node token is unspent by the wrong-kind attempt and still works.
	if res, _, err := hubclient.Join(t.Context(), h.srv.URL, node, ca, "n1", hubclient.KindNode); err != nil || !strings.HasPrefix(res.ID, "node-") {
		t.Errorf("node join = %+v, %v", res, err)
	}
}

// Without --ca the CA is trusted on first use and its fingerprint
// reported; a CA file that does not match the hub is refused.
//
// spec: AUTH-08
func TestJoinTrust(t *testing.T) {
	h := newTestHub(t)
	res, _, err := hubclient.Join(t.Context(), h.srv.URL, h.token(t, store.KindRelay, 0), nil, "a", hubclient.KindGitLab)
	if err != nil {
		t.Fatal(err)
	}
	if !res.TOFU || res.CAFingerprint != h.bundle.Fingerprint || string(res.CAPEM) != string(h.bundle.CACertPEM) {
		t.Errorf("first-use join = %+v, want TOFU with fingerprint %s", res, h.bundle.Fingerprint)
	}
	other := newTestHub(t)
	tok := h.token(t, store.KindRelay, 0)
	if _, _, err := hubclient.Join(t.Context(), h.srv.URL, tok, other.bundle.CACertPEM, "a", hubclient.KindGitLab); err == nil {
		t.Error("join pinned to another CA succeeded")
	}
	// The token was not spent: the TLS handshake failed first.
	if _, _, err := hubclient.Join(t.Context(), h.srv.URL, tok, h.bundle.CACertPEM, "a", hubclient.KindGitLab); err != nil {
		t.Errorf("join after a refused handshake = %v", err)
	}
}

// On first use, a hub that answers another CA than it presented is
// refused.
func TestJoinTOFUMismatch(t *testing.T) {
	h := newTestHub(t)
	other := newTestHub(t)
	liar, err := New(Config{Store: h.st, CAPEM: other.bundle.CACertPEM, Clock: h.clk})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	liar.Register(mux)
	srv := httptest.NewUnstartedServer(mux)
	srv.TLS = pki.ServerConfig(h.bundle.Server)
	srv.StartTLS()
	defer srv.Close()
	_, _, err = hubclient.Join(t.Context(), srv.URL, h.token(t, store.KindRelay, 0), nil, "a", hubclient.KindGitLab)
	if !errors.Is(err, hubclient.ErrUntrustedCA) {
		t.Errorf("Join to a hub answering another CA = %v, want ErrUntrustedCA", err)
	}
}

// JoinAndSave stores the enrolment (AUTH-09), a client built from the
// stored files is accepted, and leave removes them.
//
// spec: AUTH-08, AUTH-09, AUTH-10
func TestJoinAndSave(t *testing.T) {
	h := newTestHub(t)
	state := t.TempDir()
	var jobs []string
	busy := func() error {
		if len(jobs) > 0 {
			return errors.New(strings.Join(jobs, ", "))
		}
		return nil
	}
	e, _, err := hubclient.JoinAndSave(t.Context(), state, hubclient.JoinOptions{HubURL: h.srv.URL,
		Token: h.token(t, store.KindRelay, 0), CAPEM: h.bundle.CACertPEM, Name: "ci", Kind: hubclient.KindGitLab, Busy: busy})
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := hubclient.LoadEnrolment(state)
	if err != nil {
		t.Fatal(err)
	}
	if loaded.ID != e.ID || loaded.HubURL != h.srv.URL {
		t.Errorf("loaded %+v, joined %+v", loaded, e)
	}
	if st := h.probe(t, loaded.ID, loaded.Key, loaded.CAPEM); st != http.StatusNoContent {
		t.Errorf("probe with the stored key = %d", st)
	}
	jobs = []string{"job 7"}
	tok := h.token(t, store.KindRelay, 0)
	_, _, err = hubclient.JoinAndSave(t.Context(), state, hubclient.JoinOptions{HubURL: h.srv.URL, Token: tok,
		CAPEM: h.bundle.CACertPEM, Name: "ci", Kind: hubclient.KindGitLab, Replace: true, Busy: busy})
	if !errors.Is(err, hubclient.ErrBusy) {
		t.Errorf("join --replace while a job is recorded = %v, want ErrBusy", err)
	}
	if err := hubclient.Leave(state, busy); !errors.Is(err, hubclient.ErrBusy) {
		t.Errorf("leave while a job is recorded = %v, want ErrBusy", err)
	}
	jobs = nil
	e2, _, err := hubclient.JoinAndSave(t.Context(), state, hubclient.JoinOptions{HubURL: h.srv.URL, Token: tok,
		CAPEM: h.bundle.CACertPEM, Name: "ci", Kind: hubclient.KindGitLab, Replace: true, Busy: busy})
	if err != nil || e2.ID == e.ID {
		t.Fatalf("join --replace = %+v, %v; want a new principal", e2, err)
	}
	if err := hubclient.Leave(state, busy); err != nil {
		t.Fatal(err)
	}
	if _, err := hubclient.LoadEnrolment(state); !errors.Is(err, hubclient.ErrNotEnrolled) {
		t.Errorf("after leave: %v", err)
	}
}

func TestNewTokenRefuses(t *testing.T) {
	h := newTestHub(t)
	for _, tt := range []struct {
		kind store.PrincipalKind
		ttl  time.Duration
		want error
	}{
		{"api", 0, ErrKind},
		{store.KindRelay, -time.Second, ErrTTL},
		{store.KindNode, MaxTTL + time.Second, ErrTTL},
	} {
		if _, err := h.enr.NewToken(t.Context(), tt.kind, tt.ttl, "op"); !errors.Is(err, tt.want) {
			t.Errorf("NewToken(%q, %v) = %v, want %v", tt.kind, tt.ttl, err, tt.want)
		}
	}
	tok, err := h.enr.NewToken(t.Context(), store.KindNode, 0, "op")
	if err != nil || !tok.Expires.Equal(start.Add(DefaultTTL)) {
		t.Errorf("default TTL: %+v, %v", tok, err)
	}
}

// Malformed join bodies are 400 invalid (strict decode), oversized 413.
func TestJoinBodies(t *testing.T) {
	h := newTestHub(t)
	good := `{"token":"vkj_gitlab_x","public_key":"` + pubB64(t) + `","name":"a","kind":"gitlab"}`
	tests := []struct {
		name, body string
		status     int
	}{
		{"unknown field", strings.TrimSuffix(good, "}") + `,"extra":1}`, 400},
		{"trailing data", good + `{}`, 400},
		{"not json", `token=x`, 400},
		{"short key", `{"token":"vkj_gitlab_x","public_key":"AAAA","name":"a","kind":"gitlab"}`, 400},
		{"bad kind", strings.Replace(good, `"gitlab"}`, `"api"}`, 1), 400},
		{"no name", strings.Replace(good, `"name":"a"`, `"name":""`, 1), 400},
		{"control in name", strings.Replace(good, `"name":"a"`, `"name":"a\nb"`, 1), 400},
		{"huge", `{"token":"` + strings.Repeat("x", MaxJoinBody) + `"}`, 413},
		{"well formed, token unknown", good, 401},
	}
	c := h.srv.Client()
	for _, tt := range tests {
		resp, err := c.Post(h.srv.URL+"/v1/join", "application/json", strings.NewReader(tt.body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.status {
			t.Errorf("%s: status %d, want %d", tt.name, resp.StatusCode, tt.status)
		}
	}
}

func pubB64(t *testing.T) string {
	t.Helper()
	key, err := reqsign.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return encodeKey(key.Public().(ed25519.PublicKey))
}

// On first use, a hub presenting only its leaf certificate (no CA to pin)
// is refused before the token is sent.
func TestJoinTOFUNeedsCA(t *testing.T) {
	h := newTestHub(t)
	mux := http.NewServeMux()
	h.enr.Register(mux)
	srv := httptest.NewUnstartedServer(mux)
	srv.TLS = pki.ServerConfig(tls.Certificate{Certificate: h.bundle.Server.Certificate[:1], PrivateKey: h.bundle.Server.PrivateKey})
	srv.StartTLS()
	defer srv.Close()
	tok := h.token(t, store.KindRelay, 0)
	if _, _, err := hubclient.Join(t.Context(), srv.URL, tok, nil, "a", hubclient.KindGitLab); !errors.Is(err, hubclient.ErrUntrustedCA) {
		t.Errorf("first-use join to a leaf-only hub = %v, want ErrUntrustedCA", err)
	}
	toks, _ := h.st.ListTokens(t.Context())
	if len(toks) != 1 || toks[0].Used {
		t.Errorf("token spent by a refused handshake: %+v", toks)
	}
}
