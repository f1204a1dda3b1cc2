package hub

import (
	"net/http"
	"testing"
	"time"

	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

// An outcome carrying next takes the outcome, then queues next as POST
// /v1/reservations would: 202 with its ticket (201 once granted), the
// same ticket for a retry of the outcome and for a POST of next's own
// body under its request_id, so a relay that lost the answer loses no
// place and makes no second reservation.
//
// spec: API-27, API-44, ARB-34
func TestOutcomeNext(t *testing.T) {
	h := newHarness(t)
	h.relayUp(2)
	h.nodeUp(dispatch.Held{})

	g := h.claimed()
	next := client.ReservationRequest{Runner: "r1", Queue: true, RequestID: client.NewRequestID(), Placement: testPlacement}
	body := client.OutcomeRequest{Admission: g.Admission, Outcome: client.OutcomeEmpty, Next: &next}
	path := "/v1/reservations/" + g.Admission + "/outcome"

	var tk client.ReservationTicket
	h.want(http.StatusAccepted, &tk, "POST", path, body)
	if tk.Ticket == "" {
		t.Fatal("outcome with next answered no ticket")
	}
	// The outcome came first: its reservation was released (ARB-34),
	// then next was queued, and offered once the empty answer's backoff
	// (ARB-20: 1 s ±25%) has passed.
	if rel := expectFrame[dispatch.Release](h); rel.Reservation != g.Reservation {
		t.Fatalf("release = %+v, want %s", rel, g.Reservation)
	}
	h.noFrame()
	h.advance(2 * time.Second)
	off := expectFrame[dispatch.Offer](h)
	// A retried outcome with the same next: the same ticket, no new offer.
	var again client.ReservationTicket
	h.want(http.StatusAccepted, &again, "POST", path, body)
	if again.Ticket != tk.Ticket {
		t.Fatalf("retried outcome answered ticket %q, want %q", again.Ticket, tk.Ticket)
	}
	// A POST of next alone under its request_id: the same ticket.
	h.want(http.StatusAccepted, &again, "POST", "/v1/reservations", next)
	if again.Ticket != tk.Ticket {
		t.Fatalf("POST of next answered ticket %q, want %q", again.Ticket, tk.Ticket)
	}
	h.noFrame()
	// Once granted, a retry answers the grant.
	h.nodeSay(&dispatch.OfferReply{Reservation: off.Reservation, Reply: dispatch.ReplyAccepted, LeaseSecs: 90})
	var g2 client.ReservationGrant
	h.want(http.StatusCreated, &g2, "POST", path, body)
	if g2.Reservation != off.Reservation {
		t.Fatalf("retried outcome after the grant = %+v, want reservation %s", g2, off.Reservation)
	}
	// A different outcome is refused as before (API-28), and makes no
	// reservation.
	other := body
	other.Outcome = client.OutcomeJob
	h.wantErr(http.StatusConflict, client.CodeConflict, "POST", path, other)
	h.noFrame()
	// next with the same request_id and another body: the outcome stands
	// (a repeat), the reservation is refused, so 204 and no offer; the
	// relay's own POST then answers 409.
	changed := next
	changed.LeaseSecs = 60
	body.Next = &changed
	h.want(http.StatusNoContent, nil, "POST", path, body)
	h.noFrame()
	h.wantErr(http.StatusConflict, client.CodeConflict, "POST", "/v1/reservations", changed)
}

// A body the hub refuses takes no outcome, and an outcome it refuses makes
// no reservation; an outcome it takes whose next fails answers 204.
//
// spec: API-19, API-27, API-28
func TestOutcomeNextRefusals(t *testing.T) {
	h := newHarness(t)
	h.relayUp(2)
	h.nodeUp(dispatch.Held{})

	g := h.claimed()
	path := "/v1/reservations/" + g.Admission + "/outcome"
	withNext := func(n client.ReservationRequest) client.OutcomeRequest {
		return client.OutcomeRequest{Admission: g.Admission, Outcome: client.OutcomeEmpty, Next: &n}
	}
	rid := client.NewRequestID()
	for _, tc := range []struct {
		name string
		next client.ReservationRequest
	}{
		{"next does not queue", client.ReservationRequest{Runner: "r1", RequestID: rid, Placement: testPlacement}},
		{"next names no runner", client.ReservationRequest{Queue: true, RequestID: rid, Placement: testPlacement}},
		{"next has a bad request_id", client.ReservationRequest{Runner: "r1", Queue: true, RequestID: "xyz", Placement: testPlacement}},
		{"next has no pool", client.ReservationRequest{Runner: "r1", Queue: true, RequestID: rid, Placement: client.Placement{Envelope: testPlacement.Envelope}}},
		{"next has a negative lease", client.ReservationRequest{Runner: "r1", Queue: true, RequestID: rid, Placement: testPlacement, LeaseSecs: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.t = t
			h.wantErr(http.StatusBadRequest, client.CodeInvalid, "POST", path, withNext(tc.next))
			h.noFrame() // the outcome was not taken: nothing released
		})
	}
	h.t = t
	h.wantErr(http.StatusBadRequest, client.CodeInvalid, "POST", path,
		[]byte(`{"admission":"`+g.Admission+`","outcome":"empty","next":{"runner":"r1","queue":true,"request_id":"`+rid+`","placement":{"pool":"linux","envelope":{"mem":"2G","cpus":2,"disk":"10G"}},"extra":1}}`))
	h.noFrame()

	// An outcome refused: no reservation either (a grant not claimed
	// takes only released, API-28).
	g2 := h.grantFor("r2")
	h.wantErr(http.StatusConflict, client.CodeConflict, "POST", "/v1/reservations/"+g2.Admission+"/outcome",
		client.OutcomeRequest{Admission: g2.Admission, Outcome: client.OutcomeEmpty,
			Next: &client.ReservationRequest{Runner: "r2", Queue: true, RequestID: client.NewRequestID(), Placement: testPlacement}})
	h.noFrame()

	// The outcome taken, next refused by the scheduler's driver (a runner
	// the session did not report): 204, the reservation released, no
	// offer; the relay's own POST of next answers the error.
	bad := client.ReservationRequest{Runner: "nope", Queue: true, RequestID: client.NewRequestID(), Placement: testPlacement}
	h.want(http.StatusNoContent, nil, "POST", path, withNext(bad))
	if rel := expectFrame[dispatch.Release](h); rel.Reservation != g.Reservation {
		t.Fatalf("release = %+v, want %s", rel, g.Reservation)
	}
	h.noFrame()
	h.wantErr(http.StatusServiceUnavailable, client.CodeUnavailable, "POST", "/v1/reservations", bad)
}
