// Package regtoken mints job registry tokens: Docker registry bearer
// tokens (JSON Web Tokens as CNCF distribution's token authentication
// verifies them) that let one job push and pull its own cache repository
// on its node's registry, and nothing else (XFER-13, XFER-17).
//
// The hub holds one signing key per registry it mints for ([Config]); the
// registry trusts the key's certificate (auth.token.rootcertbundle). A
// token is minted when the hub builds a job's start frame and lives only
// in that frame: the hub stores no token, in any form. A start sent again
// after a restart or a failover gets a new one.
//
// A token's header carries the signing certificate's chain ("x5c"),
// which distribution 2.8 verifies against its root bundle; its claims are
// iss (the registry's issuer), sub (the hub's job ID), aud (the
// registry's service, a single string: distribution 2.8 refuses a list),
// exp, nbf, iat, a random jti, and access: one grant of pull and push on
// the job's repository. Signatures are ES256/ES384/ES512 for ECDSA keys
// and RS256 for RSA keys, the algorithms distribution 2.8 verifies; they
// are made with the standard library.
package regtoken

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/vk-ci/vk/internal/cacherepo"
)

// Minter mints tokens for the registries it was made with. It is safe
// for concurrent use; its zero value mints nothing.
type Minter struct {
	regs []*signer
}

// signer is one registry's configuration with its key and chain loaded.
type signer struct {
	cfg  Config
	url  string // normalURL(cfg.URL)
	key  crypto.Signer
	alg  string
	hash crypto.Hash
	x5c  []string // DER certificates, base64 (standard, padded)
}

// New loads each registry's key and certificate files. An error names
// the registry (registries[i]) and the key of the file at fault, wrapping
// [ErrConfig]. No registries give a Minter that mints nothing.
func New(cfgs []Config) (*Minter, error) {
	m := &Minter{}
	var errs []error
	seen := map[string]int{}
	for i, c := range cfgs {
		if err := c.Validate(i); err != nil {
			errs = append(errs, err)
			continue
		}
		s, err := load(i, c)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if j, dup := seen[s.url]; dup {
			errs = append(errs, fmt.Errorf("%w: registries[%d].url: %q is registries[%d]'s too", ErrConfig, i, c.URL, j))
			continue
		}
		seen[s.url] = i
		m.regs = append(m.regs, s)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return m, nil
}

func load(i int, c Config) (*signer, error) {
	bad := func(key string, err error) error {
		return fmt.Errorf("%w: registries[%d].%s: %w", ErrConfig, i, key, err)
	}
	u, _ := normalURL(c.URL) // Validate checked it
	key, err := readKey(c.KeyFile)
	if err != nil {
		return nil, bad("key_file", err)
	}
	chain, err := readChain(c.CertFile)
	if err != nil {
		return nil, bad("cert_file", err)
	}
	if !samePublic(chain[0].PublicKey, key.Public()) {
		return nil, bad("cert_file", fmt.Errorf("%s: its first certificate is not key_file's key's", c.CertFile))
	}
	alg, hash, err := algorithm(key)
	if err != nil {
		return nil, bad("key_file", err)
	}
	s := &signer{cfg: c, url: u, key: key, alg: alg, hash: hash}
	for _, cert := range chain {
		s.x5c = append(s.x5c, base64.StdEncoding.EncodeToString(cert.Raw))
	}
	return s, nil
}

func readKey(path string) (crypto.Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	for rest := b; ; {
		var blk *pem.Block
		if blk, rest = pem.Decode(rest); blk == nil {
			return nil, fmt.Errorf("%s: no private key in PEM", path)
		}
		var k any
		switch blk.Type {
		case "PRIVATE KEY":
			k, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
		case "EC PRIVATE KEY":
			k, err = x509.ParseECPrivateKey(blk.Bytes)
		case "RSA PRIVATE KEY":
			k, err = x509.ParsePKCS1PrivateKey(blk.Bytes)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		s, ok := k.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("%s: a %T cannot sign", path, k)
		}
		return s, nil
	}
}

func readChain(path string) ([]*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var chain []*x509.Certificate
	for rest := b; ; {
		var blk *pem.Block
		if blk, rest = pem.Decode(rest); blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		chain = append(chain, c)
	}
	if len(chain) == 0 {
		return nil, fmt.Errorf("%s: no certificate in PEM", path)
	}
	return chain, nil
}

func samePublic(a, b crypto.PublicKey) bool {
	k, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && k.Equal(b)
}

// algorithm is the JOSE algorithm distribution 2.8 verifies for key.
func algorithm(key crypto.Signer) (string, crypto.Hash, error) {
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		switch k.Curve {
		case elliptic.P256():
			return "ES256", crypto.SHA256, nil
		case elliptic.P384():
			return "ES384", crypto.SHA384, nil
		case elliptic.P521():
			return "ES512", crypto.SHA512, nil
		}
		return "", 0, fmt.Errorf("ECDSA curve %s: want P-256, P-384 or P-521", k.Curve.Params().Name)
	case *rsa.PrivateKey:
		if k.N.BitLen() < 2048 {
			return "", 0, fmt.Errorf("RSA key of %d bits: want at least 2048", k.N.BitLen())
		}
		return "RS256", crypto.SHA256, nil
	}
	return "", 0, fmt.Errorf("a %T key: want ECDSA or RSA (what the registry verifies)", key)
}

// Job is what a token is minted for.
type Job struct {
	// ID is the hub's job ID: the token's subject.
	ID string
	// GitLabURL, ProjectID and Protected name the job's cache repository
	// (XFER-07, XFER-13).
	GitLabURL string
	ProjectID int64
	Protected bool
	// Timeout is the job's timeout; 0 means unknown.
	Timeout time.Duration
}

// Token is a minted job registry token with what it grants.
type Token struct {
	// Repository is the absolute repository the token grants pull and
	// push on.
	Repository string
	// Bearer is the signed token. A secret.
	Bearer string
	// Lifetime is how long from its minting the token is valid.
	Lifetime time.Duration
}

// String names the token's grant and lifetime, never the bearer token.
func (t Token) String() string {
	return fmt.Sprintf("registry token for %s, %s", t.Repository, t.Lifetime)
}

// LogValue logs a token as [Token.String]: the bearer token never
// reaches a log.
func (t Token) LogValue() slog.Value { return slog.StringValue(t.String()) }

// Minting reports whether m mints for the registry at registryURL (a
// node's reported [registry] url).
func (m *Minter) Minting(registryURL string) bool { return m.find(registryURL) != nil }

func (m *Minter) find(registryURL string) *signer {
	if m == nil || registryURL == "" {
		return nil
	}
	u, err := normalURL(registryURL)
	if err != nil {
		return nil
	}
	for _, s := range m.regs {
		if s.url == u {
			return s
		}
	}
	return nil
}

// ErrNoRegistry is returned by [Minter.Mint] for a registry URL that no
// configured registry matches.
var ErrNoRegistry = errors.New("regtoken: no configured registry matches")

// Mint signs a token valid from now for job's cache repository on the
// registry at registryURL. It fails with [ErrNoRegistry] when no
// configured registry matches registryURL, and with
// cacherepo.ErrBadRepository when the job's GitLab URL names no
// repository.
func (m *Minter) Mint(now time.Time, registryURL string, job Job) (Token, error) {
	s := m.find(registryURL)
	if s == nil {
		return Token{}, fmt.Errorf("%w: %q", ErrNoRegistry, registryURL)
	}
	repo, err := cacherepo.JobRepository(s.cfg.RepositoryPrefix, job.GitLabURL, job.ProjectID, job.Protected)
	if err != nil {
		return Token{}, err
	}
	life := s.cfg.Lifetime(job.Timeout)
	bearer, err := s.sign(now, life, job.ID, repo)
	if err != nil {
		return Token{}, err
	}
	return Token{Repository: repo, Bearer: bearer, Lifetime: life}, nil
}

// access is one grant of a token's "access" claim.
type access struct {
	Type    string   `json:"type"`
	Name    string   `json:"name"`
	Actions []string `json:"actions"`
}

// claims are a token's claims as distribution 2.8 decodes them.
type claims struct {
	Issuer    string   `json:"iss"`
	Subject   string   `json:"sub"`
	Audience  string   `json:"aud"`
	Expires   int64    `json:"exp"`
	NotBefore int64    `json:"nbf"`
	IssuedAt  int64    `json:"iat"`
	ID        string   `json:"jti"`
	Access    []access `json:"access"`
}

type header struct {
	Type string   `json:"typ"`
	Alg  string   `json:"alg"`
	X5c  []string `json:"x5c"`
}

func (s *signer) sign(now time.Time, life time.Duration, subject, repo string) (string, error) {
	var jti [16]byte
	rand.Read(jti[:])
	h, err := json.Marshal(header{Type: "JWT", Alg: s.alg, X5c: s.x5c})
	if err != nil {
		return "", err
	}
	c, err := json.Marshal(claims{Issuer: s.cfg.Issuer, Subject: subject, Audience: s.cfg.Service,
		Expires: now.Add(life).Unix(), NotBefore: now.Unix(), IssuedAt: now.Unix(), ID: hex.EncodeToString(jti[:]),
		Access: []access{{Type: "repository", Name: repo, Actions: []string{"pull", "push"}}}})
	if err != nil {
		return "", err
	}
	enc := base64.RawURLEncoding
	input := enc.EncodeToString(h) + "." + enc.EncodeToString(c)
	sig, err := s.signature([]byte(input))
	if err != nil {
		return "", fmt.Errorf("regtoken: sign: %w", err)
	}
	return input + "." + enc.EncodeToString(sig), nil
}

// signature is the JWS signature of input: for ECDSA the fixed-size
// r || s the JWS format wants (not ASN.1), for RSA PKCS #1 v1.5.
func (s *signer) signature(input []byte) ([]byte, error) {
	var digest []byte
	switch s.hash {
	case crypto.SHA256:
		d := sha256.Sum256(input)
		digest = d[:]
	case crypto.SHA384:
		d := sha512.Sum384(input)
		digest = d[:]
	default:
		d := sha512.Sum512(input)
		digest = d[:]
	}
	switch k := s.key.(type) {
	case *ecdsa.PrivateKey:
		r, sv, err := ecdsa.Sign(rand.Reader, k, digest)
		if err != nil {
			return nil, err
		}
		size := (k.Curve.Params().BitSize + 7) / 8
		out := make([]byte, 2*size)
		r.FillBytes(out[:size])
		sv.FillBytes(out[size:])
		return out, nil
	case *rsa.PrivateKey:
		return rsa.SignPKCS1v15(rand.Reader, k, s.hash, digest)
	}
	return nil, fmt.Errorf("a %T key", s.key)
}
