package node

import (
	"slices"
	"testing"

	"github.com/vk-ci/vk/proto/dispatch"
)

// a hub ceiling of 0 and the hub's drain refuse new
// offers; a later settings frame without them lifts them.
//
// spec: OPS-02, NODE-05
func TestHubDrain(t *testing.T) {
	tests := []struct {
		name     string
		settings []dispatch.Settings
		want     dispatch.RefusalReason // "" = accepted
	}{
		{name: "zero", settings: []dispatch.Settings{{CeilingZero: true}}, want: dispatch.RefusalCeiling},
		{name: "zero4", settings: []dispatch.Settings{{Ceiling: 4, CeilingZero: true}}, want: dispatch.RefusalCeiling},
		{name: "drain", settings: []dispatch.Settings{{Drain: true}}, want: dispatch.RefusalCeiling},
		{name: "undrain", settings: []dispatch.Settings{{Drain: true}, {}}},
		{name: "unzero", settings: []dispatch.Settings{{CeilingZero: true}, {Ceiling: 2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, _ := connected(t, nil, Options{})
			for _, s := range tt.settings {
				h.send(&s)
			}
			from := h.mark()
			h.send(&dispatch.Offer{Reservation: "r-test", Envelope: env1, LeaseSecs: 90})
			rep, _ := waitFor(h, from, func(r *dispatch.OfferReply) bool { return r.Reservation == "r-test" })
			switch {
			case tt.want == "" && rep.Reply != dispatch.ReplyAccepted:
				t.Errorf("offer_reply = %+v, want accepted", rep)
			case tt.want != "" && (rep.Reply != dispatch.ReplyRefused || rep.Reason != tt.want):
				t.Errorf("offer_reply = %+v, want refused %s", rep, tt.want)
			}
		})
	}
}

// A settings frame that only sets a ceiling or a drain leaves the node in
// the pools of its config; one naming pools replaces them, with
// pools_set an empty list too, and a later frame without pools restores
// the config's.
//
// spec: OPS-01, OPS-02
func TestHubSettingsKeepPools(t *testing.T) {
	tests := []struct {
		name     string
		settings []dispatch.Settings
		want     []string
	}{
		{name: "drain", settings: []dispatch.Settings{{Drain: true}}, want: []string{"linux"}},
		{name: "undrain", settings: []dispatch.Settings{{Drain: true}, {}}, want: []string{"linux"}},
		{name: "ceiling", settings: []dispatch.Settings{{Ceiling: 2}}, want: []string{"linux"}},
		{name: "ceiling zero then none", settings: []dispatch.Settings{{CeilingZero: true}, {}}, want: []string{"linux"}},
		{name: "pools", settings: []dispatch.Settings{{Pools: []string{"gpu"}, PoolsSet: true}}, want: []string{"gpu"}},
		{name: "pools then drain", settings: []dispatch.Settings{{Pools: []string{"gpu"}, PoolsSet: true}, {Pools: []string{"gpu"}, PoolsSet: true, Drain: true}}, want: []string{"gpu"}},
		{name: "no pool", settings: []dispatch.Settings{{PoolsSet: true}}, want: nil},
		{name: "pools withdrawn", settings: []dispatch.Settings{{Pools: []string{"gpu"}, PoolsSet: true}, {}}, want: []string{"linux"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, _ := connected(t, func(c *Config) { c.Node.Pools = []string{"linux"} }, Options{})
			for _, s := range tt.settings {
				h.send(&s)
			}
			// A marker frame round trip: every settings frame before it
			// has been applied when its answer comes.
			from := h.mark()
			h.send(&dispatch.Offer{Reservation: "r-mark", Envelope: env1, LeaseSecs: 90})
			waitFor(h, from, func(r *dispatch.OfferReply) bool { return r.Reservation == "r-mark" })
			var last *dispatch.Report
			h.mu.Lock()
			for _, m := range h.log {
				if r, ok := m.(*dispatch.Report); ok {
					last = r
				}
			}
			h.mu.Unlock()
			if last == nil {
				t.Fatal("no report")
			}
			if !slices.Equal(last.Pools, tt.want) {
				t.Errorf("last report's pools = %q, want %q", last.Pools, tt.want)
			}
		})
	}
}

// The report carries [node] name, so the hub shows the configured name.
func TestReportNamesNode(t *testing.T) {
	h, _ := connected(t, func(c *Config) { c.Node.Name = "ci-17" }, Options{})
	if rep, _ := waitFor[*dispatch.Report](h, 0, nil); rep.Name != "ci-17" {
		t.Errorf("report name = %q, want ci-17", rep.Name)
	}
}
