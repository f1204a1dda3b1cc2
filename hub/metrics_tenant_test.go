package hub

import (
	"net/http"
	"strings"
	"testing"

	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/proto/dispatch"
)

// The per-tenant gauges: what a tenant holds and has waiting, and the
// policy's cap and weight for it.
//
// spec: ARB-11
func TestMetricsPerTenant(t *testing.T) {
	h := newHarness(t)
	h.cfg.CapacityPolicy = &PolicyConfig{ProbeLimit: 64, Tenants: map[string]admin.Tenant{
		"acme": {Weight: 3, Cap: 5, Relays: []string{h.relay}},
		"beta": {Relays: []string{"relay-other"}},
	}}
	h.restart()
	h.relayUp(1)
	h.nodeUp(dispatch.Held{})
	h.submitOn(h.claimed(), 71)
	expectFrame[dispatch.Start](h)
	code, body, _ := h.call("GET", "/metrics", nil)
	if code != http.StatusOK {
		t.Fatalf("GET /metrics = %d", code)
	}
	out := string(body)
	for _, want := range []string{
		`vk_hub_tenant_held{tenant="acme"} 1` + "\n",
		`vk_hub_tenant_waiting{tenant="acme"} 0` + "\n",
		`vk_hub_tenant_cap{tenant="acme"} 5` + "\n",
		`vk_hub_tenant_weight{tenant="acme"} 3` + "\n",
		`vk_hub_tenant_weight{tenant="beta"} 1` + "\n",
		`vk_hub_tenant_held{tenant="beta"} 0` + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	if strings.Contains(out, `vk_hub_tenant_cap{tenant="beta"}`) {
		t.Error("beta has no cap but a cap gauge")
	}
	if t.Failed() {
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "vk_hub_tenant") {
				t.Log(l)
			}
		}
	}
}
