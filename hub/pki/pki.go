// Package pki is the hub's self-made public key infrastructure: when the
// operator configures no certificate, the hub creates its own certificate
// authority and a serving certificate in its state directory on first start
// and reuses them afterwards. Relays and nodes pin that CA (`vk-gitlab join
// <hub-url> --ca FILE`, AUTH-08), whose SHA-256 fingerprint the hub prints so
// an operator can compare it out of band.
//
// Files, under the directory given to [Ensure] (the hub uses
// <state_dir>/pki; created mode 0700, files 0600):
//
//	ca.pem       the CA certificate (ECDSA P-256, 10 years)
//	ca.key       the CA private key, PKCS#8 PEM
//	server.pem   the serving certificate, signed by the CA (ECDSA P-256, 2 years)
//	server.key   its private key, PKCS#8 PEM
//
// ECDSA P-256 rather than ed25519 so that browsers (the operator web UI),
// curl and every TLS stack accept the chain. The serving certificate names
// the configured host names and addresses plus localhost, 127.0.0.1 and ::1.
// It is issued again from the same CA, at start, when it is missing, does not
// cover a configured name, or has less than 90 days left; the CA is never
// replaced once created (replacing it would strand every enrolled relay and
// node). A CA file without its key, or the reverse, is an error rather than
// silently replaced.
//
// [ServerConfig] and [ClientConfig] return TLS 1.3-only configurations
// (the client API is TLS 1.3, DESIGN "Decisions already taken").
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// File names inside the PKI directory.
const (
	CACertFile     = "ca.pem"
	CAKeyFile      = "ca.key"
	ServerCertFile = "server.pem"
	ServerKeyFile  = "server.key"
)

// Lifetimes and renewal threshold of the generated certificates.
const (
	CALifetime     = 10 * 365 * 24 * time.Hour
	ServerLifetime = 2 * 365 * 24 * time.Hour
	RenewBefore    = 90 * 24 * time.Hour
)

// ErrIncomplete is returned (wrapped) when the directory holds only part
// of a CA (certificate without key or the reverse): the hub refuses to
// start rather than mint a new CA its relays and nodes do not trust.
var ErrIncomplete = errors.New("pki: incomplete CA in state directory")

// ErrNoCA is returned (wrapped) by [ClientConfig] for PEM without any
// certificate.
var ErrNoCA = errors.New("pki: no CA certificate in PEM")

// Bundle is the hub's CA and serving certificate as loaded or created by
// [Ensure].
type Bundle struct {
	// CACertPEM is the CA certificate, PEM; what relays and nodes pin.
	CACertPEM []byte
	// CA is the parsed CA certificate.
	CA *x509.Certificate
	// Fingerprint is the lowercase hex SHA-256 of the CA certificate's DER,
	// for printing next to the CA ([FormatFingerprint] for colon form).
	Fingerprint string
	// Server is the serving certificate chain (leaf, then CA) with its key.
	Server tls.Certificate
	// CreatedCA reports whether this call created the CA (first start).
	CreatedCA bool
	// IssuedServer reports whether this call issued the serving certificate.
	IssuedServer bool
}

// Ensure loads the CA and serving certificate from dir, creating whatever
// is missing (see the package doc). names are the extra DNS names or IP
// addresses the serving certificate must cover; now is the current time.
func Ensure(dir string, names []string, now time.Time) (*Bundle, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	b := &Bundle{}
	caCert, caKey, created, err := loadOrCreateCA(dir, now)
	if err != nil {
		return nil, err
	}
	b.CA, b.CreatedCA = caCert, created
	b.CACertPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caCert.Raw})
	b.Fingerprint = Fingerprint(caCert.Raw)

	dns, ips := sans(names)
	leaf, leafKey, err := loadPair(filepath.Join(dir, ServerCertFile), filepath.Join(dir, ServerKeyFile))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if err != nil || !serverUsable(leaf, caCert, dns, ips, now) {
		leaf, leafKey, err = issueServer(caCert, caKey, dns, ips, now)
		if err != nil {
			return nil, err
		}
		if err := writePair(dir, ServerCertFile, ServerKeyFile, leaf, leafKey); err != nil {
			return nil, err
		}
		b.IssuedServer = true
	}
	b.Server = tls.Certificate{Certificate: [][]byte{leaf.Raw, caCert.Raw}, PrivateKey: leafKey, Leaf: leaf}
	return b, nil
}

// Fingerprint returns the lowercase hex SHA-256 of a certificate's DER.
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// FormatFingerprint writes a hex fingerprint as colon-separated upper-case
// byte pairs ("AB:CD:…"), as openssl prints it.
func FormatFingerprint(hexfp string) string {
	var b strings.Builder
	for i := 0; i+1 < len(hexfp); i += 2 {
		if i > 0 {
			b.WriteByte(':')
		}
		b.WriteString(strings.ToUpper(hexfp[i : i+2]))
	}
	return b.String()
}

// ServerConfig returns a TLS 1.3-only server configuration serving cert,
// offering HTTP/1.1 only (the client API and WebSocket sessions). It issues
// session tickets (crypto/tls rotates their keys itself), so a client with
// a session cache resumes instead of a full handshake on its per-request
// connections; a resumed connection has its own exporter, so a request
// signature stays bound to its connection (AUTH-14).
func ServerConfig(cert tls.Certificate) *tls.Config {
	return &tls.Config{
		MinVersion:             tls.VersionTLS13,
		Certificates:           []tls.Certificate{cert},
		NextProtos:             []string{"http/1.1"},
		SessionTicketsDisabled: false,
	}
}

// ClientConfig returns a TLS 1.3-only client configuration trusting only
// the CA certificates in caPEM (pinning; the system roots are not used).
// serverName may be empty to take it from the dialed address.
func ClientConfig(caPEM []byte, serverName string) (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, ErrNoCA
	}
	return &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool, ServerName: serverName}, nil
}

func sans(names []string) (dns []string, ips []net.IP) {
	all := append([]string{"localhost", "127.0.0.1", "::1"}, names...)
	for _, n := range all {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if ip := net.ParseIP(n); ip != nil {
			if !slices.ContainsFunc(ips, ip.Equal) {
				ips = append(ips, ip)
			}
		} else if !slices.Contains(dns, strings.ToLower(n)) {
			dns = append(dns, strings.ToLower(n))
		}
	}
	return dns, ips
}

func serverUsable(leaf, ca *x509.Certificate, dns []string, ips []net.IP, now time.Time) bool {
	if leaf.CheckSignatureFrom(ca) != nil || now.Add(RenewBefore).After(leaf.NotAfter) || now.Before(leaf.NotBefore) {
		return false
	}
	for _, d := range dns {
		if leaf.VerifyHostname(d) != nil {
			return false
		}
	}
	for _, ip := range ips {
		if !slices.ContainsFunc(leaf.IPAddresses, ip.Equal) {
			return false
		}
	}
	return true
}

func loadOrCreateCA(dir string, now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, bool, error) {
	certPath, keyPath := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	cert, key, err := loadPair(certPath, keyPath)
	if err == nil {
		if !cert.IsCA {
			return nil, nil, false, fmt.Errorf("pki: %s is not a CA certificate", certPath)
		}
		return cert, key, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, false, err
	}
	_, errC := os.Stat(certPath)
	_, errK := os.Stat(keyPath)
	if errC == nil || errK == nil {
		return nil, nil, false, fmt.Errorf("%w: %s and %s must both exist or both be absent", ErrIncomplete, certPath, keyPath)
	}
	key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, false, fmt.Errorf("pki: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "vk-hub CA", Organization: []string{"vk"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CALifetime),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, false, fmt.Errorf("pki: create CA: %w", err)
	}
	cert, err = x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, false, fmt.Errorf("pki: %w", err)
	}
	if err := writePair(dir, CACertFile, CAKeyFile, cert, key); err != nil {
		return nil, nil, false, err
	}
	return cert, key, true, nil
}

func issueServer(ca *x509.Certificate, caKey *ecdsa.PrivateKey, dns []string, ips []net.IP, now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: %w", err)
	}
	notAfter := now.Add(ServerLifetime)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "vk-hub", Organization: []string{"vk"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: issue server certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: %w", err)
	}
	return cert, key, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return n.Add(n, big.NewInt(1))
}

// loadPair reads a PEM certificate and its ECDSA key (tls.LoadX509KeyPair:
// it checks that they match). An error wrapping fs.ErrNotExist means at
// least one file is absent; the caller tells "both absent" from "one
// absent".
func loadPair(certPath, keyPath string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: %s, %s: %w", certPath, keyPath, err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil, fmt.Errorf("pki: %s: key type %T, want ECDSA", keyPath, pair.PrivateKey)
	}
	return pair.Leaf, key, nil
}

// writePair writes the key first, then the certificate, each atomically
// (temporary file, sync, rename), mode 0600.
func writePair(dir, certName, keyName string, cert *x509.Certificate, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	if err := writeAtomic(dir, keyName, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})); err != nil {
		return err
	}
	return writeAtomic(dir, certName, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}))
}

func writeAtomic(dir, name string, data []byte) error {
	f, err := os.CreateTemp(dir, "."+name+"-*")
	if err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o600)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		return fmt.Errorf("pki: write %s: %w", name, err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
