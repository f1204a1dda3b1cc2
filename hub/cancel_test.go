package hub

import (
	"net/http"
	"testing"

	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

// cancelling a queued job ends it canceled at once
// but its admission stays charged to its tenant until the relay settles it.
//
// spec: ARB-35, API-40
func TestCancelQueuedKeepsChargeUntilSettle(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	h.enrolNode("n1")
	d := h.srv.Driver()
	if err := d.SetPolicy(ctx, admin.Policy{Tenants: map[string]admin.Tenant{"web": {Cap: 1, Relays: []string{h.relay}}}}); err != nil {
		t.Fatal(err)
	}
	h.relayUp(1)
	h.nodeUp(dispatch.Held{})
	g := h.claimed()
	h.want(http.StatusNoContent, nil, "POST", "/v1/reservations/"+g.Admission+"/outcome", client.OutcomeRequest{Admission: g.Admission, Outcome: client.OutcomeJob})
	// Keep the job queued: no new placed work on the only node, and the
	// reservation lapsed.
	if err := d.SetCeiling(ctx, "n1", 0); err != nil {
		t.Fatal(err)
	}
	expectFrame[dispatch.Settings](h)
	h.nodeSay(&dispatch.Lease{Reservation: g.Reservation, State: dispatch.LeaseGone, Why: dispatch.GoneExpired})
	s := submission(g, 31)
	s.Reservation = ""
	var v client.JobView
	h.want(http.StatusCreated, &v, "POST", "/v1/jobs", s)
	if v.State != client.JobQueued {
		t.Fatalf("job = %+v, want queued", v)
	}
	h.noFrame()
	var c client.JobView
	h.want(http.StatusAccepted, &c, "POST", "/v1/jobs/"+v.ID+"/cancel", client.CancelRequest{Mode: client.CancelGraceful})
	if c.State != client.JobFinished || c.Result == nil || c.Result.Failure != client.FailureCanceled {
		t.Fatalf("cancelled queued job = %+v, want finished canceled", c)
	}
	if err := d.SetCeiling(ctx, "n1", admin.NoCeiling); err != nil {
		t.Fatal(err)
	}
	expectFrame[dispatch.Settings](h)
	// The cancelled job still holds web's cap of 1: r2 waits.
	h.reserveFor("r2")
	h.noFrame()
	h.want(http.StatusNoContent, nil, "POST", "/v1/jobs/"+v.ID+"/settle", nil)
	if off := expectFrame[dispatch.Offer](h); off.Reservation == "" {
		t.Fatalf("offer after settle = %+v", off)
	}
}

// a 4xx refusal after outcome "job" ends the admission as
// empty: its reservation is released, a repeated "empty" outcome agrees,
// and its charge is gone (a tenant cap of 1 lets the next runner in).
//
// spec: API-34
func TestRefusedAfterOutcomeJobEndsEmpty(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	d := h.srv.Driver()
	if err := d.SetPolicy(ctx, admin.Policy{Tenants: map[string]admin.Tenant{"web": {Cap: 1, Relays: []string{h.relay}}}}); err != nil {
		t.Fatal(err)
	}
	h.relayUp(1)
	h.nodeUp(dispatch.Held{})
	g := h.claimed()
	h.want(http.StatusNoContent, nil, "POST", "/v1/reservations/"+g.Admission+"/outcome", client.OutcomeRequest{Admission: g.Admission, Outcome: client.OutcomeJob})
	s := submission(g, 41)
	s.Runner = "r2" // does not match its admission: 403
	h.wantErr(http.StatusForbidden, client.CodeForbidden, "POST", "/v1/jobs", s)
	if rel := expectFrame[dispatch.Release](h); rel.Reservation != g.Reservation {
		t.Fatalf("release = %+v, want %s", rel, g.Reservation)
	}
	h.want(http.StatusNoContent, nil, "POST", "/v1/reservations/"+g.Admission+"/outcome", client.OutcomeRequest{Admission: g.Admission, Outcome: client.OutcomeEmpty})
	h.wantErr(http.StatusConflict, client.CodeConflict, "POST", "/v1/reservations/"+g.Admission+"/outcome", client.OutcomeRequest{Admission: g.Admission, Outcome: client.OutcomeJob})
	h.reserveFor("r2")
	expectFrame[dispatch.Offer](h)
}
