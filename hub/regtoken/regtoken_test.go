package regtoken

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/cacherepo"
	"github.com/vk-ci/vk/internal/registrytest"
	"oras.land/oras-go/v2/errdef"
)

const (
	testService = "vk-test-registry"
	testIssuer  = "vk-hub-test"
)

// tokenRegistry starts the real docker-registry under token
// authentication trusting a new signing key, and returns it with a
// Minter for it.
func tokenRegistry(t *testing.T, prefix string) (*registrytest.Registry, *Minter) {
	t.Helper()
	reg, keyFile, certFile := registrytest.NewWithSigningKey(t, testService, testIssuer)
	m, err := New([]Config{{URL: reg.URL(), Service: testService, Issuer: testIssuer, KeyFile: keyFile, CertFile: certFile, RepositoryPrefix: prefix}})
	if err != nil {
		t.Fatal(err)
	}
	return reg, m
}

// A token the hub minted lets the job push and pull its own cache
// repository on the real docker-registry, and nothing else: a push to
// another project's repository, or to the same project's repository of
// the other protection, is refused by the registry itself; so is an
// expired token, and one signed by a key the registry does not trust.
//
// spec: XFER-13
func TestMintedTokenGrantsOnlyTheJobsRepository(t *testing.T) {
	reg, m := tokenRegistry(t, "tenants/acme")
	ctx := t.Context()
	job := Job{ID: "j-1", GitLabURL: "https://GitLab.example.com/sub", ProjectID: 42, Protected: true, Timeout: time.Hour}
	tok, err := m.Mint(time.Now(), reg.URL()+"/", job)
	if err != nil {
		t.Fatal(err)
	}
	if want := "tenants/acme/ci-cache/gitlab.example.com/sub/42/protected"; tok.Repository != want {
		t.Fatalf("Repository = %q, want %q", tok.Repository, want)
	}
	if want := time.Hour + LifetimeMargin; tok.Lifetime != want {
		t.Errorf("Lifetime = %v, want %v", tok.Lifetime, want)
	}
	own := reg.Repository(t, tok.Repository, tok.Bearer)
	body := []byte("the job's cache layer")
	if err := registrytest.PushArtifact(ctx, own, "v1", body); err != nil {
		t.Fatalf("push to the job's own repository: %v\n%s", err, reg.Log())
	}
	if got, err := registrytest.PullArtifact(ctx, own, "v1"); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("pull from the job's own repository = %q, %v; want %q", got, err, body)
	}

	others := map[string]string{
		"another project":        "tenants/acme/ci-cache/gitlab.example.com/sub/43/protected",
		"the other protection":   "tenants/acme/ci-cache/gitlab.example.com/sub/42/unprotected",
		"the project's own root": "tenants/acme/ci-cache/gitlab.example.com/sub/42",
	}
	for what, name := range others {
		err := registrytest.PushArtifact(ctx, reg.Repository(t, name, tok.Bearer), "v1", body)
		if !registrytest.Refused(err) {
			t.Errorf("push to %s (%s) = %v (status %d), want the registry's 401 or 403", what, name, err, registrytest.Status(err))
		}
	}

	// Expired: minted two hours ago with a lifetime of one minute (the
	// registry allows a minute of clock skew).
	short, _ := New([]Config{{URL: reg.URL(), Service: testService, Issuer: testIssuer,
		KeyFile: m.regs[0].cfg.KeyFile, CertFile: m.regs[0].cfg.CertFile, RepositoryPrefix: "tenants/acme", TokenLifetimeSecs: 60}})
	old, err := short.Mint(time.Now().Add(-2*time.Hour), reg.URL(), job)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := registrytest.PullArtifact(ctx, reg.Repository(t, old.Repository, old.Bearer), "v1"); registrytest.Status(err) != http.StatusUnauthorized {
		t.Errorf("pull with an expired token = %v, want 401", err)
	}

	// Signed by a key the registry does not trust.
	k2, c2 := registrytest.SigningKey(t)
	stranger, err := New([]Config{{URL: reg.URL(), Service: testService, Issuer: testIssuer, KeyFile: k2, CertFile: c2, RepositoryPrefix: "tenants/acme"}})
	if err != nil {
		t.Fatal(err)
	}
	forged, _ := stranger.Mint(time.Now(), reg.URL(), job)
	if _, err := registrytest.PullArtifact(ctx, reg.Repository(t, forged.Repository, forged.Bearer), "v1"); registrytest.Status(err) != http.StatusUnauthorized {
		t.Errorf("pull with a token of an untrusted key = %v, want 401", err)
	}
}

// An RSA key signs tokens the registry accepts too (RS256).
//
// spec: XFER-13
func TestRSAKeyTokenAccepted(t *testing.T) {
	dir := t.TempDir()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyFile, certFile := writeKeyCert(t, dir, key, key.Public())
	reg := registrytest.NewWithTokenAuth(t, registrytest.TokenAuth{Service: testService, Issuer: testIssuer, RootCertBundle: certFile})
	m, err := New([]Config{{URL: reg.URL(), Service: testService, Issuer: testIssuer, KeyFile: keyFile, CertFile: certFile}})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := m.Mint(time.Now(), reg.URL(), Job{ID: "j-2", GitLabURL: "https://gitlab.com", ProjectID: 7})
	if err != nil {
		t.Fatal(err)
	}
	if tok.Repository != "ci-cache/gitlab.com/7/unprotected" {
		t.Errorf("Repository = %q", tok.Repository)
	}
	if _, err := registrytest.PullArtifact(t.Context(), reg.Repository(t, tok.Repository, tok.Bearer), "v1"); !errors.Is(err, errdef.ErrNotFound) {
		t.Errorf("pull of a missing tag with an RS256 token = %v, want not found (the token accepted)", err)
	}
}

func writeKeyCert(t *testing.T, dir string, key any, pub any) (string, string) {
	t.Helper()
	return writeKeyCertTB(t, dir, key, pub)
}

// writeKeyCertTB writes key (PKCS #8) and a self-signed certificate for
// pub into dir.
func writeKeyCertTB(t testing.TB, dir string, key any, pub any) (string, string) {
	t.Helper()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "signer"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		t.Fatal(err)
	}
	p8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	kf, cf := filepath.Join(dir, "k.pem"), filepath.Join(dir, "c.pem")
	os.WriteFile(kf, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8}), 0o600)
	os.WriteFile(cf, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	return kf, cf
}

// The claims are what distribution 2.8 decodes: aud a single string, the
// one grant of pull and push, exp the lifetime after nbf and iat, the
// certificate in x5c; the subject is the hub's job ID.
func TestClaims(t *testing.T) {
	keyFile, certFile := registrytest.SigningKey(t)
	m, err := New([]Config{{URL: "https://registry.example.com", Service: "svc", Issuer: "iss", KeyFile: keyFile, CertFile: certFile, TokenLifetimeSecs: 600}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tok, err := m.Mint(now, "HTTPS://Registry.Example.com/", Job{ID: "j-9", GitLabURL: "https://gitlab.com", ProjectID: 1})
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(tok.Bearer, ".")
	if len(parts) != 3 {
		t.Fatalf("token has %d parts", len(parts))
	}
	var h map[string]any
	var c map[string]any
	hb, _ := base64.RawURLEncoding.DecodeString(parts[0])
	cb, _ := base64.RawURLEncoding.DecodeString(parts[1])
	if json.Unmarshal(hb, &h) != nil || json.Unmarshal(cb, &c) != nil {
		t.Fatalf("header %s, claims %s", hb, cb)
	}
	if h["alg"] != "ES256" || len(h["x5c"].([]any)) != 1 {
		t.Errorf("header = %s", hb)
	}
	want := `{"access":[{"actions":["pull","push"],"name":"ci-cache/gitlab.com/1/unprotected","type":"repository"}],"aud":"svc","exp":1767323645,"iat":1767323045,"iss":"iss","nbf":1767323045,"sub":"j-9"}`
	delete(c, "jti")
	if got, _ := json.Marshal(c); string(got) != want {
		t.Errorf("claims = %s\nwant     %s", got, want)
	}
	sig, _ := base64.RawURLEncoding.DecodeString(parts[2])
	block, _ := pem.Decode(must(os.ReadFile(certFile)))
	cert, _ := x509.ParseCertificate(block.Bytes)
	d := sha256Of(parts[0] + "." + parts[1])
	r, s := new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])
	if len(sig) != 64 || !ecdsa.Verify(cert.PublicKey.(*ecdsa.PublicKey), d, r, s) {
		t.Errorf("signature (%d bytes) does not verify", len(sig))
	}
	if m.Minting("https://other.example.com") || !m.Minting("https://registry.example.com") {
		t.Error("Minting matches the wrong registries")
	}
	if _, err := m.Mint(now, "https://other.example.com", Job{ID: "j", GitLabURL: "https://gitlab.com", ProjectID: 1}); !errors.Is(err, ErrNoRegistry) {
		t.Errorf("Mint for an unknown registry: %v, want ErrNoRegistry", err)
	}
	if _, err := m.Mint(now, "https://registry.example.com", Job{ID: "j", GitLabURL: "not a url", ProjectID: 1}); !errors.Is(err, cacherepo.ErrBadRepository) {
		t.Errorf("Mint for a bad GitLab URL: %v, want ErrBadRepository", err)
	}
	var zero *Minter
	if zero.Minting("https://registry.example.com") {
		t.Error("a nil Minter mints")
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// Lifetime: the job's timeout plus the margin, capped; a fixed
// token_lifetime_secs wins.
func TestLifetime(t *testing.T) {
	for _, tc := range []struct {
		cfgSecs int
		timeout time.Duration
		want    time.Duration
	}{
		{0, time.Hour, time.Hour + LifetimeMargin},
		{0, 0, DefaultJobTimeout + LifetimeMargin},
		{0, 7 * 24 * time.Hour, MaxLifetime},
		{600, 5 * time.Hour, 10 * time.Minute},
	} {
		if got := (Config{TokenLifetimeSecs: tc.cfgSecs}).Lifetime(tc.timeout); got != tc.want {
			t.Errorf("Lifetime(secs %d, timeout %v) = %v, want %v", tc.cfgSecs, tc.timeout, got, tc.want)
		}
	}
}

// A bad registry entry names its key; a key that is not the
// certificate's, or one the registry cannot verify, is refused at load.
func TestConfigErrors(t *testing.T) {
	keyFile, certFile := registrytest.SigningKey(t)
	otherKey, _ := registrytest.SigningKey(t)
	dir := t.TempDir()
	p224, _ := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	k224, c224 := writeKeyCert(t, dir, p224, p224.Public())
	good := Config{URL: "https://r.example.com", Service: "s", Issuer: "i", KeyFile: keyFile, CertFile: certFile}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"url", func(c *Config) { c.URL = "registry.example.com" }, "registries[0].url"},
		{"service", func(c *Config) { c.Service = "" }, "registries[0].service: is required"},
		{"issuer", func(c *Config) { c.Issuer = " " }, "registries[0].issuer: is required"},
		{"prefix", func(c *Config) { c.RepositoryPrefix = "Bad Prefix" }, "registries[0].repository_prefix"},
		{"lifetime", func(c *Config) { c.TokenLifetimeSecs = -1 }, "registries[0].token_lifetime_secs"},
		{"missing key", func(c *Config) { c.KeyFile = filepath.Join(dir, "none.pem") }, "registries[0].key_file"},
		{"cert not the key's", func(c *Config) { c.KeyFile = otherKey }, "registries[0].cert_file"},
		{"curve", func(c *Config) { c.KeyFile, c.CertFile = k224, c224 }, "registries[0].key_file"},
		{"not a cert", func(c *Config) { c.CertFile = keyFile }, "registries[0].cert_file"},
	} {
		c := good
		tc.edit(&c)
		_, err := New([]Config{c})
		if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, want an ErrConfig naming %q", tc.name, err, tc.want)
		}
	}
	if _, err := New([]Config{good, good}); err == nil || !strings.Contains(err.Error(), "registries[1].url") {
		t.Errorf("two entries for one registry: %v, want registries[1].url named", err)
	}
}

func sha256Of(s string) []byte {
	d := sha256.Sum256([]byte(s))
	return d[:]
}
