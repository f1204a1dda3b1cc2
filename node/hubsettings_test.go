package node

import (
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
