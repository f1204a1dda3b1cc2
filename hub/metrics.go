package hub

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// metrics are the hub's Prometheus metrics (docs/hub.md lists them),
// written in the Prometheus text exposition format (0.0.4) at /metrics.
//
// github.com/prometheus/client_golang is in go.mod but its dependencies
// (client_model, common, procfs, protobuf, …) are not in go.sum, and this
// package may not change go.mod/go.sum; so the few metric types the hub
// needs are implemented here, stdlib only. Swapping in client_golang later
// changes this file only. Safe for concurrent use.
type metrics struct {
	// collect, when set, refreshes gauges that are costly to keep up to
	// date, before each scrape.
	collect func(context.Context)

	mu     sync.Mutex
	series map[string]*family // by name
	order  []string
}

type family struct {
	name, help, typ string
	buckets         []float64          // histograms
	values          map[string]float64 // label text → value (counters, gauges)
	hist            map[string]*hist
}

type hist struct {
	counts []uint64 // per bucket, cumulative at write time
	sum    float64
	n      uint64
}

func newMetrics() *metrics {
	m := &metrics{series: map[string]*family{}}
	m.def("vk_hub_requests_total", "counter", "Client API requests answered, by route pattern and HTTP status.", nil)
	m.def("vk_hub_request_seconds", "histogram", "Client API request durations (long polls included), by route pattern.",
		[]float64{.001, .005, .025, .1, .5, 2, 10, 60})
	m.def("vk_hub_decision_seconds", "histogram", "Time of one scheduling core step (event in, actions out).",
		[]float64{1e-6, 5e-6, 25e-6, 100e-6, 500e-6, 2.5e-3, 10e-3, 50e-3})
	m.def("vk_hub_grants_total", "counter", "Reservation grants (a node accepted an offer).", nil)
	m.def("vk_hub_tickets_total", "counter", "Reservation tickets queued.", nil)
	m.def("vk_hub_tickets_ended_total", "counter", "Tickets ended unclaimed (cancelled, unpolled, session end, lease gone).", nil)
	m.def("vk_hub_queue_depth", "gauge", "Requests waiting for a node, by class (tickets: waiting, offered or granted, unclaimed; jobs: queued).", nil)
	m.def("vk_hub_jobs", "gauge", "Unsettled jobs, by state.", nil)
	m.def("vk_hub_jobs_finished_total", "counter", "Jobs finished, by failure (\"\" for success).", nil)
	m.def("vk_hub_nodes_connected", "gauge", "Node sessions connected.", nil)
	m.def("vk_hub_relays_connected", "gauge", "Relay sessions connected.", nil)
	return m
}

func (m *metrics) def(name, typ, help string, buckets []float64) {
	m.series[name] = &family{name: name, help: help, typ: typ, buckets: buckets, values: map[string]float64{}, hist: map[string]*hist{}}
	m.order = append(m.order, name)
}

// labels renders label pairs ("k", "v", …) as {k="v",…}.
func labels(kv ...string) string {
	if len(kv) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteByte('{')
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(kv[i])
		b.WriteString(`="`)
		b.WriteString(strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(kv[i+1]))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// add adds d to a counter or gauge.
func (m *metrics) add(name string, d float64, kv ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.series[name].values[labels(kv...)] += d
}

// set sets a gauge.
func (m *metrics) set(name string, v float64, kv ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.series[name].values[labels(kv...)] = v
}

// observe adds a histogram observation.
func (m *metrics) observeHist(name string, v float64, kv ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.series[name]
	l := labels(kv...)
	h := f.hist[l]
	if h == nil {
		h = &hist{counts: make([]uint64, len(f.buckets))}
		f.hist[l] = h
	}
	for i, b := range f.buckets {
		if v <= b {
			h.counts[i]++
		}
	}
	h.sum += v
	h.n++
}

// observe records one answered request (api.Observer).
func (m *metrics) observe(route string, status int, elapsed time.Duration) {
	m.add("vk_hub_requests_total", 1, "route", route, "code", strconv.Itoa(status))
	m.observeHist("vk_hub_request_seconds", elapsed.Seconds(), "route", route)
}

// write writes every metric in the text exposition format.
func (m *metrics) write(w io.Writer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, name := range m.order {
		f := m.series[name]
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, f.help, name, f.typ)
		if f.typ == "histogram" {
			for _, l := range slices.Sorted(mapKeys(f.hist)) {
				h := f.hist[l]
				inner := strings.TrimSuffix(strings.TrimPrefix(l, "{"), "}")
				sep := ""
				if inner != "" {
					sep = ","
				}
				for i, b := range f.buckets {
					fmt.Fprintf(w, "%s_bucket{%s%sle=\"%s\"} %d\n", name, inner, sep, fmtFloat(b), h.counts[i])
				}
				fmt.Fprintf(w, "%s_bucket{%s%sle=\"+Inf\"} %d\n", name, inner, sep, h.n)
				fmt.Fprintf(w, "%s_sum%s %s\n%s_count%s %d\n", name, l, fmtFloat(h.sum), name, l, h.n)
			}
			continue
		}
		for _, l := range slices.Sorted(mapKeys(f.values)) {
			fmt.Fprintf(w, "%s%s %s\n", name, l, fmtFloat(f.values[l]))
		}
	}
}

// ServeHTTP serves /metrics.
func (m *metrics) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if m.collect != nil {
		m.collect(r.Context())
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	m.write(w)
}

func fmtFloat(v float64) string {
	if math.IsInf(v, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
