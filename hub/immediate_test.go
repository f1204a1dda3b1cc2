package hub

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

// with queue=true the hub answers 201 with a grant when one
// is ready at once: a ticket whose offers all went out when it was queued
// is held up to immediate_wait_ms for the node's answer; without an
// answer in time, or when no offer went out, the answer is 202 {ticket}.
//
// spec: API-17
func TestReserveImmediateWait(t *testing.T) {
	h := newHarness(t)
	h.cfg.ImmediateWaitMillis = 1000
	h.restart()
	h.relayUp(1)
	type answer struct {
		code int
		body []byte
	}
	post := func(runner string) <-chan answer {
		got := make(chan answer, 1)
		go func() {
			c, b, _ := h.call("POST", "/v1/reservations", client.ReservationRequest{Runner: runner, Queue: true,
				RequestID: client.NewRequestID(), Placement: testPlacement})
			got <- answer{c, b}
		}()
		return got
	}

	// No node: nothing was offered, so 202 at once (no timer armed).
	a := <-post("r1")
	var tk client.ReservationTicket
	if a.code != http.StatusAccepted || json.Unmarshal(a.body, &tk) != nil {
		t.Fatalf("no node: %d %s, want 202", a.code, a.body)
	}
	h.want(http.StatusNoContent, nil, "DELETE", "/v1/reservations/tickets/"+tk.Ticket, nil)
	h.nodeUp(dispatch.Held{})
	h.noFrame()

	// The node accepts within the wait: 201 with the grant.
	got := post("r2")
	off := expectFrame[dispatch.Offer](h)
	h.nodeSay(&dispatch.OfferReply{Reservation: off.Reservation, Reply: dispatch.ReplyAccepted, LeaseSecs: 90})
	a = <-got
	var g client.ReservationGrant
	if a.code != http.StatusCreated || json.Unmarshal(a.body, &g) != nil || g.Admission == "" || g.Reservation != off.Reservation {
		t.Fatalf("accepted within the wait: %d %s, want 201 with the grant of %s", a.code, a.body, off.Reservation)
	}

	// The node stays silent: after the wait, 202 with the ticket.
	got = post("r1")
	expectFrame[dispatch.Offer](h)
	waitPending(t, h, 3) // the tick, the pruner and the short wait
	select {
	case a := <-got:
		t.Fatalf("answered %d before the wait ended", a.code)
	default:
	}
	h.clk.Advance(time.Second)
	a = <-got
	tk = client.ReservationTicket{}
	if a.code != http.StatusAccepted || json.Unmarshal(a.body, &tk) != nil || tk.Ticket == "" {
		t.Fatalf("no answer in time: %d %s, want 202 with the ticket", a.code, a.body)
	}
}
