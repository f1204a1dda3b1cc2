package hubclient

import (
	"net/http"
	"testing"
)

// BenchmarkSignedRequest measures one client API request end to end: a
// new TCP + TLS 1.3 connection, signing, the server's verification, the
// answer (AUTH-14's price per request).
func BenchmarkSignedRequest(b *testing.B) {
	h := newFakeHub(b)
	h.fallback = &reply{status: http.StatusNoContent}
	c, err := New(Config{HubURL: h.srv.URL, CAPEM: h.caPEM, Key: h.key, Principal: principal})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := c.Claim(b.Context(), "adm1"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeError measures decoding an error body.
func BenchmarkDecodeError(b *testing.B) {
	body := []byte(`{"error":"queue full","code":"unavailable","retry_after_secs":3}`)
	for b.Loop() {
		DecodeError(503, nil, body)
	}
}
