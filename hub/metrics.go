package hub

import (
	"cmp"
	"context"
	"github.com/vk-ci/vk/hub/output"
	"net/http"
	"runtime"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/internal/version"
)

// metrics are the hub's Prometheus metrics (docs/hub.md lists them) on
// their own registry (github.com/prometheus/client_golang), served by
// promhttp at /metrics, with the Go runtime and process collectors. The
// driver updates them by name through add, set and observeHist, label
// values given as "key", "value" pairs in the metric's label order. Safe
// for concurrent use.
type metrics struct {
	// collect, when set, refreshes gauges that are costly to keep up to
	// date, before each scrape.
	collect func(context.Context)

	reg      *prometheus.Registry
	counters map[string]*prometheus.CounterVec
	gauges   map[string]*prometheus.GaugeVec
	hists    map[string]*prometheus.HistogramVec
	handler  http.Handler
}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry(), counters: map[string]*prometheus.CounterVec{},
		gauges: map[string]*prometheus.GaugeVec{}, hists: map[string]*prometheus.HistogramVec{}}
	m.counter("vk_hub_requests_total", "Client API requests answered, by route pattern and HTTP status.", "route", "code")
	m.hist("vk_hub_request_seconds", "Client API request durations (long polls included), by route pattern.",
		[]float64{.001, .005, .025, .1, .5, 2, 10, 60}, "route")
	m.hist("vk_hub_decision_seconds", "Time of one scheduling core step (event in, actions out).",
		[]float64{1e-6, 5e-6, 25e-6, 100e-6, 500e-6, 2.5e-3, 10e-3, 50e-3})
	m.hist("vk_hub_submissions_together", "Job submissions the driver carried out together, their new jobs' records written in one go.",
		[]float64{1, 2, 4, 8, 16, 32, 64, 128, 256})
	m.hist("vk_hub_record_write_seconds", "The driver's record writes, by phase: wait (per write, queued until its batch goes to "+
		"the store), commit (per batch, until the batch is durable).",
		[]float64{1e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 500e-3, 2.5}, "phase")
	m.counter("vk_hub_grants_total", "Reservation grants (a node accepted an offer).")
	m.counter("vk_hub_tickets_total", "Reservation tickets queued.")
	m.counter("vk_hub_tickets_ended_total", "Tickets ended unclaimed (cancelled, unpolled, session end, lease gone).")
	m.gauge("vk_hub_queue_depth", "Requests waiting for a node, by class (tickets: waiting, offered or granted, unclaimed; jobs: queued).", "class")
	m.gauge("vk_hub_jobs", "Unsettled jobs, by state.", "state")
	m.counter("vk_hub_jobs_finished_total", "Jobs finished, by failure (\"success\" for none).", "failure")
	m.hist("vk_hub_wait_seconds", "Time a request waited for a node, by kind (ticket: queued to granted; job: submitted to "+
		"running) and size class (the envelope's vCPUs rounded up to a power of two: 1, 2, 4, … 64, over64).",
		[]float64{.1, .5, 1, 5, 15, 60, 300, 900, 3600, 10800}, "kind", "size")
	m.gauge("vk_hub_tenant_held", "Requests a tenant holds as its cap counts them (reservations offered to claimed, unsettled jobs), by tenant.", "tenant")
	m.gauge("vk_hub_tenant_waiting", "Requests of a tenant waiting (tickets not yet granted, queued jobs), by tenant.", "tenant")
	m.gauge("vk_hub_tenant_cap", "A policy tenant's cap (absent: no cap), by tenant.", "tenant")
	m.gauge("vk_hub_tenant_weight", "A policy tenant's weight, by tenant.", "tenant")
	m.gauge("vk_hub_nodes_connected", "Node sessions connected.")
	m.gauge("vk_hub_relays_connected", "Relay sessions connected.")
	m.gauge("vk_hub_build_info", "Always 1; the labels name the build.", "version", "commit", "go_version")
	m.set("vk_hub_build_info", 1, "version", version.Version, "commit", version.Commit, "go_version", runtime.Version())
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorLog: nil})
	return m
}

// outputStats is an output store that counts its work (output.Log).
type outputStats interface{ Stats() output.LogStats }

// watchOutput registers the output log's metrics, read from st at each
// scrape.
func (m *metrics) watchOutput(st outputStats) {
	for _, o := range []struct {
		name, help string
		counter    bool
		of         func(output.LogStats) int64
	}{
		{"vk_hub_output_appends_total", "Output chunks the output log wrote (the new part of each).", true,
			func(s output.LogStats) int64 { return s.Appends }},
		{"vk_hub_output_syncs_total", "Groups the output log made durable, each with one fsync.", true,
			func(s output.LogStats) int64 { return s.Syncs }},
		{"vk_hub_output_compacted_bytes_total", "Bytes the output log's compaction copied out of old segments.", true,
			func(s output.LogStats) int64 { return s.Compacted }},
		{"vk_hub_output_segments_reused_total", "Output log segments made from a removed segment's file rather than a new one.", true,
			func(s output.LogStats) int64 { return s.Reused }},
		{"vk_hub_output_log_bytes", "Bytes written in the output log's segments.", false,
			func(s output.LogStats) int64 { return s.Bytes }},
		{"vk_hub_output_live_bytes", "Bytes of the output log that unsettled jobs own.", false,
			func(s output.LogStats) int64 { return s.Live }},
		{"vk_hub_output_segments", "The output log's segment files.", false,
			func(s output.LogStats) int64 { return int64(s.Segments) }},
	} {
		read := func() float64 { return float64(o.of(st.Stats())) }
		if o.counter {
			m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: o.name, Help: o.help}, read))
		} else {
			m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: o.name, Help: o.help}, read))
		}
	}
}

func (m *metrics) counter(name, help string, labels ...string) {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	if len(labels) == 0 {
		v.WithLabelValues() // exposed as 0 from the start
	}
	m.reg.MustRegister(v)
	m.counters[name] = v
}

func (m *metrics) gauge(name, help string, labels ...string) {
	v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	if len(labels) == 0 {
		v.WithLabelValues()
	}
	m.reg.MustRegister(v)
	m.gauges[name] = v
}

func (m *metrics) hist(name, help string, buckets []float64, labels ...string) {
	v := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	m.reg.MustRegister(v)
	m.hists[name] = v
}

// values returns the values of label pairs ("k", "v", …).
func values(kv []string) []string {
	out := make([]string, 0, len(kv)/2)
	for i := 1; i < len(kv); i += 2 {
		out = append(out, kv[i])
	}
	return out
}

// add adds d to a counter (d >= 0) or gauge.
func (m *metrics) add(name string, d float64, kv ...string) {
	if c := m.counters[name]; c != nil {
		c.WithLabelValues(values(kv)...).Add(d)
		return
	}
	m.gauges[name].WithLabelValues(values(kv)...).Add(d)
}

// set sets a gauge.
func (m *metrics) set(name string, v float64, kv ...string) {
	m.gauges[name].WithLabelValues(values(kv)...).Set(v)
}

// observeHist adds a histogram observation.
func (m *metrics) observeHist(name string, v float64, kv ...string) {
	m.hists[name].WithLabelValues(values(kv)...).Observe(v)
}

// observe records one answered request (api.Observer).
func (m *metrics) observe(route string, status int, elapsed time.Duration) {
	m.add("vk_hub_requests_total", 1, "route", route, "code", strconv.Itoa(status))
	m.observeHist("vk_hub_request_seconds", elapsed.Seconds(), "route", route)
}

// ServeHTTP serves /metrics (promhttp: text or a negotiated format).
func (m *metrics) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if m.collect != nil {
		m.collect(r.Context())
	}
	m.handler.ServeHTTP(w, r)
}

// countJobsReq sets the job and tenant gauges when /metrics is scraped.
type countJobsReq struct{}

func (countJobsReq) run(d *Driver) { d.countJobs() }

// countJobs sets the job gauges; O(unsettled jobs), so it runs when
// /metrics is scraped, not on every change.
func (d *Driver) countJobs() {
	counts := map[store.JobState]int{}
	for _, j := range d.jobs {
		counts[j.rec.State]++
	}
	for _, s := range []store.JobState{store.JobQueued, store.JobStarting, store.JobRunning, store.JobFinished} {
		d.met.set("vk_hub_jobs", float64(counts[s]), "state", string(s))
	}
	d.met.set("vk_hub_queue_depth", float64(counts[store.JobQueued]), "class", "jobs")
	d.met.set("vk_hub_queue_depth", float64(d.core.OpenTickets()), "class", "tickets")
	d.countTenants()
}

// countTenants sets the per-tenant gauges: what the core counts a tenant
// holding (what its cap bounds), requests waiting (tickets not yet
// granted, and queued jobs), and each policy tenant's cap and weight;
// O(tickets + jobs), at scrape time.
func (d *Driver) countTenants() {
	held, waiting := map[string]int{}, map[string]int{}
	for name, id := range d.ids.tenants.ids {
		held[name] = d.core.Held(id)
	}
	for id, tk := range d.tickets {
		if v, ok := d.core.Ticket(id); ok && v.Grant == nil {
			tenant, _ := policyTenantOf(d.policy, tk.owner, tk.runner)
			waiting[tenant]++
		}
	}
	for _, j := range d.jobs {
		if j.rec.State == store.JobQueued {
			waiting[j.rec.Tenant]++
		}
	}
	for _, g := range []string{"vk_hub_tenant_held", "vk_hub_tenant_waiting", "vk_hub_tenant_cap", "vk_hub_tenant_weight"} {
		d.met.gauges[g].Reset() // a tenant gone from the policy and the queue goes from the scrape
	}
	if d.policy != nil {
		for name, tp := range d.policy.Tenants {
			held[name] += 0
			waiting[name] += 0
			d.met.set("vk_hub_tenant_weight", float64(cmp.Or(tp.Weight, 1)), "tenant", name)
			if tp.Cap > 0 {
				d.met.set("vk_hub_tenant_cap", float64(tp.Cap), "tenant", name)
			}
		}
	}
	for name, n := range held {
		d.met.set("vk_hub_tenant_held", float64(n), "tenant", name)
	}
	for name, n := range waiting {
		d.met.set("vk_hub_tenant_waiting", float64(n), "tenant", name)
	}
}
