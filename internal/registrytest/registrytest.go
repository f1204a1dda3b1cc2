// Package registrytest starts the real Debian docker-registry (CNCF
// distribution 2.8.2, /usr/bin/docker-registry) on 127.0.0.1 with
// filesystem storage in a test temp dir, for tests that need an OCI
// registry. The registry speaks plain HTTP and has no referrers API, so
// clients set PlainHTTP (oras) or name.Insecure (go-containerregistry).
//
// The process is stopped by PID in t.Cleanup. [Registry.Stop] and
// [Registry.Start] let a test take the registry down and bring it back on
// the same address with the same data, to exercise client retries.
//
// The client side is oras: [Registry.Repository] (or [Repo]) is a
// repository reached with a bearer token, [PushArtifact] and
// [PullArtifact] push and read back a one-layer artifact, and [Status]
// is the registry's refusal in an error.
package registrytest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/need"
)

// Binary is the registry executable the helper runs.
const Binary = "/usr/bin/docker-registry"

// readyTimeout bounds how long Start waits for /v2/ to answer.
const readyTimeout = 15 * time.Second

// Registry is one running (or stopped) docker-registry process.
type Registry struct {
	// Addr is host:port the registry listens on, always 127.0.0.1:<port>.
	Addr string
	// Dir is the registry's storage root (inside t.TempDir).
	Dir string

	t       testing.TB
	auth    bool // token authentication: /v2/ answers 401 when ready
	cfgPath string
	logPath string

	mu     sync.Mutex
	cmd    *exec.Cmd  // nil while stopped; guarded by mu
	waitCh chan error // receives cmd.Wait's result; guarded by mu
}

// Available reports whether the registry binary is installed.
func Available() bool {
	_, err := os.Stat(Binary)
	return err == nil
}

// New starts a registry for the test and registers its stop in t.Cleanup.
// The test is skipped (with the reason) when the binary is missing; any
// other failure is fatal.
func New(t testing.TB) *Registry {
	t.Helper()
	return start(t, nil)
}

// TokenAuth is the registry's token authentication (distribution's
// auth.token): every request needs a bearer token signed by a key whose
// certificate chains to RootCertBundle, issued by Issuer for Service.
type TokenAuth struct {
	// Realm is the token service's URL the registry's challenges name;
	// "" means an address nothing listens on (clients that hold their
	// token never ask it).
	Realm string
	// Service and Issuer are auth.token.service and auth.token.issuer.
	Service, Issuer string
	// RootCertBundle is the PEM file of the trusted certificates, e.g.
	// [SigningKey]'s certificate.
	RootCertBundle string
}

// NewWithTokenAuth starts a registry that requires bearer tokens (see
// [TokenAuth]), as [New] does otherwise: a request without a valid token
// for what it does is answered 401 by the registry itself.
func NewWithTokenAuth(t testing.TB, ta TokenAuth) *Registry {
	t.Helper()
	return start(t, &ta)
}

// SigningKey writes a new ECDSA P-256 key (PKCS #8) and a self-signed
// certificate for it, valid for a day, as key.pem and cert.pem in a test
// temp dir, and returns their paths: what a token issuer signs with and
// what the registry's rootcertbundle trusts.
func SigningKey(t testing.TB) (keyFile, certFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "vk test token signer"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	p8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	keyFile, certFile = filepath.Join(dir, "key.pem"), filepath.Join(dir, "cert.pem")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return keyFile, certFile
}

func start(t testing.TB, ta *TokenAuth) *Registry {
	t.Helper()
	if !Available() {
		need.Missingf(t, "registrytest: %s not installed (apt-get install -y docker-registry)", Binary)
	}
	dir := t.TempDir()
	r := &Registry{t: t, Dir: filepath.Join(dir, "data"), cfgPath: filepath.Join(dir, "config.yml"), logPath: filepath.Join(dir, "registry.log")}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("registrytest: pick port: %v", err)
	}
	r.Addr = ln.Addr().String()
	ln.Close()
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: info
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
`, r.Dir, r.Addr)
	if ta != nil {
		r.auth = true
		realm := ta.Realm
		if realm == "" {
			realm = "http://127.0.0.1:1/token"
		}
		cfg += fmt.Sprintf("auth:\n  token:\n    realm: %q\n    service: %q\n    issuer: %q\n    rootcertbundle: %q\n",
			realm, ta.Service, ta.Issuer, ta.RootCertBundle)
	}
	if err := os.WriteFile(r.cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatalf("registrytest: %v", err)
	}
	t.Cleanup(r.Stop)
	if err := r.Start(); err != nil {
		t.Fatalf("registrytest: %v", err)
	}
	return r
}

// URL returns the registry base URL, "http://127.0.0.1:<port>".
func (r *Registry) URL() string { return "http://" + r.Addr }

// Start (re)starts the registry process on [Registry.Addr] and waits until
// GET /v2/ answers 200 (401 under token authentication). Starting a running registry is a no-op.
func (r *Registry) Start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		return nil
	}
	logf, err := os.OpenFile(r.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(Binary, "serve", r.cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", Binary, err)
	}
	logf.Close()
	r.cmd = cmd
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// Polling with a deadline is how we wait for an external process.
	deadline := time.Now().Add(readyTimeout)
	client := &http.Client{Timeout: time.Second}
	for {
		resp, err := client.Get(r.URL() + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || (r.auth && resp.StatusCode == http.StatusUnauthorized) {
				r.waitCh = exited
				return nil
			}
		}
		select {
		case err := <-exited:
			r.cmd = nil
			return fmt.Errorf("registry exited early: %v; log:\n%s", err, r.Log())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-exited
			r.cmd = nil
			return errors.New("registry not ready in time; log:\n" + r.Log())
		}
	}
}

// Stop terminates the registry (SIGTERM, then SIGKILL after 5 s) and waits
// for it to exit. Its data stays in [Registry.Dir]. Stopping a stopped
// registry is a no-op.
func (r *Registry) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return
	}
	r.cmd.Process.Signal(os.Interrupt)
	select {
	case <-r.waitCh:
	case <-time.After(5 * time.Second):
		r.cmd.Process.Kill()
		<-r.waitCh
	}
	r.cmd, r.waitCh = nil, nil
}

// Log returns what the registry has written to its log so far.
func (r *Registry) Log() string {
	b, _ := os.ReadFile(r.logPath)
	return string(bytes.ToValidUTF8(b, []byte("?")))
}
