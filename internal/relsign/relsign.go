// Package relsign signs and verifies vk-gitlab releases (OPS-04).
//
// A release key is an ed25519 key pair kept off the hub: the private key
// (PKCS #8, PEM "PRIVATE KEY") signs, each relay holds the public key
// (PKIX, PEM "PUBLIC KEY") in its [hub] release_key_file. A signature is
// standard base64 of the ed25519 signature over
// client.ReleaseSigningMessage(release, sha256): "vk-gitlab <release>
// <hex sha256>". Both PEM forms are OpenSSL's, so a key made with
// `openssl genpkey -algorithm ed25519` works as well as one made by
// `vk-hub relays sign-key`.
package relsign

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/vk-ci/vk/proto/client"
)

// Verification errors; each names why a release was refused.
var (
	// ErrNoSignature: the update carries no signature.
	ErrNoSignature = errors.New("relsign: release is not signed")
	// ErrSignature: the signature is malformed or not the release key's.
	ErrSignature = errors.New("relsign: release signature does not verify with the release key")
	// ErrDigest: the bytes' SHA-256 is not the one announced.
	ErrDigest = errors.New("relsign: release SHA-256 differs from the one announced")
	// ErrSize: the bytes' length is not the one announced.
	ErrSize = errors.New("relsign: release size differs from the one announced")
	// ErrKey: a key file holds no key of the expected kind.
	ErrKey = errors.New("relsign: not an ed25519 key")
)

// GenerateKey makes a release key pair and returns both as PEM.
func GenerateKey() (public, private []byte, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, nil, err
	}
	privDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER}), nil
}

// ParsePublicKey reads a PEM "PUBLIC KEY" holding an ed25519 key.
func ParsePublicKey(b []byte) (ed25519.PublicKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PUBLIC KEY" {
		return nil, fmt.Errorf("%w: no PEM PUBLIC KEY block", ErrKey)
	}
	k, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrKey, err)
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("%w: a %T", ErrKey, k)
	}
	return pub, nil
}

// ParsePrivateKey reads a PEM "PRIVATE KEY" (PKCS #8) holding an ed25519
// key.
func ParsePrivateKey(b []byte) (ed25519.PrivateKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%w: no PEM PRIVATE KEY block", ErrKey)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrKey, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%w: a %T", ErrKey, k)
	}
	return priv, nil
}

// Digest reads r to its end and returns its hex SHA-256 and length.
func Digest(r io.Reader) (string, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		return "", n, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// Sign returns the signature of release with SHA-256 sha256Hex, base64.
func Sign(priv ed25519.PrivateKey, release, sha256Hex string) string {
	return base64.StdEncoding.EncodeToString(ed25519.Sign(priv, client.ReleaseSigningMessage(release, strings.ToLower(sha256Hex))))
}

// Verify checks sig (base64, surrounding space ignored) over release and
// sha256Hex with pub.
func Verify(pub ed25519.PublicKey, release, sha256Hex, sig string) error {
	sig = strings.TrimSpace(sig)
	if sig == "" {
		return ErrNoSignature
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(sig)
	if err != nil || len(raw) != ed25519.SignatureSize {
		return fmt.Errorf("%w: not a base64 ed25519 signature", ErrSignature)
	}
	if !ed25519.Verify(pub, client.ReleaseSigningMessage(release, strings.ToLower(sha256Hex)), raw) {
		return ErrSignature
	}
	return nil
}

// Check verifies downloaded bytes against an update: the signature first
// (a frame without one is refused before its bytes matter), then the
// SHA-256 and, when the update states one, the size. gotSHA and gotSize
// are the bytes' own (Digest).
func Check(pub ed25519.PublicKey, u client.Update, gotSHA string, gotSize int64) error {
	if err := Verify(pub, u.Release, u.SHA256, u.Signature); err != nil {
		return err
	}
	if !strings.EqualFold(gotSHA, u.SHA256) {
		return fmt.Errorf("%w: got %s, announced %s", ErrDigest, gotSHA, u.SHA256)
	}
	if u.Size > 0 && gotSize != u.Size {
		return fmt.Errorf("%w: got %d bytes, announced %d", ErrSize, gotSize, u.Size)
	}
	return nil
}
