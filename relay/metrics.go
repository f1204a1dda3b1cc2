package relay

import (
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/vk-ci/vk/internal/version"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/relay/gitlab"
	"github.com/vk-ci/vk/relay/loop"
	"github.com/vk-ci/vk/relay/state"
)

// runnerStates are the runner states exposed as vk_gitlab_runner_state,
// each 1 for a runner's current state and 0 otherwise.
var runnerStates = []client.RunnerState{client.RunnerPolling, client.RunnerWaitingCapacity, client.RunnerServerPending,
	client.RunnerUnhealthy, client.RunnerTokenRefused}

// relayMetrics are vk-gitlab's Prometheus metrics (docs/metrics.md), in
// the spirit of gitlab-runner's gitlab_runner_*, on a registry of the
// relay's own: GitLab API calls counted as they are made (an instrumented
// gitlab.Doer), the runners' jobs, loops and states read from the
// heartbeat at each scrape, and build info.
type relayMetrics struct {
	reg        *prometheus.Registry
	apiReqs    *prometheus.CounterVec   // endpoint, status
	apiSeconds *prometheus.HistogramVec // endpoint
	errs       *prometheus.CounterVec   // kind
	queueWait  *prometheus.HistogramVec // runner
	duration   *prometheus.HistogramVec // runner, outcome
	sat        *saturation              // request_concurrency_exceeded
}

// jobBuckets are the job duration and queue-wait buckets, in seconds: a
// second to three hours.
var jobBuckets = []float64{1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 10800}

// newRelayMetrics registers the relay's metrics but the runners' (see
// watch); concurrent is the relay's job limit.
func newRelayMetrics(concurrent int) *relayMetrics {
	m := &relayMetrics{
		reg: prometheus.NewRegistry(),
		apiReqs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vk_gitlab_api_requests_total",
			Help: "GitLab runner API requests, by endpoint and HTTP status (\"error\" when no answer came)."}, []string{"endpoint", "status"}),
		apiSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "vk_gitlab_api_request_seconds",
			Help:    "GitLab runner API request durations (job request long polls included), by endpoint.",
			Buckets: []float64{.01, .05, .25, 1, 5, 30, 120}}, []string{"endpoint"}),
		errs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vk_gitlab_errors_total",
			Help: "Failed GitLab API requests, by kind: transport, refused (401/403), rate_limited (429), server (5xx)."}, []string{"kind"}),
	}
	m.queueWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "vk_gitlab_job_queue_seconds",
		Help:    "Time from a job being taken from GitLab to a node running it (its wait on the hub), by runner.",
		Buckets: jobBuckets}, []string{"runner"})
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "vk_gitlab_job_duration_seconds",
		Help:    "Time from a job being taken from GitLab to GitLab taking its final update, by runner and outcome (success, failed).",
		Buckets: jobBuckets}, []string{"runner", "outcome"})
	for _, k := range []string{"transport", "refused", "rate_limited", "server"} {
		m.errs.WithLabelValues(k)
	}
	build := prometheus.NewGauge(prometheus.GaugeOpts{Name: "vk_gitlab_build_info",
		Help:        "Always 1; the labels name the build.",
		ConstLabels: prometheus.Labels{"version": version.Version, "commit": version.Commit, "go_version": runtime.Version()}})
	build.Set(1)
	concurrentG := prometheus.NewGauge(prometheus.GaugeOpts{Name: "vk_gitlab_concurrent", Help: "The relay's job limit (concurrent)."})
	concurrentG.Set(float64(concurrent))
	m.sat = newSaturation()
	m.reg.MustRegister(m.apiReqs, m.apiSeconds, m.errs, m.queueWait, m.duration, m.sat.c, build, concurrentG,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// watch registers the runners' gauges, read from heartbeat at each
// scrape; limits are the runners' request_concurrency by name. Called
// once.
func (m *relayMetrics) watch(heartbeat func() client.RelayHeartbeat, limits map[string]int) {
	m.reg.MustRegister(&runnerCollector{heartbeat: heartbeat, limits: limits})
	m.sat.setLimits(limits)
}

// watchPhases registers the job counts by phase, read from phases at
// each scrape. Called once.
func (m *relayMetrics) watchPhases(phases func() map[string]map[state.Phase]int) {
	m.reg.MustRegister(&phaseCollector{phases: phases})
}

// observer is the loops' job observer; nil without metrics.
func (m *relayMetrics) observer() loop.JobObserver {
	if m == nil {
		return nil
	}
	return m
}

// JobStarted implements loop.JobObserver.
func (m *relayMetrics) JobStarted(runner string, waited time.Duration) {
	m.queueWait.WithLabelValues(runner).Observe(waited.Seconds())
}

// JobReported implements loop.JobObserver.
func (m *relayMetrics) JobReported(runner, outcome string, took time.Duration) {
	m.duration.WithLabelValues(runner, outcome).Observe(took.Seconds())
}

// phaseCollector reads the runners' job records by phase at each scrape.
type phaseCollector struct {
	phases func() map[string]map[state.Phase]int
}

var descPhases = prometheus.NewDesc("vk_gitlab_jobs_by_phase",
	"Jobs a runner has recorded, by runner and phase (taken, submitted, committed, failing, reported).", []string{"runner", "phase"}, nil)

func (c *phaseCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descPhases }

func (c *phaseCollector) Collect(ch chan<- prometheus.Metric) {
	for runner, counts := range c.phases() {
		for _, p := range loop.Phases {
			ch <- prometheus.MustNewConstMetric(descPhases, prometheus.GaugeValue, float64(counts[p]), runner, string(p))
		}
	}
}

// handler serves /metrics.
func (m *relayMetrics) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	return mux
}

// doer wraps next so every request it sends is counted.
func (m *relayMetrics) doer(next gitlab.Doer) gitlab.Doer { return &countingDoer{next: next, m: m} }

type countingDoer struct {
	next gitlab.Doer
	m    *relayMetrics
}

func (d *countingDoer) Do(req *http.Request) (*http.Response, error) {
	start := time.Now()
	ep := endpoint(req.Method, req.URL.Path)
	resp, err := d.next.Do(req)
	d.m.apiSeconds.WithLabelValues(ep).Observe(time.Since(start).Seconds())
	if err != nil {
		d.m.apiReqs.WithLabelValues(ep, "error").Inc()
		d.m.errs.WithLabelValues("transport").Inc()
		return resp, err
	}
	d.m.apiReqs.WithLabelValues(ep, strconv.Itoa(resp.StatusCode)).Inc()
	switch c := resp.StatusCode; {
	case c == http.StatusUnauthorized || c == http.StatusForbidden:
		d.m.errs.WithLabelValues("refused").Inc()
	case c == http.StatusTooManyRequests:
		d.m.errs.WithLabelValues("rate_limited").Inc()
	case c >= 500:
		d.m.errs.WithLabelValues("server").Inc()
	}
	return resp, nil
}

// endpoint names a runner API call as gitlab-runner's metrics do; a path
// this relay does not call is "other" (the label set stays bounded).
func endpoint(method, path string) string {
	i := strings.Index(path, "/api/v4/")
	if i < 0 {
		return "other"
	}
	parts := strings.Split(strings.Trim(path[i+len("/api/v4/"):], "/"), "/")
	switch {
	case len(parts) == 2 && parts[0] == "runners" && parts[1] == "verify":
		return "verify_runner"
	case len(parts) == 2 && parts[0] == "jobs" && parts[1] == "request":
		return "request_job"
	case len(parts) == 2 && parts[0] == "jobs" && method == http.MethodPut && isDigits(parts[1]):
		return "update_job"
	case len(parts) == 3 && parts[0] == "jobs" && parts[2] == "trace" && isDigits(parts[1]):
		return "patch_trace"
	}
	return "other"
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// runnerCollector reads the runners' state from the heartbeat at each
// scrape.
type runnerCollector struct {
	heartbeat func() client.RelayHeartbeat
	limits    map[string]int
}

var (
	descJobs = prometheus.NewDesc("vk_gitlab_jobs", "Jobs a runner holds (taken from GitLab, not yet settled), by runner.",
		[]string{"runner"}, nil)
	descReqInUse = prometheus.NewDesc("vk_gitlab_request_concurrency",
		"GitLab job requests a runner has outstanding under claimed grants, by runner.", []string{"runner"}, nil)
	descReqLimit = prometheus.NewDesc("vk_gitlab_request_concurrency_limit",
		"A runner's request_concurrency, by runner.", []string{"runner"}, nil)
	descTickets = prometheus.NewDesc("vk_gitlab_tickets",
		"Reservation tickets a runner's loops hold on the hub (queued, or granted and unclaimed), by runner.", []string{"runner"}, nil)
	descState = prometheus.NewDesc("vk_gitlab_runner_state",
		"1 for a runner's current state (polling, waiting_capacity, server_pending, unhealthy, token_refused), 0 for the others.",
		[]string{"runner", "state"}, nil)
)

func (c *runnerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descJobs, descReqInUse, descReqLimit, descTickets, descState} {
		ch <- d
	}
}

func (c *runnerCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.heartbeat().Runners {
		ch <- prometheus.MustNewConstMetric(descJobs, prometheus.GaugeValue, float64(len(r.JobAdmissions)), r.Name)
		ch <- prometheus.MustNewConstMetric(descReqInUse, prometheus.GaugeValue, float64(len(r.RequestAdmissions)), r.Name)
		ch <- prometheus.MustNewConstMetric(descReqLimit, prometheus.GaugeValue, float64(c.limits[r.Name]), r.Name)
		ch <- prometheus.MustNewConstMetric(descTickets, prometheus.GaugeValue, float64(len(r.Tickets)), r.Name)
		for _, s := range runnerStates {
			v := 0.0
			if r.State == s {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descState, prometheus.GaugeValue, v, r.Name, string(s))
		}
	}
}
