package relay

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/relay/loop"
	"github.com/vk-ci/vk/relay/state"
)

// stubDoer answers every request with status, or err when set.
type stubDoer struct {
	status int
	err    error
}

func (d stubDoer) Do(req *http.Request) (*http.Response, error) {
	if d.err != nil {
		return nil, d.err
	}
	return &http.Response{StatusCode: d.status, Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
}

func scrape(t *testing.T, m *relayMetrics) string {
	t.Helper()
	w := httptest.NewRecorder()
	m.handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	if w.Code != http.StatusOK {
		t.Fatalf("GET /metrics = %d", w.Code)
	}
	return w.Body.String()
}

// The relay's /metrics counts GitLab API calls by endpoint and status and
// failures by kind, and shows each runner's jobs, request loops in use
// against its limit, tickets and state from the heartbeat, and build info.
func TestRelayMetricsScrape(t *testing.T) {
	m := newRelayMetrics(10)
	m.watch(func() client.RelayHeartbeat {
		return client.RelayHeartbeat{Runners: []client.RunnerHeartbeat{
			{Name: "docker", State: client.RunnerPolling, RequestAdmissions: []string{"a1", "a2"}, Tickets: []string{"t1"},
				JobAdmissions: []client.JobAdmission{{GitLabJob: 7}, {GitLabJob: 8}, {GitLabJob: 9}}},
			{Name: "arm", State: client.RunnerTokenRefused},
		}}
	}, map[string]int{"docker": 4, "arm": 1})
	m.watchPhases(func() map[string]map[state.Phase]int {
		return map[string]map[state.Phase]int{"docker": {state.PhaseCommitted: 2, state.PhaseSubmitted: 1}, "arm": {}}
	})
	o := m.observer()
	o.JobStarted("docker", 42*time.Second)
	o.JobReported("docker", loop.OutcomeSuccess, 10*time.Minute)
	o.JobReported("docker", loop.OutcomeFailed, 3*time.Second)
	send := func(d stubDoer, method, path string) {
		req := httptest.NewRequest(method, "https://gitlab.example.com"+path, nil)
		resp, err := m.doer(d).Do(req)
		if err == nil {
			resp.Body.Close()
		}
	}
	send(stubDoer{status: 201}, "POST", "/api/v4/jobs/request")
	send(stubDoer{status: 204}, "POST", "/api/v4/jobs/request")
	send(stubDoer{status: 204}, "POST", "/api/v4/jobs/request")
	send(stubDoer{status: 200}, "PUT", "/api/v4/jobs/42")
	send(stubDoer{status: 202}, "PATCH", "/api/v4/jobs/42/trace")
	send(stubDoer{status: 403}, "POST", "/gl/api/v4/runners/verify")
	send(stubDoer{status: 429}, "POST", "/api/v4/jobs/request")
	send(stubDoer{status: 502}, "PUT", "/api/v4/jobs/42")
	send(stubDoer{err: errors.New("connection refused")}, "PATCH", "/api/v4/jobs/42/trace")
	send(stubDoer{status: 200}, "GET", "/api/v4/projects/1")
	out := scrape(t, m)
	for _, want := range []string{
		`vk_gitlab_api_requests_total{endpoint="request_job",status="201"} 1`,
		`vk_gitlab_api_requests_total{endpoint="request_job",status="204"} 2`,
		`vk_gitlab_api_requests_total{endpoint="update_job",status="200"} 1`,
		`vk_gitlab_api_requests_total{endpoint="patch_trace",status="202"} 1`,
		`vk_gitlab_api_requests_total{endpoint="verify_runner",status="403"} 1`,
		`vk_gitlab_api_requests_total{endpoint="patch_trace",status="error"} 1`,
		`vk_gitlab_api_requests_total{endpoint="other",status="200"} 1`,
		`vk_gitlab_api_request_seconds_count{endpoint="request_job"} 4`,
		`vk_gitlab_errors_total{kind="refused"} 1`,
		`vk_gitlab_errors_total{kind="rate_limited"} 1`,
		`vk_gitlab_errors_total{kind="server"} 1`,
		`vk_gitlab_errors_total{kind="transport"} 1`,
		`vk_gitlab_jobs{runner="docker"} 3`,
		`vk_gitlab_jobs{runner="arm"} 0`,
		`vk_gitlab_request_concurrency{runner="docker"} 2`,
		`vk_gitlab_request_concurrency_limit{runner="docker"} 4`,
		`vk_gitlab_tickets{runner="docker"} 1`,
		`vk_gitlab_runner_state{runner="docker",state="polling"} 1`,
		`vk_gitlab_runner_state{runner="docker",state="token_refused"} 0`,
		`vk_gitlab_runner_state{runner="arm",state="token_refused"} 1`,
		`vk_gitlab_concurrent 10`,
		`vk_gitlab_jobs_by_phase{phase="committed",runner="docker"} 2`,
		`vk_gitlab_jobs_by_phase{phase="submitted",runner="docker"} 1`,
		`vk_gitlab_jobs_by_phase{phase="taken",runner="arm"} 0`,
		`vk_gitlab_job_queue_seconds_bucket{runner="docker",le="30"} 0`,
		`vk_gitlab_job_queue_seconds_bucket{runner="docker",le="60"} 1`,
		`vk_gitlab_job_duration_seconds_count{outcome="success",runner="docker"} 1`,
		`vk_gitlab_job_duration_seconds_bucket{outcome="success",runner="docker",le="300"} 0`,
		`vk_gitlab_job_duration_seconds_bucket{outcome="success",runner="docker",le="600"} 1`,
		`vk_gitlab_job_duration_seconds_bucket{outcome="failed",runner="docker",le="5"} 1`,
		`vk_gitlab_build_info{`,
	} {
		if !strings.HasSuffix(want, "{") {
			want += "\n" // the whole value: 1 must not match 10
		}
		if !strings.Contains(out, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	if t.Failed() {
		t.Log(out)
	}
}

// The endpoint label stays bounded: only the runner API calls are named.
func TestRelayMetricsEndpoint(t *testing.T) {
	for _, c := range []struct{ method, path, want string }{
		{"POST", "/api/v4/jobs/request", "request_job"},
		{"POST", "/sub/api/v4/runners/verify", "verify_runner"},
		{"PUT", "/api/v4/jobs/123", "update_job"},
		{"GET", "/api/v4/jobs/123", "other"},
		{"PATCH", "/api/v4/jobs/123/trace", "patch_trace"},
		{"PATCH", "/api/v4/jobs/x/trace", "other"},
		{"PUT", "/api/v4/jobs/", "other"},
		{"GET", "/", "other"},
	} {
		if got := endpoint(c.method, c.path); got != c.want {
			t.Errorf("endpoint(%s %s) = %q, want %q", c.method, c.path, got, c.want)
		}
	}
}

// Every metric the relay registers is listed in docs/metrics.md.
func TestRelayMetricsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	m := newRelayMetrics(1)
	m.watch(func() client.RelayHeartbeat {
		return client.RelayHeartbeat{Runners: []client.RunnerHeartbeat{{Name: "r", State: client.RunnerPolling}}}
	}, nil)
	m.watchPhases(func() map[string]map[state.Phase]int { return map[string]map[state.Phase]int{"r": {}} })
	m.JobStarted("r", time.Second)
	m.JobReported("r", loop.OutcomeSuccess, time.Minute)
	m.doer(stubDoer{status: 200}).Do(httptest.NewRequest("POST", "https://g/api/v4/jobs/request", nil))
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		n := f.GetName()
		if strings.HasPrefix(n, "go_") || strings.HasPrefix(n, "process_") {
			continue
		}
		if !strings.Contains(string(doc), "`"+n) {
			t.Errorf("docs/metrics.md does not list %s", n)
		}
	}
}
