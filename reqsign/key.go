package reqsign

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ErrKeyFile is returned (wrapped) by [LoadKey] for a file that holds no
// ed25519 PKCS#8 key.
var ErrKeyFile = errors.New("reqsign: not an ed25519 PKCS#8 key")

// GenerateKey returns a new ed25519 key from crypto/rand.
func GenerateKey() (ed25519.PrivateKey, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("reqsign: generate key: %w", err)
	}
	return priv, nil
}

// SaveKey writes key to path as a PKCS#8 PEM block ("PRIVATE KEY"), mode
// 0600, creating the parent directory with mode 0700 when missing
// (AUTH-02, AUTH-09: the relay keeps it at <state_dir>/hub/key.pk8). The
// file is written to a temporary name, synced and renamed over path, so a
// crash leaves either the old key or the new one.
func SaveKey(path string, key ed25519.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("reqsign: marshal key: %w", err)
	}
	return writeFileAtomic(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
}

// LoadKey reads an ed25519 key saved by [SaveKey]; it accepts PKCS#8 as
// PEM or as raw DER. A file readable by group or others is refused, since
// the key is the principal's identity.
func LoadKey(path string) (ed25519.PrivateKey, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("reqsign: load key: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("reqsign: key %s has mode %v; want 0600", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reqsign: load key: %w", err)
	}
	return ParseKey(b)
}

// ParseKey parses a PKCS#8 ed25519 private key, PEM ("PRIVATE KEY") or DER.
func ParseKey(b []byte) (ed25519.PrivateKey, error) {
	der := b
	if blk, _ := pem.Decode(b); blk != nil {
		if blk.Type != "PRIVATE KEY" {
			return nil, fmt.Errorf("%w: PEM block %q", ErrKeyFile, blk.Type)
		}
		der = blk.Bytes
	}
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrKeyFile, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%w: key type %T", ErrKeyFile, k)
	}
	return priv, nil
}

func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("reqsign: save key: %w", err)
	}
	f, err := os.CreateTemp(dir, ".key-*")
	if err != nil {
		return fmt.Errorf("reqsign: save key: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("reqsign: save key: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("reqsign: save key: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("reqsign: save key: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("reqsign: save key: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("reqsign: save key: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
