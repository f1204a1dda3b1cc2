package admin

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vk-ci/vk/internal/relsign"
	"github.com/vk-ci/vk/proto/client"
)

// An operator makes a release key and signs a binary with vk-hub alone,
// off the hub: the signature verifies with the public key for that
// release and no other; sign-key refuses to overwrite a key.
//
// spec: OPS-04
func TestSignKeyAndSign(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "vk-gitlab")
	if err := os.WriteFile(bin, bytes.Repeat([]byte{0x7f, 'E', 'L', 'F'}, 4096), 0o755); err != nil {
		t.Fatal(err)
	}
	prefix := filepath.Join(dir, "rel")
	e.mustRun(t, "relays", "sign-key", "--out", prefix)
	if _, _, err := e.run(t, "relays", "sign-key", "--out", prefix); err == nil {
		t.Error("sign-key overwrote an existing key")
	}
	if fi, err := os.Stat(prefix + ".key"); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("private key: %v %v, want mode 0600", fi, err)
	}
	e.mustRun(t, "relays", "sign", "--key", prefix+".key", "--release", "0.5.0", bin)
	sig, err := os.ReadFile(bin + ".sig")
	if err != nil {
		t.Fatal(err)
	}
	pubPEM, err := os.ReadFile(prefix + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	pub, err := relsign.ParsePublicKey(pubPEM)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sum, n, err := relsign.Digest(f)
	if err != nil {
		t.Fatal(err)
	}
	u := client.Update{Release: "0.5.0", SHA256: sum, Size: n, Signature: strings.TrimSpace(string(sig))}
	if err := relsign.Check(pub, u, sum, n); err != nil {
		t.Fatalf("signature made by vk-hub relays sign: %v", err)
	}
	u.Release = "0.5.1"
	if err := relsign.Check(pub, u, sum, n); !errors.Is(err, relsign.ErrSignature) {
		t.Fatalf("signature checked for another release: %v", err)
	}
}

// Without a release service the update routes answer not found, and
// relays list still works.
func TestReleasesOff(t *testing.T) {
	e := newEnv(t)
	if _, _, err := e.run(t, "relays", "releases"); !errors.Is(err, ErrNotFound) {
		t.Errorf("relays releases = %v, want not found", err)
	}
	if _, _, err := e.run(t, "relays", "update", "relay-a", "0.5.0"); !errors.Is(err, ErrNotFound) {
		t.Errorf("relays update = %v, want not found", err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "b")
	os.WriteFile(bin, []byte("x"), 0o644)
	os.WriteFile(bin+".sig", []byte("c2ln"), 0o644)
	if _, _, err := e.run(t, "relays", "publish", "--release", "0.5.0", "--signature", bin+".sig", bin); !errors.Is(err, ErrNotFound) {
		t.Errorf("relays publish = %v, want not found", err)
	}
}
