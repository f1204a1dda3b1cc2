package testfleet

import (
	"context"
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
	"syscall"
	"time"
)

// RegistryBinary is the OCI registry the fleet's nodes keep caches in and
// pull container images from: Debian's docker-registry (CNCF distribution).
const RegistryBinary = "/usr/bin/docker-registry"

// ErrNoRegistry is returned when caches or a container node
// ([NodeSpec.Executor]) were asked for and RegistryBinary is not installed
// (`apt-get install docker-registry`).
var ErrNoRegistry = errors.New("testfleet: docker-registry not installed")

// registry is one docker-registry process on 127.0.0.1, plain HTTP, with
// filesystem storage under dir. (internal/registrytest does the same for
// tests; this one has no testing.TB so the demo can use it.)
type registry struct {
	addr   string
	cmd    *exec.Cmd
	done   chan struct{}
	tokens *signingKey // token authentication's key; nil: none
}

// The token service and issuer names of a fleet's registry under
// Options.RegistryTokens.
const (
	registryService = "vk-fleet-registry"
	registryIssuer  = "vk-fleet-hub"
)

// signingKey is the key files the hub signs registry tokens with.
type signingKey struct{ keyFile, certFile string }

// newSigningKey writes an ECDSA P-256 key and a self-signed certificate
// for it (valid for a day) into dir.
func newSigningKey(dir string) (*signingKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "vk fleet token signer"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	p8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	k := &signingKey{keyFile: filepath.Join(dir, "token-key.pem"), certFile: filepath.Join(dir, "token-cert.pem")}
	if err := os.WriteFile(k.keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8}), 0o600); err != nil {
		return nil, err
	}
	return k, os.WriteFile(k.certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
}

// startRegistry starts the registry in dir; with tokens it requires
// bearer tokens signed by a key it generates there (Options.RegistryTokens).
func startRegistry(ctx context.Context, dir string, tokens bool) (*registry, error) {
	if _, err := os.Stat(RegistryBinary); err != nil {
		return nil, ErrNoRegistry
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
		return nil, err
	}
	cfg := fmt.Sprintf(`version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: %s}
  delete: {enabled: true}
http: {addr: %s}
`, filepath.Join(dir, "data"), addr)
	var sk *signingKey
	if tokens {
		if sk, err = newSigningKey(dir); err != nil {
			return nil, fmt.Errorf("testfleet: registry signing key: %w", err)
		}
		cfg += fmt.Sprintf("auth:\n  token: {realm: %q, service: %q, issuer: %q, rootcertbundle: %q}\n",
			"http://127.0.0.1:1/token", registryService, registryIssuer, sk.certFile)
	}
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(RegistryBinary, "serve", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("testfleet: registry: %w", err)
	}
	r := &registry{addr: addr, cmd: cmd, done: make(chan struct{}), tokens: sk}
	go func() { cmd.Wait(); logf.Close(); close(r.done) }()
	// Poll /v2/ until it answers: an external process, so a deadline is
	// the only way to know it is up.
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(r.url() + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || (tokens && resp.StatusCode == http.StatusUnauthorized) {
				return r, nil
			}
		}
		select {
		case <-r.done:
			return nil, fmt.Errorf("testfleet: registry exited at start (see %s)", filepath.Join(dir, "registry.log"))
		case <-ctx.Done():
			r.stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			r.stop()
			return nil, errors.New("testfleet: registry did not answer within 10s")
		}
	}
}

func (r *registry) url() string { return "http://" + r.addr }

// stop ends the process by its PID: SIGTERM, SIGKILL after 5 s.
func (r *registry) stop() {
	r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(5 * time.Second):
		r.cmd.Process.Kill()
		<-r.done
	}
}

// RegistryHost is the fleet's registry as host:port, "" when none runs.
// It runs with Options.Caches or a node whose [NodeSpec.Executor] runs
// containers; tests push the images those nodes pull here (plain HTTP),
// e.g. with internal/ocitest: ocitest.Push(t, f.RegistryHost(), "test/img:v1", …),
// and name them in jobs as RegistryHost()+"/test/img:v1".
func (f *Fleet) RegistryHost() string {
	if f.reg == nil {
		return ""
	}
	return f.reg.addr
}
