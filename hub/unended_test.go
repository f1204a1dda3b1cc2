package hub

import (
	"net/http"
	"testing"

	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

// A claimed admission counts against its relay's limit of unended
// reservations until a job takes it (the core counts, the hub answers
// 503 with a retry hint of 5 s).
//
// spec: API-20
func TestLimitCountsClaimed(t *testing.T) {
	h := newHarness(t)
	h.cfg.Limits.PerPrincipal = 2
	h.restart()
	h.relayUp(2)
	h.nodeUp(dispatch.Held{})
	g := h.claimedFor("r1")
	h.claimedFor("r2")
	req := client.ReservationRequest{Runner: "r1", Queue: true, RequestID: client.NewRequestID(), Placement: testPlacement}
	e := h.wantErr(http.StatusServiceUnavailable, client.CodeUnavailable, "POST", "/v1/reservations", req)
	if e.RetryAfterSecs != 5 {
		t.Fatalf("relay limit answer retry_after_secs = %d, want 5", e.RetryAfterSecs)
	}
	h.submitOn(g, 71)
	expectFrame[dispatch.Start](h)
	req.RequestID = client.NewRequestID()
	h.want(http.StatusAccepted, nil, "POST", "/v1/reservations", req)
}
