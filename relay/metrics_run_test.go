package relay

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/realhub"
)

// `vk-gitlab run` with metrics_listen serves /metrics while it works: a
// job taken from GitLab and running shows as the runner's held job, and
// the verify and job request calls are counted by endpoint and status.
func TestRunServesMetrics(t *testing.T) {
	e := newRunEnvWith(t, 3600, realhub.AutoClock(t), gitlabfake.Options{}, realhub.Options{NodeCPUs: 1})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.cfg.MetricsListen = ln.Addr().String()
	ln.Close() // Run listens on it again
	glID := e.pipeline(t, e.waitLine("end"))
	e.start(t) // stopped by its cleanup
	id := e.hub.OnlyJob(t)
	if _, err := e.gl.WaitJobState(t.Context(), glID, gitlabfake.StateRunning); err != nil {
		t.Fatal(err)
	}
	// The job is held and submitted once the loop asks for its next
	// ticket; the listener was up before the request loops started.
	e.hub.WaitFor(t, "a ticket waiting", func() bool { return len(e.hub.Tickets) > 0 })
	out := scrapeRelay(t, e.cfg.MetricsListen)
	for _, want := range []string{
		`vk_gitlab_jobs{runner="r1"} 1` + "\n",
		`vk_gitlab_jobs_by_phase{phase="committed",runner="r1"} 1` + "\n",
		`vk_gitlab_job_queue_seconds_count{runner="r1"} 1` + "\n",
		`vk_gitlab_api_requests_total{endpoint="verify_runner",status="200"} 1` + "\n",
		`vk_gitlab_api_requests_total{endpoint="request_job",status="201"} 1` + "\n",
		`vk_gitlab_request_concurrency_limit{runner="r1"} 1` + "\n",
		`vk_gitlab_concurrent 10` + "\n",
		`vk_gitlab_build_info{`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(out)
	}
	e.release(t, "end")
	if _, err := e.gl.WaitJobState(t.Context(), glID, gitlabfake.StateSuccess); err != nil {
		t.Fatal(err)
	}
	// The duration is observed before the job is settled.
	e.hub.WaitFor(t, "the job settled", func() bool { return e.hub.Settled[id] > 0 })
	if out := scrapeRelay(t, e.cfg.MetricsListen); !strings.Contains(out, `vk_gitlab_job_duration_seconds_count{outcome="success",runner="r1"} 1`+"\n") {
		t.Errorf("/metrics after the job lacks its duration:\n%s", out)
	}
}

func scrapeRelay(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return string(b)
}
