package pki

import (
	"crypto/tls"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// serve accepts TLS connections with cfg on loopback, answering "ok" on each.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if err := c.(*tls.Conn).Handshake(); err == nil {
					io.WriteString(c, "ok")
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func dial(addr string, cfg *tls.Config) error {
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	b, err := io.ReadAll(c)
	if err != nil {
		return err
	}
	if string(b) != "ok" {
		return errors.New("no greeting")
	}
	return nil
}

// spec: AUTH-08
// First start creates the CA and serving certificate (0700 dir, 0600
// files); the second reuses them with the same fingerprint; a client
// pinning the CA connects over real TLS 1.3 while one without it, and a
// TLS 1.2 client, are refused.
func TestEnsureAndConnect(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	now := time.Now() // the TLS handshakes check validity against the real clock
	b1, err := Ensure(dir, []string{"hub.example.com", "10.1.2.3"}, now)
	if err != nil {
		t.Fatal(err)
	}
	if !b1.CreatedCA || !b1.IssuedServer {
		t.Fatalf("first start: CreatedCA=%v IssuedServer=%v, want both", b1.CreatedCA, b1.IssuedServer)
	}
	if len(b1.Fingerprint) != 64 {
		t.Errorf("fingerprint %q is not hex SHA-256", b1.Fingerprint)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %v, want 0700", fi.Mode().Perm())
	}
	for _, f := range []string{CACertFile, CAKeyFile, ServerCertFile, ServerKeyFile} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", f, fi.Mode().Perm())
		}
	}
	leaf := b1.Server.Leaf
	for _, h := range []string{"hub.example.com", "localhost", "127.0.0.1", "::1", "10.1.2.3"} {
		if err := leaf.VerifyHostname(h); err != nil {
			t.Errorf("serving certificate does not cover %s: %v", h, err)
		}
	}

	b2, err := Ensure(dir, []string{"hub.example.com"}, now.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if b2.CreatedCA || b2.IssuedServer {
		t.Errorf("second start: CreatedCA=%v IssuedServer=%v, want neither", b2.CreatedCA, b2.IssuedServer)
	}
	if b2.Fingerprint != b1.Fingerprint {
		t.Errorf("fingerprint changed across restarts: %s → %s", b1.Fingerprint, b2.Fingerprint)
	}

	addr := serve(t, ServerConfig(b2.Server))
	pinned, err := ClientConfig(b1.CACertPEM, "")
	if err != nil {
		t.Fatal(err)
	}
	pinned.ServerName = "127.0.0.1"
	if err := dial(addr, pinned); err != nil {
		t.Fatalf("client pinning the CA: %v", err)
	}
	pinned.ServerName = "hub.example.com"
	if err := dial(addr, pinned); err != nil {
		t.Fatalf("client pinning the CA, by name: %v", err)
	}

	// A client with its own, other CA fails.
	otherB, err := Ensure(filepath.Join(t.TempDir(), "other"), nil, now)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := ClientConfig(otherB.CACertPEM, "127.0.0.1")
	if err := dial(addr, other); err == nil {
		t.Error("client pinning another CA connected")
	}
	// A client with the system roots only fails.
	if err := dial(addr, &tls.Config{ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13}); err == nil {
		t.Error("client without the CA connected")
	}
	// TLS 1.2 is refused by the server.
	v12, _ := ClientConfig(b1.CACertPEM, "127.0.0.1")
	v12.MinVersion, v12.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
	if err := dial(addr, v12); err == nil {
		t.Error("TLS 1.2 client connected")
	}
	if ClientConfigMin := pinned.MinVersion; ClientConfigMin != tls.VersionTLS13 {
		t.Errorf("client MinVersion %x, want TLS 1.3", ClientConfigMin)
	}
}

// The serving certificate is issued again from the same CA when a new name
// is configured or it nears expiry; the CA never changes.
func TestReissue(t *testing.T) {
	dir := t.TempDir()
	b1, err := Ensure(dir, nil, t0)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		names []string
		at    time.Time
		want  bool
	}{
		{"same names", nil, t0.Add(time.Hour), false},
		{"new name", []string{"new.example.com"}, t0.Add(time.Hour), true},
		{"new ip", []string{"new.example.com", "192.0.2.7"}, t0.Add(time.Hour), true},
		{"covered", []string{"new.example.com", "192.0.2.7"}, t0.Add(2 * time.Hour), false},
		{"near expiry", []string{"new.example.com", "192.0.2.7"}, t0.Add(ServerLifetime - RenewBefore + 48*time.Hour), true},
	}
	for _, tt := range tests {
		b, err := Ensure(dir, tt.names, tt.at)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if b.IssuedServer != tt.want {
			t.Errorf("%s: IssuedServer = %v, want %v", tt.name, b.IssuedServer, tt.want)
		}
		if b.Fingerprint != b1.Fingerprint || b.CreatedCA {
			t.Errorf("%s: CA replaced", tt.name)
		}
		if err := b.Server.Leaf.CheckSignatureFrom(b1.CA); err != nil {
			t.Errorf("%s: serving cert not signed by the CA: %v", tt.name, err)
		}
	}
}

// A CA certificate without its key is refused instead of replaced.
func TestIncompleteCA(t *testing.T) {
	dir := t.TempDir()
	if _, err := Ensure(dir, nil, t0); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, CAKeyFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := Ensure(dir, nil, t0); !errors.Is(err, ErrIncomplete) {
		t.Fatalf("Ensure = %v, want %v", err, ErrIncomplete)
	}
}

func TestFormatFingerprint(t *testing.T) {
	if got, want := FormatFingerprint("ab01ff"), "AB:01:FF"; got != want {
		t.Errorf("FormatFingerprint = %q, want %q", got, want)
	}
	if _, err := ClientConfig([]byte("junk"), ""); !errors.Is(err, ErrNoCA) {
		t.Errorf("ClientConfig(junk) = %v, want %v", err, ErrNoCA)
	}
}
