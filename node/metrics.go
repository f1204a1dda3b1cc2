package node

import (
	"io"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
)

// metrics are the node's Prometheus series (docs/node.md lists them) in a
// registry of the agent's own, served by promhttp at /metrics: counters
// kept as events happen, gauges read from a snapshot of the agent at each
// scrape.
type metrics struct {
	reg       *prometheus.Registry
	connected prometheus.Gauge
	offers    *prometheus.CounterVec // reply, reason
	leaseGone *prometheus.CounterVec // why
	finished  *prometheus.CounterVec // failure ("success")
}

func newMetrics(a *Agent) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "vk_node_session_connected", Help: "1 while the hub session is up."}),
		offers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vk_node_offers_total", Help: "Offers answered, by reply and refusal reason."}, []string{"reply", "reason"}),
		leaseGone: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vk_node_leases_gone_total", Help: "Reservations ended on the node, by why (expired, released)."}, []string{"why"}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vk_node_jobs_finished_total", Help: "Jobs ended, by failure (success when none)."}, []string{"failure"}),
	}
	m.reg.MustRegister(m.connected, m.offers, m.leaseGone, m.finished, snapshotCollector{a})
	return m
}

// snapshotCollector reads the gauges from the agent at scrape time.
type snapshotCollector struct{ a *Agent }

var (
	descCapacity = prometheus.NewDesc("vk_node_capacity",
		"What the node offers to placed work, by resource (mem and disk in bytes, cpus).", []string{"resource"}, nil)
	descUsed = prometheus.NewDesc("vk_node_ledger_used",
		"What reservations and jobs hold in the ledger, by resource.", []string{"resource"}, nil)
	descReservations = prometheus.NewDesc("vk_node_reservations", "Reservations held.", nil, nil)
	descJobs         = prometheus.NewDesc("vk_node_jobs",
		"Jobs held until their result is recorded, by state.", []string{"state"}, nil)
	descUnacked = prometheus.NewDesc("vk_node_spool_unacked_bytes",
		"Output bytes spooled and not yet acked by the hub, all jobs.", nil, nil)
	descState = prometheus.NewDesc("vk_node_state", "1 for the node's admission state.", []string{"state"}, nil)
	descCap   = prometheus.NewDesc("vk_node_cap",
		"The node's cap: min(hub ceiling, max_concurrency); -1 for none.", nil, nil)
	descRunner = prometheus.NewDesc("vk_node_local_runner",
		"1 when a local gitlab-runner makes the node refuse new work (PLACE-08).", nil, nil)
	descJournalBytes = prometheus.NewDesc("vk_node_journal_bytes",
		"Size of the start journal's file (it is compacted past twice its size after the last compaction plus 1 MiB).", nil, nil)
	descJournalCompactions = prometheus.NewDesc("vk_node_journal_compactions_total",
		"Rewrites of the start journal since the agent started.", nil, nil)
)

func (c snapshotCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCapacity, descUsed, descReservations, descJobs, descUnacked, descState, descCap, descRunner, descJournalBytes, descJournalCompactions} {
		ch <- d
	}
}

func (c snapshotCollector) Collect(ch chan<- prometheus.Metric) {
	a := c.a
	a.mu.Lock()
	s := a.led.Snapshot(a.now())
	var waiting, running, finished int
	var unacked int64
	for _, jr := range a.jobs {
		switch {
		case jr.result != nil:
			finished++
		case jr.h != nil:
			running++
		default:
			waiting++
		}
		st := jr.sp.Status()
		unacked += st.Produced - st.Acked
	}
	a.mu.Unlock()
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, r := range []struct {
		name        string
		total, used int64
	}{{"mem", s.Total.MemBytes, s.Used.MemBytes}, {"disk", s.Total.DiskBytes, s.Used.DiskBytes}, {"cpus", s.Total.CPUs, s.Used.CPUs}} {
		g(descCapacity, float64(r.total), r.name)
		g(descUsed, float64(r.used), r.name)
	}
	g(descReservations, float64(len(s.Reservations)))
	g(descJobs, float64(waiting), "waiting")
	g(descJobs, float64(running), "running")
	g(descJobs, float64(finished), "finished")
	g(descUnacked, float64(unacked))
	g(descState, 1, string(s.State))
	g(descCap, float64(s.Cap))
	runner := 0.0
	if s.Runner {
		runner = 1
	}
	g(descRunner, runner)
	if a.journal != nil { // open from the agent's start on
		js := a.journal.Stats()
		g(descJournalBytes, float64(js.Bytes))
		ch <- prometheus.MustNewConstMetric(descJournalCompactions, prometheus.CounterValue, float64(js.Compactions))
	}
}

// handler serves /metrics.
func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// write renders every series in the Prometheus text format.
func (m *metrics) write(w io.Writer) error {
	mfs, err := m.reg.Gather()
	if err != nil {
		return err
	}
	enc := expfmt.NewEncoder(w, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return err
		}
	}
	return nil
}
