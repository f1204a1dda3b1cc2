package node

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
)

// metrics are the node's Prometheus series (docs/node.md lists them),
// written in the text exposition format (0.0.4) at /metrics: ledger use,
// leases, jobs by state, spool bytes.
//
// github.com/prometheus/client_golang is in go.mod but its dependencies
// are not in go.sum (the same reason hub/metrics.go gives), so the few
// counters the node needs are kept here, stdlib only.
type metrics struct {
	mu       sync.Mutex
	counters map[string]float64 // `name{labels}` → value; guarded by mu
	conn     float64            // guarded by mu

	connected gauge
	offers    counterVec // reply, reason
	leaseGone counterVec // why
	finished  counterVec // failure ("success")
}

func newMetrics() *metrics {
	m := &metrics{counters: map[string]float64{}}
	m.connected = gauge{m}
	m.offers = m.vec("vk_node_offers_total", "reply", "reason")
	m.leaseGone = m.vec("vk_node_leases_gone_total", "why")
	m.finished = m.vec("vk_node_jobs_finished_total", "failure")
	return m
}

// counterVec adds to one labelled counter.
type counterVec struct {
	m      *metrics
	name   string
	labels []string
}

func (m *metrics) vec(name string, labels ...string) counterVec {
	return counterVec{m: m, name: name, labels: labels}
}

type counter struct {
	m   *metrics
	key string
}

func (c counterVec) WithLabelValues(vals ...string) counter {
	var b strings.Builder
	b.WriteString(c.name)
	b.WriteByte('{')
	for i, l := range c.labels {
		if i > 0 {
			b.WriteByte(',')
		}
		v := ""
		if i < len(vals) {
			v = vals[i]
		}
		fmt.Fprintf(&b, "%s=%q", l, v)
	}
	b.WriteByte('}')
	return counter{m: c.m, key: b.String()}
}

func (c counter) Inc() {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	c.m.counters[c.key]++
}

type gauge struct{ m *metrics }

func (g gauge) Set(v float64) {
	g.m.mu.Lock()
	defer g.m.mu.Unlock()
	g.m.conn = v
}

var counterHelp = map[string]string{
	"vk_node_offers_total":        "Offers answered, by reply and refusal reason.",
	"vk_node_leases_gone_total":   "Reservations ended on the node, by why (expired, released).",
	"vk_node_jobs_finished_total": "Jobs ended, by failure (success when none).",
}

// write renders every series; the gauges come from a snapshot of a.
func (m *metrics) write(w io.Writer, a *Agent) {
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
	gauge := func(name, help string, rows ...string) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name)
		for _, r := range rows {
			fmt.Fprintf(w, "%s%s\n", name, r)
		}
	}
	res := func(e [3]int64) []string {
		return []string{fmt.Sprintf(`{resource="mem"} %d`, e[0]), fmt.Sprintf(`{resource="disk"} %d`, e[1]), fmt.Sprintf(`{resource="cpus"} %d`, e[2])}
	}
	gauge("vk_node_capacity", "What the node offers to placed work, by resource (mem and disk in bytes, cpus).",
		res([3]int64{s.Total.MemBytes, s.Total.DiskBytes, s.Total.CPUs})...)
	gauge("vk_node_ledger_used", "What reservations and jobs hold in the ledger, by resource.",
		res([3]int64{s.Used.MemBytes, s.Used.DiskBytes, s.Used.CPUs})...)
	gauge("vk_node_reservations", "Reservations held.", fmt.Sprintf(" %d", len(s.Reservations)))
	gauge("vk_node_jobs", "Jobs held until their result is recorded, by state.",
		fmt.Sprintf(`{state="waiting"} %d`, waiting), fmt.Sprintf(`{state="running"} %d`, running), fmt.Sprintf(`{state="finished"} %d`, finished))
	gauge("vk_node_spool_unacked_bytes", "Output bytes spooled and not yet acked by the hub, all jobs.", fmt.Sprintf(" %d", unacked))
	gauge("vk_node_state", "1 for the node's admission state.", fmt.Sprintf(`{state=%q} 1`, string(s.State)))
	gauge("vk_node_cap", "The node's cap: min(hub ceiling, max_concurrency); -1 for none.", fmt.Sprintf(" %d", s.Cap))
	runner := 0
	if s.Runner {
		runner = 1
	}
	gauge("vk_node_local_runner", "1 when a local gitlab-runner makes the node refuse new work (PLACE-08).", fmt.Sprintf(" %d", runner))

	m.mu.Lock()
	defer m.mu.Unlock()
	gauge("vk_node_session_connected", "1 while the hub session is up.", fmt.Sprintf(" %g", m.conn))
	keys := make([]string, 0, len(m.counters))
	for k := range m.counters {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	last := ""
	for _, k := range keys {
		name := k[:strings.IndexByte(k, '{')]
		if name != last {
			fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n", name, counterHelp[name], name)
			last = name
		}
		fmt.Fprintf(w, "%s %g\n", k, m.counters[k])
	}
}

// handler serves /metrics.
func (m *metrics) handler(a *Agent) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		m.write(w, a)
	})
}
