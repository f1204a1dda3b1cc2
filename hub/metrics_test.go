package hub

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestMetricsExposition(t *testing.T) {
	m := newMetrics()
	m.observe("GET /v1/jobs/{id}", 200, 30*time.Millisecond)
	m.observe("GET /v1/jobs/{id}", 200, 3*time.Second)
	m.add("vk_hub_jobs_finished_total", 1, "failure", `we"ird\`)
	m.set("vk_hub_nodes_connected", 3)
	var b bytes.Buffer
	m.write(&b)
	out := b.String()
	for _, want := range []string{
		"# TYPE vk_hub_requests_total counter\n",
		`vk_hub_requests_total{route="GET /v1/jobs/{id}",code="200"} 2` + "\n",
		`vk_hub_request_seconds_bucket{route="GET /v1/jobs/{id}",le="0.1"} 1` + "\n",
		`vk_hub_request_seconds_bucket{route="GET /v1/jobs/{id}",le="10"} 2` + "\n",
		`vk_hub_request_seconds_bucket{route="GET /v1/jobs/{id}",le="+Inf"} 2` + "\n",
		`vk_hub_request_seconds_count{route="GET /v1/jobs/{id}"} 2` + "\n",
		`vk_hub_jobs_finished_total{failure="we\"ird\\"} 1` + "\n",
		"vk_hub_nodes_connected 3\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("exposition lacks %q:\n%s", want, out)
		}
	}
}
