package regtoken

import (
	"crypto/rand"
	"crypto/rsa"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/registrytest"
)

// BenchmarkMint is what minting adds to building one start frame, per
// key kind: the repository name, the claims' JSON and the signature.
func BenchmarkMint(b *testing.B) {
	ecKey, ecCert := registrytest.SigningKey(b)
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		b.Fatal(err)
	}
	rsaKey, rsaCert := writeKeyCertTB(b, b.TempDir(), rk, rk.Public())
	job := Job{ID: "j-1", GitLabURL: "https://gitlab.example.com/group", ProjectID: 42, Protected: true, Timeout: time.Hour}
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	for _, kc := range []struct{ name, key, cert string }{{"ES256", ecKey, ecCert}, {"RS256", rsaKey, rsaCert}} {
		m, err := New([]Config{{URL: "https://registry.example.com", Service: "s", Issuer: "i", KeyFile: kc.key, CertFile: kc.cert}})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(kc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := m.Mint(now, "https://registry.example.com", job); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
