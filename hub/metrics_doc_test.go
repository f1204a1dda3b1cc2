package hub

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/vk-ci/vk/hub/output"
	"github.com/vk-ci/vk/proto/client"
)

// Every metric the hub registers is listed in docs/metrics.md, and build
// info is among them.
func TestMetricsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	m := newMetrics()
	m.watchOutput(noStats{})
	// Label vectors appear once they have a child.
	m.add("vk_hub_requests_total", 1, "route", "r", "code", "200")
	m.observeHist("vk_hub_request_seconds", 1, "route", "r")
	m.observeHist("vk_hub_decision_seconds", 1)
	m.observeHist("vk_hub_submissions_together", 1)
	m.observeHist("vk_hub_record_write_seconds", 1, "phase", "commit")
	m.observeHist("vk_hub_wait_seconds", 1, "kind", waitJob, "size", sizeClass(2))
	m.set("vk_hub_queue_depth", 1, "class", "jobs")
	m.set("vk_hub_jobs", 1, "state", "running")
	m.add("vk_hub_jobs_finished_total", 1, "failure", client.Failure("").MetricLabel())
	for _, g := range []string{"vk_hub_tenant_held", "vk_hub_tenant_waiting", "vk_hub_tenant_cap", "vk_hub_tenant_weight"} {
		m.set(g, 1, "tenant", "acme")
	}
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range fams {
		n := f.GetName()
		seen[n] = true
		if strings.HasPrefix(n, "go_") || strings.HasPrefix(n, "process_") {
			continue
		}
		if !strings.Contains(string(doc), "`"+n) {
			t.Errorf("docs/metrics.md does not list %s", n)
		}
	}
	for n := range m.counters {
		if !seen[n] {
			t.Errorf("%s registered but not gathered: the test misses it", n)
		}
	}
	for n := range m.gauges {
		if !seen[n] {
			t.Errorf("%s registered but not gathered: the test misses it", n)
		}
	}
	for n := range m.hists {
		if !seen[n] {
			t.Errorf("%s registered but not gathered: the test misses it", n)
		}
	}
	if !seen["vk_hub_build_info"] {
		t.Error("no vk_hub_build_info")
	}
}

// A finished job's failure label is "success" when it did not fail, as
// on the node, and the failure's own word otherwise.
func TestFailureLabel(t *testing.T) {
	if got := client.Failure("").MetricLabel(); got != "success" {
		t.Errorf(`client.Failure("").MetricLabel() = %q`, got)
	}
	if got := client.FailureScript.MetricLabel(); got != string(client.FailureScript) {
		t.Errorf("client.FailureScript.MetricLabel() = %q", got)
	}
}

// The Grafana dashboard in deploy/ is valid JSON and queries only metrics
// docs/metrics.md lists (a histogram's _bucket series by its name).
func TestGrafanaDashboardUsesDocumentedMetrics(t *testing.T) {
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("../deploy/grafana-vk.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("deploy/grafana-vk.json: %v", err)
	}
	if len(dash.Panels) == 0 {
		t.Fatal("the dashboard has no panels")
	}
	name := regexp.MustCompile(`vk_[a-z_]+`)
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q queries nothing", p.Title)
		}
		for _, tg := range p.Targets {
			for _, n := range name.FindAllString(tg.Expr, -1) {
				n = strings.TrimSuffix(n, "_bucket")
				if !strings.Contains(string(doc), "`"+n+"`") {
					t.Errorf("panel %q queries %s, which docs/metrics.md does not list", p.Title, n)
				}
			}
		}
	}
}

// noStats is an output store's work, all zero.
type noStats struct{}

func (noStats) Stats() output.LogStats { return output.LogStats{} }
