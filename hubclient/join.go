package hubclient

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/reqsign"
)

// RouteJoin is the hub's enrolment endpoint, served by hub/enrol (the
// route and its bodies are in proto/client).
const RouteJoin = client.RouteJoin

// Principal kinds a token enrols (the values of hub/store.PrincipalKind).
const (
	KindGitLab = client.KindGitLab // a relay, vk-gitlab
	KindNode   = client.KindNode   // a node, vk node
)

// JoinResult is what a successful [Join] learnt.
type JoinResult struct {
	// ID is the principal ID the hub assigned.
	ID string
	// CAPEM is the CA to pin from now on: the caPEM given to Join, or, on
	// first use, the CA the hub presented (which equals the one it
	// answered).
	CAPEM []byte
	// CAFingerprint is the lowercase hex SHA-256 of the CA certificate's
	// DER — what `vk-hub` prints at start, for the operator to compare.
	CAFingerprint string
	// TOFU reports that no CA was given: the hub's CA was trusted on first
	// use, and the caller must show CAFingerprint to the operator.
	TOFU bool
}

// Sentinel errors of enrolment.
var (
	// ErrUntrustedCA: on first use, the hub's handshake did not end in a
	// self-signed CA certifying its serving certificate, or the CA it
	// answered is not the one it presented.
	ErrUntrustedCA = errors.New("hubclient: hub CA not trustworthy")
)

// Join enrols with the hub at hubURL using a one-time token (AUTH-08): it
// makes a new ed25519 key, sends its public half with name and kind over
// TLS 1.3, and returns the assigned ID, the CA to pin and the key. The
// request is not signed; the token authenticates it.
//
// With caPEM, the hub must present a certificate chaining to it (`--ca
// FILE`), and that CA is what the result pins. Without (nil), the CA is
// trusted on first use: the chain the hub presents must end in a
// self-signed CA that certifies the serving certificate for the URL's
// host, the hub's answer must name that same CA, and JoinResult.TOFU is
// set so the caller prints the fingerprint for the operator to compare
// with the one vk-hub printed. Error answers are [*client.StatusError]
// (errors.As); a used, expired, unknown or wrong-kind token is 401.
func Join(ctx context.Context, hubURL, token string, caPEM []byte, name, kind string) (JoinResult, ed25519.PrivateKey, error) {
	u, err := parseHubURL(hubURL)
	if err != nil {
		return JoinResult{}, nil, err
	}
	key, err := reqsign.GenerateKey()
	if err != nil {
		return JoinResult{}, nil, err
	}
	var (
		tcfg *tls.Config
		seen []byte // DER of the CA presented, on first use
	)
	if caPEM != nil {
		if tcfg, err = tlsConfig(caPEM, ""); err != nil {
			return JoinResult{}, nil, err
		}
	} else {
		host := u.Hostname()
		tcfg = &tls.Config{
			MinVersion:         tls.VersionTLS13,
			InsecureSkipVerify: true, // replaced by VerifyConnection: trust on first use
			VerifyConnection: func(cs tls.ConnectionState) error {
				ca, err := firstUseCA(cs.PeerCertificates, host)
				if err != nil {
					return err
				}
				seen = ca.Raw
				return nil
			},
		}
	}
	body, _ := json.Marshal(client.JoinRequest{Token: token, PublicKey: base64.StdEncoding.EncodeToString(key.Public().(ed25519.PublicKey)),
		Name: name, Kind: kind})
	ju := *u
	ju.Path, ju.RawPath = u.Path+"/v1/join", ""
	ctx, cancel := context.WithTimeout(ctx, DefaultTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ju.String(), bytes.NewReader(body))
	if err != nil {
		return JoinResult{}, nil, fmt.Errorf("hubclient: join: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	hc := &http.Client{
		Transport: &http.Transport{TLSClientConfig: tcfg, DisableKeepAlives: true, ForceAttemptHTTP2: false,
			DialContext:  (&net.Dialer{Timeout: 30 * time.Second}).DialContext,
			TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := hc.Do(req)
	if err != nil {
		return JoinResult{}, nil, fmt.Errorf("hubclient: join %s: %w%s", u.Host, err, hostnameHint(err, u.Hostname()))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return JoinResult{}, nil, fmt.Errorf("hubclient: join: read answer: %w", err)
	}
	a := &answer{status: resp.StatusCode, header: resp.Header, body: b}
	if err := a.expect("join", http.StatusCreated); err != nil {
		return JoinResult{}, nil, err
	}
	var jr client.JoinResponse
	if err := a.decode("join", &jr); err != nil {
		return JoinResult{}, nil, err
	}
	if jr.ID == "" {
		return JoinResult{}, nil, fmt.Errorf("%w: join: answer without an ID", ErrProtocol)
	}
	res := JoinResult{ID: jr.ID}
	if caPEM != nil {
		res.CAPEM = caPEM
		if der := firstCert(caPEM); der != nil {
			res.CAFingerprint = Fingerprint(der)
		}
		return res, key, nil
	}
	if der := firstCert([]byte(jr.CAPEM)); der == nil || !bytes.Equal(der, seen) {
		return JoinResult{}, nil, fmt.Errorf("%w: the CA the hub answered is not the one it presented", ErrUntrustedCA)
	}
	res.CAPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: seen})
	res.CAFingerprint = Fingerprint(seen)
	res.TOFU = true
	return res, key, nil
}

// hostnameHint says what to do when the hub's certificate does not name
// the host the join dialled ("" for any other error): a hub with its
// self-made certificate covers only its addr's host, localhost and the
// loopback addresses unless tls.names lists more.
func hostnameHint(err error, host string) string {
	var he x509.HostnameError
	if !errors.As(err, &he) {
		return ""
	}
	return fmt.Sprintf(" (the hub's certificate does not name %q: add it to tls.names in the hub's hub.toml and restart the hub; "+
		"its self-made certificate is then issued again from the same CA, so nothing that joined must join again)", host)
}

// firstUseCA checks a presented chain (leaf first) on first use: its last
// certificate is a self-signed CA, and the leaf verifies against it for
// host. It returns that CA.
func firstUseCA(chain []*x509.Certificate, host string) (*x509.Certificate, error) {
	if len(chain) < 2 {
		return nil, fmt.Errorf("%w: the hub presented %d certificate(s); want its serving certificate and CA", ErrUntrustedCA, len(chain))
	}
	ca := chain[len(chain)-1]
	if !ca.IsCA || ca.CheckSignatureFrom(ca) != nil {
		return nil, fmt.Errorf("%w: the last certificate presented is not a self-signed CA", ErrUntrustedCA)
	}
	roots, inter := x509.NewCertPool(), x509.NewCertPool()
	roots.AddCert(ca)
	for _, c := range chain[1 : len(chain)-1] {
		inter.AddCert(c)
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: host}); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUntrustedCA, err)
	}
	return ca, nil
}

// firstCert returns the DER of the first certificate in PEM, or nil.
func firstCert(p []byte) []byte {
	for {
		var blk *pem.Block
		blk, p = pem.Decode(p)
		if blk == nil {
			return nil
		}
		if blk.Type == "CERTIFICATE" {
			return blk.Bytes
		}
	}
}

// Fingerprint returns the lowercase hex SHA-256 of a certificate's DER
// (the same form hub/pki prints).
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}
