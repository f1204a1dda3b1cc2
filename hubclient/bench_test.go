package hubclient

import (
	"net/http"
	"testing"
	"time"

	"github.com/vk-ci/vk/reqsign"
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

// BenchmarkSignedRequestResumed measures the same signed no-op request
// on a fresh connection with a full handshake and on a connection that
// resumes the client's last TLS session, alternating the two in one run so
// that both see the same machine load: fresh-µs, resumed-µs and their
// ratio (fresh/resumed) per request.
func BenchmarkSignedRequestResumed(b *testing.B) {
	h := newFakeHub(b)
	h.fallback = &reply{status: http.StatusNoContent}
	resumed, err := New(Config{HubURL: h.srv.URL, CAPEM: h.caPEM, Key: h.key, Principal: principal})
	if err != nil {
		b.Fatal(err)
	}
	fresh, err := New(Config{HubURL: h.srv.URL, CAPEM: h.caPEM, Key: h.key, Principal: principal})
	if err != nil {
		b.Fatal(err)
	}
	fresh.http.Transport.(*reqsign.Transport).TLSConfig.ClientSessionCache = nil
	var tFresh, tResumed time.Duration
	for b.Loop() {
		t0 := time.Now()
		if err := fresh.Claim(b.Context(), "adm1"); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := resumed.Claim(b.Context(), "adm1"); err != nil {
			b.Fatal(err)
		}
		tFresh += t1.Sub(t0)
		tResumed += time.Since(t1)
	}
	n := float64(b.N)
	b.ReportMetric(tFresh.Seconds()*1e6/n, "fresh-µs")
	b.ReportMetric(tResumed.Seconds()*1e6/n, "resumed-µs")
	b.ReportMetric(float64(tFresh)/float64(tResumed), "fresh/resumed")
}

// BenchmarkDecodeError measures decoding an error body.
func BenchmarkDecodeError(b *testing.B) {
	body := []byte(`{"error":"queue full","code":"unavailable","retry_after_secs":3}`)
	for b.Loop() {
		DecodeError(503, nil, body)
	}
}
