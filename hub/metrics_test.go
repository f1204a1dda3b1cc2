package hub

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/proto/dispatch"
)

// scrape GETs the metrics handler as Prometheus would (text format).
func scrape(t *testing.T, h http.Handler) string {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/metrics", nil)
	req.Header.Set("Accept", "text/plain")
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape = %d", rec.Code)
	}
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

func TestMetricsExposition(t *testing.T) {
	m := newMetrics()
	m.observe("GET /v1/jobs/{id}", 200, 30*time.Millisecond)
	m.observe("GET /v1/jobs/{id}", 200, 3*time.Second)
	m.add("vk_hub_jobs_finished_total", 1, "failure", `we"ird\`)
	m.set("vk_hub_nodes_connected", 3)
	out := scrape(t, m)
	for _, want := range []string{
		"# TYPE vk_hub_requests_total counter\n",
		`vk_hub_requests_total{code="200",route="GET /v1/jobs/{id}"} 2` + "\n",
		`vk_hub_request_seconds_bucket{route="GET /v1/jobs/{id}",le="0.1"} 1` + "\n",
		`vk_hub_request_seconds_bucket{route="GET /v1/jobs/{id}",le="10"} 2` + "\n",
		`vk_hub_request_seconds_bucket{route="GET /v1/jobs/{id}",le="+Inf"} 2` + "\n",
		`vk_hub_request_seconds_count{route="GET /v1/jobs/{id}"} 2` + "\n",
		`vk_hub_jobs_finished_total{failure="we\"ird\\"} 1` + "\n",
		"vk_hub_nodes_connected 3\n",
		"vk_hub_grants_total 0\n",
		"go_goroutines ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("exposition lacks %q:\n%s", want, out)
		}
	}
}

// TestMetricsScrapeLiveHub scrapes a running hub over TLS: the driver's
// counters, the collected job gauges and queue depth, the output log's.
func TestMetricsScrapeLiveHub(t *testing.T) {
	h := newHarness(t)
	h.relayUp(1)
	h.nodeUp(dispatch.Held{})
	v := h.submitOn(h.claimed(), 71)
	expectFrame[dispatch.Start](h)
	h.nodeSay(&dispatch.JobUpdate{Job: v.ID, State: dispatch.JobAccepted})
	h.nodeSay(&dispatch.Output{Job: v.ID, Offset: 0, Data: []byte("hello")})
	expectFrame[dispatch.OutputAck](h)
	h.reserveFor("r2")
	code, body, _ := h.call("GET", "/metrics", nil)
	if code != http.StatusOK {
		t.Fatalf("GET /metrics = %d", code)
	}
	out := string(body)
	for _, want := range []string{
		"vk_hub_grants_total 1\n",
		"vk_hub_tickets_total 2\n",
		"vk_hub_nodes_connected 1\n",
		"vk_hub_relays_connected 1\n",
		`vk_hub_jobs{state="running"} 1` + "\n",
		"vk_hub_output_appends_total 1\n",
		"vk_hub_output_syncs_total 1\n",
		"vk_hub_output_live_bytes 5\n",
		`vk_hub_queue_depth{class="jobs"} 0` + "\n",
		`vk_hub_requests_total{code="201",route="POST /v1/jobs"} 1` + "\n",
		"vk_hub_decision_seconds_count ",
		`vk_hub_wait_seconds_count{kind="ticket",size="2"} 1` + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("scrape lacks %q:\n%s", want, out)
		}
	}
}

// BenchmarkMetricsStep is the metrics cost the driver pays per core step
// (one histogram observation) and per answered request (a counter and a
// histogram with labels).
func BenchmarkMetricsStep(b *testing.B) {
	m := newMetrics()
	b.Run("decision", func(b *testing.B) {
		for b.Loop() {
			m.observeHist("vk_hub_decision_seconds", 3e-6)
		}
	})
	b.Run("request", func(b *testing.B) {
		for b.Loop() {
			m.observe("POST /v1/reservations", 202, time.Millisecond)
		}
	})
}
