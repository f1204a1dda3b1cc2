package hubclient

import (
	"net/http"
	"syscall"
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
// resumes the client's last TLS session, alternating blocks of the two in
// one run so that both see the same machine load. It reports wall time
// and the process's CPU time (client and hub side together, which a busy
// machine distorts far less) per request for each, and the ratios
// fresh/resumed.
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
	const block = 10
	var wall, cpu [2]time.Duration
	var n [2]int
	i := 0
	for b.Loop() {
		k := i / block % 2 // 0 fresh, 1 resumed
		c := fresh
		if k == 1 {
			c = resumed
		}
		w0, c0 := time.Now(), cpuTime(b)
		if err := c.Claim(b.Context(), "adm1"); err != nil {
			b.Fatal(err)
		}
		wall[k] += time.Since(w0)
		cpu[k] += cpuTime(b) - c0
		n[k]++
		i++
	}
	if n[0] == 0 || n[1] == 0 {
		return // too few iterations to compare
	}
	per := func(d time.Duration, n int) float64 { return d.Seconds() * 1e6 / float64(n) }
	b.ReportMetric(per(wall[0], n[0]), "fresh-µs")
	b.ReportMetric(per(wall[1], n[1]), "resumed-µs")
	b.ReportMetric(per(wall[0], n[0])/per(wall[1], n[1]), "wall-fresh/resumed")
	b.ReportMetric(per(cpu[0], n[0]), "fresh-cpu-µs")
	b.ReportMetric(per(cpu[1], n[1]), "resumed-cpu-µs")
	b.ReportMetric(per(cpu[0], n[0])/per(cpu[1], n[1]), "cpu-fresh/resumed")
}

// cpuTime is the process's user plus system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDecodeError measures decoding an error body.
func BenchmarkDecodeError(b *testing.B) {
	body := []byte(`{"error":"queue full","code":"unavailable","retry_after_secs":3}`)
	for b.Loop() {
		DecodeError(503, nil, body)
	}
}
