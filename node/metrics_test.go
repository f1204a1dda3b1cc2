package node

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/vk-ci/vk/node/journal"
)

// Every series docs/node.md lists is scraped from /metrics with its type,
// parsed by Prometheus's own text parser; a finished job and a refused
// offer show in the counters, the journal's size is its file's, and
// WriteMetrics writes the same families.
func TestMetricsScrapeParses(t *testing.T) {
	h, a := connected(t, func(c *Config) { c.Node.MetricsListen = "127.0.0.1:0" }, Options{})
	from := h.mark()
	startJob(t, h, "job-m", "r1", "echo metered")
	resultOf(h, from, "job-m")
	a.SetState("draining")

	resp, err := http.Get("http://" + a.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("scrape does not parse: %v", err)
	}
	want := map[string]dto.MetricType{
		"vk_node_capacity": dto.MetricType_GAUGE, "vk_node_ledger_used": dto.MetricType_GAUGE,
		"vk_node_reservations": dto.MetricType_GAUGE, "vk_node_jobs": dto.MetricType_GAUGE,
		"vk_node_spool_unacked_bytes": dto.MetricType_GAUGE, "vk_node_state": dto.MetricType_GAUGE,
		"vk_node_cap": dto.MetricType_GAUGE, "vk_node_local_runner": dto.MetricType_GAUGE,
		"vk_node_session_connected": dto.MetricType_GAUGE, "vk_node_offers_total": dto.MetricType_COUNTER,
		"vk_node_jobs_finished_total": dto.MetricType_COUNTER,
		"vk_node_journal_bytes":       dto.MetricType_GAUGE, "vk_node_journal_compactions_total": dto.MetricType_COUNTER,
	}
	for name, typ := range want {
		f, ok := fams[name]
		if !ok {
			t.Errorf("scrape lacks %s", name)
			continue
		}
		if f.GetType() != typ || f.GetHelp() == "" {
			t.Errorf("%s: type %v help %q, want %v with help", name, f.GetType(), f.GetHelp(), typ)
		}
	}
	value := func(name string, labels map[string]string) float64 {
		t.Helper()
		for _, m := range fams[name].GetMetric() {
			match := true
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					match = false
				}
			}
			if match {
				if m.Counter != nil {
					return m.Counter.GetValue()
				}
				return m.Gauge.GetValue()
			}
		}
		t.Errorf("%s%v: no such series", name, labels)
		return -1
	}
	if v := value("vk_node_jobs_finished_total", map[string]string{"failure": "success"}); v != 1 {
		t.Errorf("jobs finished success = %v, want 1", v)
	}
	if v := value("vk_node_state", map[string]string{"state": "drained"}); v != 1 {
		t.Errorf("state drained = %v, want 1", v)
	}
	if v := value("vk_node_capacity", map[string]string{"resource": "cpus"}); v != 4 {
		t.Errorf("capacity cpus = %v, want 4", v)
	}
	if v := value("vk_node_offers_total", map[string]string{"reply": "accepted"}); v != 1 {
		t.Errorf("offers accepted = %v, want 1", v)
	}
	// The job's start, running steps, result and recorded are in the
	// journal's file, which no compaction has rewritten yet.
	fi, err := os.Stat(filepath.Join(a.cfg.Node.StateDir, "journal", journal.FileName))
	if err != nil {
		t.Fatal(err)
	}
	if v := value("vk_node_journal_bytes", nil); v != float64(fi.Size()) || v == 0 {
		t.Errorf("journal bytes = %v, want the file's %d", v, fi.Size())
	}
	if v := value("vk_node_journal_compactions_total", nil); v != 0 {
		t.Errorf("journal compactions = %v, want 0", v)
	}
	var buf bytes.Buffer
	if err := a.WriteMetrics(&buf); err != nil {
		t.Fatal(err)
	}
	p2 := expfmt.NewTextParser(model.UTF8Validation)
	got, err := p2.TextToMetricFamilies(&buf)
	if err != nil || len(got) != len(fams) {
		t.Errorf("WriteMetrics: %d families (%v), scrape had %d", len(got), err, len(fams))
	}
}
