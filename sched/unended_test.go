package sched_test

import (
	"testing"

	"github.com/vk-ci/vk/sched"
	"github.com/vk-ci/vk/sched/schedtest"
)

// grantClaim queues ticket tk for runner r, has node 1 accept the offer and
// claims the grant; it returns the grant.
func grantClaim(t *testing.T, h *schedtest.Harness, tk sched.TicketID, r sched.RunnerID) sched.Grant {
	t.Helper()
	var off sched.Offer
	for _, a := range h.Step(sched.TicketQueued{Ticket: tk, Runner: r}) {
		if o, ok := a.(sched.Offer); ok {
			off = o
		}
	}
	if off.Reservation == 0 {
		t.Fatalf("ticket %d: no offer\n%s", tk, h.Transcript())
	}
	var g sched.Grant
	for _, a := range h.Step(sched.OfferReplied{Reservation: off.Reservation, Node: off.Node, Accepted: true, LeaseSecs: 90}) {
		if x, ok := a.(sched.Grant); ok {
			g = x
		}
	}
	if g.Admission == 0 {
		t.Fatalf("ticket %d: no grant", tk)
	}
	if v := h.Step(sched.Claimed{Admission: g.Admission})[0].(sched.Verdict); v.Code != sched.VerdictOK {
		t.Fatalf("claim: %v", v)
	}
	return g
}

func verdictCode(acts []sched.Action) sched.VerdictCode { return acts[0].(sched.Verdict).Code }

// A relay's limit counts its unended reservations, not only its unclaimed
// tickets: a claimed admission counts until it becomes a job or ends, and
// a restored admission counts too; the hub-wide limit counts the same.
//
// spec: API-20
func TestUnendedLimits(t *testing.T) {
	h := schedtest.New(sched.Policy{RelayTicketLimit: 2, TicketLimit: 3}, 1)
	h.Check = true
	ri := schedtest.Runner(1, 1, "linux", schedtest.Envelope(1, 1, 1))
	// a runner that never took a job has one probe out at a time: two
	// runners, one claim each
	h.ConnectRelay(1, 0, ri, schedtest.Runner(3, 1, "linux", schedtest.Envelope(1, 1, 1)))
	h.ConnectRelay(2, 0, schedtest.Runner(2, 1, "linux", schedtest.Envelope(1, 1, 1)))
	h.Step(schedtest.Node(1, 16, 64, 64, "linux"))
	g1 := grantClaim(t, h, 1, 1)
	grantClaim(t, h, 2, 3)
	if got := h.Core.OpenTickets(); got != 0 {
		t.Fatalf("OpenTickets = %d after two claims, want 0", got)
	}
	if acts := h.Step(sched.TicketQueued{Ticket: 3, Runner: 1}); verdictCode(acts) != sched.VerdictUnavailable ||
		acts[0].(sched.Verdict).Message != sched.MsgRelayLimit {
		t.Fatalf("third reservation with two claimed = %v, want unavailable %q", acts, sched.MsgRelayLimit)
	}
	// relay 2 has the hub's last place
	if c := verdictCode(h.Step(sched.TicketQueued{Ticket: 4, Runner: 2})); c != sched.VerdictPending {
		t.Fatalf("relay 2's first = %v, want pending", c)
	}
	if acts := h.Step(sched.TicketQueued{Ticket: 5, Runner: 2}); acts[0].(sched.Verdict).Message != sched.MsgHubLimit {
		t.Fatalf("hub-wide fourth = %v, want %q", acts, sched.MsgHubLimit)
	}
	// a job on the first admission frees its place
	if c := verdictCode(h.Step(sched.JobSubmitted{Job: 1, Runner: 1, Admission: g1.Admission, Reservation: g1.Reservation})); c != sched.VerdictOK {
		t.Fatalf("submit = %v", c)
	}
	v, ok := h.Core.Admission(g1.Admission)
	if !ok || v.State != "job" || v.Job != 1 || v.Runner != 1 || v.Ticket != 0 {
		t.Fatalf("Admission(jobbed) = %+v %v", v, ok)
	}
	if c := verdictCode(h.Step(sched.TicketQueued{Ticket: 6, Runner: 3})); c != sched.VerdictPending {
		t.Fatalf("after the job = %v, want pending", c)
	}
	if len(h.Failures) > 0 {
		t.Fatal(h.Failures)
	}
}

// Restored admissions count against their relay's limit until they end.
//
// spec: API-20
func TestUnendedRestored(t *testing.T) {
	h := schedtest.New(sched.Policy{RelayTicketLimit: 1}, 1)
	h.Check = true
	ri := schedtest.Runner(1, 1, "linux", schedtest.Envelope(1, 1, 1))
	h.Step(sched.Restore{NextID: 100, Admissions: []sched.RestoredAdmission{{Admission: 7, Reservation: 8, Node: 1,
		Runner: 1, Tenant: 1, Relay: 1, Placement: ri.Placement}}})
	v, ok := h.Core.Admission(7)
	if !ok || v.State != "claimed" || v.Reservation != 8 || v.Node != 1 || v.Ticket != 0 {
		t.Fatalf("Admission(restored) = %+v %v", v, ok)
	}
	if a, ok := h.Core.ReservationAdmission(8); !ok || a != 7 {
		t.Fatalf("ReservationAdmission(8) = %d %v, want 7", a, ok)
	}
	// before the session's first heartbeat, which decides the admission
	h.Step(sched.RelayUp{Relay: 1, Session: 1})
	h.Step(sched.RelayInventory{Relay: 1, Runners: []sched.RunnerInfo{ri}})
	if acts := h.Step(sched.TicketQueued{Ticket: 1, Runner: 1}); acts[0].(sched.Verdict).Message != sched.MsgRelayLimit {
		t.Fatalf("with a restored admission = %v, want %q", acts, sched.MsgRelayLimit)
	}
	var ended sched.AdmissionEnded
	for _, a := range h.Step(sched.Outcome{Admission: 7, Kind: sched.OutcomeEmpty}) {
		if e, ok := a.(sched.AdmissionEnded); ok {
			ended = e
		}
	}
	if ended.Admission != 7 || ended.Ticket != 0 {
		t.Fatalf("AdmissionEnded = %+v, want admission 7 without a ticket", ended)
	}
	if c := verdictCode(h.Step(sched.TicketQueued{Ticket: 2, Runner: 1})); c != sched.VerdictPending {
		t.Fatalf("after it ended = %v, want pending", c)
	}
	if len(h.Failures) > 0 {
		t.Fatal(h.Failures)
	}
}
