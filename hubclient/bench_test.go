package hubclient

import (
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/vk-ci/vk/reqsign"
)

// BenchmarkSignedRequest measures one client API request end to end as
// the client makes it: signing over the kept connection's exporter, the
// server's verification, the answer (the connection is reused, AUTH-14).
func BenchmarkSignedRequest(b *testing.B) {
	h := newFakeHub(b)
	h.fallback = &reply{status: http.StatusNoContent}
	c, err := New(Config{HubURL: h.srv.URL, CAPEM: h.caPEM, Key: h.key, Principal: principal})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.CloseIdleConnections)
	for b.Loop() {
		if err := c.Claim(b.Context(), "adm1"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSignedRequestResumed measures the same signed no-op request
// three ways: on a fresh connection with a full handshake, on a new
// connection that resumes the client's last TLS session, and on a kept
// connection (the client's default), alternating blocks of the three in
// one run so that all see the same machine load. It reports wall time and
// the process's CPU time (client and hub side together, which a busy
// machine distorts far less) per request for each, and the ratios to the
// kept connection.
func BenchmarkSignedRequestResumed(b *testing.B) {
	h := newFakeHub(b)
	h.fallback = &reply{status: http.StatusNoContent}
	mk := func(maxIdle int, cache bool) *Client {
		c, err := New(Config{HubURL: h.srv.URL, CAPEM: h.caPEM, Key: h.key, Principal: principal, MaxIdleConns: maxIdle})
		if err != nil {
			b.Fatal(err)
		}
		if !cache {
			c.http.Transport.(*reqsign.Pool).TLSConfig.ClientSessionCache = nil
		}
		b.Cleanup(c.CloseIdleConnections)
		return c
	}
	clients := [3]*Client{mk(-1, false), mk(-1, true), mk(0, true)} // fresh, resumed, kept
	const block = 10
	var wall, cpu [3]time.Duration
	var n [3]int
	i := 0
	for b.Loop() {
		k := i / block % 3
		w0, c0 := time.Now(), cpuTime(b)
		if err := clients[k].Claim(b.Context(), "adm1"); err != nil {
			b.Fatal(err)
		}
		wall[k] += time.Since(w0)
		cpu[k] += cpuTime(b) - c0
		n[k]++
		i++
	}
	if n[0] == 0 || n[1] == 0 || n[2] == 0 {
		return // too few iterations to compare
	}
	per := func(d time.Duration, n int) float64 { return d.Seconds() * 1e6 / float64(n) }
	for k, name := range []string{"fresh", "resumed", "kept"} {
		b.ReportMetric(per(wall[k], n[k]), name+"-µs")
		b.ReportMetric(per(cpu[k], n[k]), name+"-cpu-µs")
	}
	b.ReportMetric(per(cpu[0], n[0])/per(cpu[2], n[2]), "cpu-fresh/kept")
	b.ReportMetric(per(cpu[1], n[1])/per(cpu[2], n[2]), "cpu-resumed/kept")
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
