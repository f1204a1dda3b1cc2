package hub

import (
	"context"
	"crypto/ed25519"
	"net/http"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/pki"
	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
	"github.com/vk-ci/vk/reqsign"
)

// other returns a second enrolled relay's client for h.
func (h *harness) other(id string) *harness {
	h.t.Helper()
	key, _ := reqsign.GenerateKey()
	if err := h.srv.Store().CreatePrincipal(h.t.Context(), store.Principal{ID: id, Kind: store.KindRelay, PublicKey: key.Public().(ed25519.PublicKey), Created: testStart}); err != nil {
		h.t.Fatal(err)
	}
	o := *h
	o.relay, o.key = id, key
	tcfg, _ := pki.ClientConfig(h.srv.CAPEM(), "127.0.0.1")
	o.hc = &http.Client{Transport: &reqsign.Transport{Key: key, Principal: id, TLSConfig: tcfg, Now: h.clk.Now}}
	return &o
}

// spec: API-19, API-21, API-46, API-54
func TestReserveRefusals(t *testing.T) {
	h := newHarness(t)
	rid := client.NewRequestID()
	req := client.ReservationRequest{Runner: "r1", Queue: true, RequestID: rid, Placement: testPlacement}
	// API-21: no relay session yet.
	e := h.wantErr(http.StatusServiceUnavailable, client.CodeUnavailable, "POST", "/v1/reservations", req)
	if e.RetryAfterSecs <= 0 {
		t.Errorf("unavailable without retry_after_secs: %+v", e)
	}
	h.relayUp(1)
	for _, tc := range []struct {
		name string
		body any
	}{
		{"unparseable", []byte(`{"runner":`)},
		{"unknown field", []byte(`{"runner":"r1","queue":true,"request_id":"` + rid + `","placement":{"pool":"linux","envelope":{"mem":"2G","cpus":2,"disk":"10G"}},"extra":1}`)},
		{"trailing data", []byte(`{"runner":"r1","queue":true,"request_id":"` + rid + `","placement":{"pool":"linux","envelope":{"mem":"2G","cpus":2,"disk":"10G"}}} {}`)},
		{"bad request_id", client.ReservationRequest{Runner: "r1", Queue: true, RequestID: "xyz", Placement: testPlacement}},
		{"no runner", client.ReservationRequest{Queue: true, RequestID: rid, Placement: testPlacement}}, // API-19
		{"no pool", client.ReservationRequest{Runner: "r1", Queue: true, RequestID: rid, Placement: client.Placement{Envelope: testPlacement.Envelope}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.t = t
			h.wantErr(http.StatusBadRequest, client.CodeInvalid, "POST", "/v1/reservations", tc.body)
		})
	}
	h.t = t
	// A runner not in the session's report: 503 unavailable.
	h.wantErr(http.StatusServiceUnavailable, client.CodeUnavailable, "POST", "/v1/reservations",
		client.ReservationRequest{Runner: "nope", Queue: true, RequestID: client.NewRequestID(), Placement: testPlacement})
}

// spec: API-47, AUTH-13
func TestUnauthorized(t *testing.T) {
	h := newHarness(t)
	h.relayUp(1)
	path := "/v1/reservations/tickets/t00000000-1"
	// Unknown relay.
	stranger := *h
	key, _ := reqsign.GenerateKey()
	tcfg, _ := pki.ClientConfig(h.srv.CAPEM(), "127.0.0.1")
	stranger.hc = &http.Client{Transport: &reqsign.Transport{Key: key, Principal: "stranger", TLSConfig: tcfg, Now: h.clk.Now}}
	stranger.wantErr(http.StatusUnauthorized, client.CodeUnauthorized, "GET", path, nil)
	// Wrong key for a known relay.
	imp := stranger
	imp.hc = &http.Client{Transport: &reqsign.Transport{Key: key, Principal: h.relay, TLSConfig: tcfg, Now: h.clk.Now}}
	imp.wantErr(http.StatusUnauthorized, client.CodeUnauthorized, "GET", path, nil)
	// Time too far off (the skew is 300 s).
	skewed := *h
	skewed.hc = &http.Client{Transport: &reqsign.Transport{Key: h.key, Principal: h.relay, TLSConfig: tcfg,
		Now: func() time.Time { return h.clk.Now().Add(-301 * time.Second) }}}
	skewed.wantErr(http.StatusUnauthorized, client.CodeUnauthorized, "GET", path, nil)
	// No signature at all.
	plain := &http.Client{Transport: &http.Transport{TLSClientConfig: tcfg}}
	resp, err := plain.Get(h.srv.URL() + path)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("unsigned request = %d, want 401", resp.StatusCode)
	}
	// A removed relay.
	if err := h.srv.Store().RemovePrincipal(t.Context(), h.relay, testStart); err != nil {
		t.Fatal(err)
	}
	h.wantErr(http.StatusUnauthorized, client.CodeUnauthorized, "GET", path, nil)
}

// spec: API-22, API-23, API-24, API-25, API-26, API-44, API-50, API-52, DECISIONS 1
func TestTickets(t *testing.T) {
	h := newHarness(t)
	h.relayUp(2)
	h.nodeUp(dispatch.Held{})
	o := h.other("relay-2")

	rid := client.NewRequestID()
	req := client.ReservationRequest{Runner: "r1", Queue: true, RequestID: rid, Placement: testPlacement}
	var tk client.ReservationTicket
	h.want(http.StatusAccepted, &tk, "POST", "/v1/reservations", req)
	off := expectFrame[dispatch.Offer](h)
	// API-44: the retried request answers the existing ticket…
	var tk2 client.ReservationTicket
	h.want(http.StatusAccepted, &tk2, "POST", "/v1/reservations", req)
	if tk2.Ticket != tk.Ticket {
		t.Fatalf("retry answered ticket %q, want %q", tk2.Ticket, tk.Ticket)
	}
	h.noFrame() // …without queueing another
	// API-43: same request_id, other body.
	req2 := req
	req2.LeaseSecs = 60
	h.wantErr(http.StatusConflict, client.CodeConflict, "POST", "/v1/reservations", req2)
	// API-25: another relay's ticket reads as not found.
	o.wantErr(http.StatusNotFound, client.CodeNotFound, "GET", "/v1/reservations/tickets/"+tk.Ticket, nil)
	o.wantErr(http.StatusNotFound, client.CodeNotFound, "DELETE", "/v1/reservations/tickets/"+tk.Ticket, nil)

	h.nodeSay(&dispatch.OfferReply{Reservation: off.Reservation, Reply: dispatch.ReplyAccepted, LeaseSecs: 80})
	// …or that ticket's grant, once granted (API-44).
	var g client.ReservationGrant
	h.want(http.StatusCreated, &g, "POST", "/v1/reservations", req)
	if g.Reservation != off.Reservation || g.LeaseSecs != 80 {
		t.Fatalf("retry after grant = %+v", g)
	}
	// API-22: lease_secs is the lease left at answer time.
	h.clk.Advance(30 * time.Second)
	h.want(http.StatusCreated, &g, "GET", "/v1/reservations/tickets/"+tk.Ticket, nil)
	if g.LeaseSecs != 50 {
		t.Fatalf("lease left after 30 s = %d, want 50", g.LeaseSecs)
	}
	// API-50: another relay cannot claim it.
	o.wantErr(http.StatusNotFound, client.CodeNotFound, "POST", "/v1/reservations/"+g.Admission+"/claim", nil)
	h.want(http.StatusNoContent, nil, "POST", "/v1/reservations/"+g.Admission+"/claim", nil)
	// API-24: a claimed ticket cannot be cancelled.
	h.wantErr(http.StatusConflict, client.CodeConflict, "DELETE", "/v1/reservations/tickets/"+tk.Ticket, nil)

	// A second ticket, cancelled while offered: its offer is released.
	t2 := h.reserveFor("r2")
	off2 := expectFrame[dispatch.Offer](h)
	h.want(http.StatusNoContent, nil, "DELETE", "/v1/reservations/tickets/"+t2, nil)
	if rel := expectFrame[dispatch.Release](h); rel.Reservation != off2.Reservation {
		t.Fatalf("release = %+v, want %s", rel, off2.Reservation)
	}
	h.want(http.StatusNoContent, nil, "DELETE", "/v1/reservations/tickets/"+t2, nil) // unknown now: 204
	h.wantErr(http.StatusGone, client.CodeReservationGone, "GET", "/v1/reservations/tickets/"+t2, nil)
	// API-23: unknown tickets, and tickets of another hub start.
	h.wantErr(http.StatusGone, client.CodeReservationGone, "GET", "/v1/reservations/tickets/t"+h.srv.drv.epoch+"-999", nil)
	h.wantErr(http.StatusGone, client.CodeReservationGone, "GET", "/v1/reservations/tickets/tdeadbeef-1", nil)
	h.wantErr(http.StatusBadRequest, client.CodeInvalid, "GET", "/v1/reservations/tickets/bogus", nil)
	// DECISIONS 1: claiming an unknown grant is 410.
	h.wantErr(http.StatusGone, client.CodeReservationGone, "POST", "/v1/reservations/a999999/claim", nil)
}

// spec: API-10, API-11, API-12, ARB-03
func TestTicketLongPoll(t *testing.T) {
	h := newHarness(t)
	h.relayUp(2)
	h.nodeUp(dispatch.Held{})
	tk := h.reserve()
	off := expectFrame[dispatch.Offer](h)

	type answer struct {
		code int
		body []byte
	}
	got := make(chan answer, 1)
	go func() {
		c, b, _ := h.call("GET", "/v1/reservations/tickets/"+tk+"?wait=600", nil) // capped at 60
		got <- answer{c, b}
	}()
	waitPending(t, h, 3)
	h.nodeSay(&dispatch.OfferReply{Reservation: off.Reservation, Reply: dispatch.ReplyAccepted, LeaseSecs: 90})
	if a := <-got; a.code != http.StatusCreated {
		t.Fatalf("long poll woken by the grant = %d %s, want 201", a.code, a.body)
	}

	// A poll that reaches its limit answers 202, like one without wait.
	t2 := h.reserveFor("r2")
	expectFrame[dispatch.Offer](h)
	go func() {
		c, b, _ := h.call("GET", "/v1/reservations/tickets/"+t2+"?wait=600", nil)
		got <- answer{c, b}
	}()
	waitPending(t, h, 3)
	h.clk.Advance(59 * time.Second)
	select {
	case a := <-got:
		t.Fatalf("long poll answered after 59 s: %d %s (cap is 60 s)", a.code, a.body)
	case <-time.After(50 * time.Millisecond):
	}
	h.clk.Advance(time.Second)
	if a := <-got; a.code != http.StatusAccepted {
		t.Fatalf("long poll at its limit = %d %s, want 202", a.code, a.body)
	}
	// ARB-03: 120 s without a poll ends an unclaimed ticket.
	h.advance(121 * time.Second)
	h.wantErr(http.StatusGone, client.CodeReservationGone, "GET", "/v1/reservations/tickets/"+t2, nil)
}

// waitPending waits until the fake clock has at least n timers armed (a
// long poll's timer besides the driver's tick and the answer pruner).
func waitPending(t testing.TB, h *harness, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for h.clk.Pending() < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d timers armed, want %d", h.clk.Pending(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// spec: API-18, API-53
func TestQueuelessNoCapacity(t *testing.T) {
	h := newHarness(t)
	h.relayUp(1)
	type answer struct {
		code int
		body []byte
	}
	got := make(chan answer, 1)
	go func() {
		c, b, _ := h.call("POST", "/v1/reservations", client.ReservationRequest{Runner: "r1", RequestID: client.NewRequestID(),
			Placement: testPlacement, WaitSecs: 1}) // below 5: waits 5
		got <- answer{c, b}
	}()
	waitPending(t, h, 3)
	h.clk.Advance(4 * time.Second)
	select {
	case a := <-got:
		t.Fatalf("queue=false answered after 4 s: %d %s", a.code, a.body)
	case <-time.After(50 * time.Millisecond):
	}
	h.clk.Advance(time.Second)
	a := <-got
	if a.code != http.StatusServiceUnavailable || !contains(a.body, `"no_capacity"`) || !contains(a.body, "retry_after_secs") {
		t.Fatalf("queue=false without a node = %d %s, want 503 no_capacity with retry_after_secs", a.code, a.body)
	}
}

// spec: API-20, API-54
func TestLimits(t *testing.T) {
	h := newHarness(t)
	h.cfg.Limits.PerPrincipal = 3
	h.restart()
	h.relayUp(2)
	h.reserve()
	h.reserve()
	// request_concurrency 2 per runner
	h.wantErr(http.StatusServiceUnavailable, client.CodeUnavailable, "POST", "/v1/reservations",
		client.ReservationRequest{Runner: "r1", Queue: true, RequestID: client.NewRequestID(), Placement: testPlacement})
	// per principal: a second runner hits the principal's 3.
	d := h.srv.Driver()
	rep := &client.RelayReport{Concurrent: 10, Runners: []client.RunnerReport{
		{Name: "r1", Placement: testPlacement, RequestConcurrency: 2},
		{Name: "r2", Placement: testPlacement, RequestConcurrency: 5}}}
	if err := d.RelayFrame(t.Context(), h.relay, rep); err != nil {
		t.Fatal(err)
	}
	req := func() client.ReservationRequest {
		return client.ReservationRequest{Runner: "r2", Queue: true, RequestID: client.NewRequestID(), Placement: testPlacement}
	}
	h.want(http.StatusAccepted, nil, "POST", "/v1/reservations", req())
	e := h.wantErr(http.StatusServiceUnavailable, client.CodeUnavailable, "POST", "/v1/reservations", req())
	if e.RetryAfterSecs <= 0 {
		t.Fatalf("limit answer without retry_after_secs: %+v", e)
	}
}

// spec: API-06, API-27, API-28, API-29, API-30, API-45, ARB-34, NSESS-05, NSESS-06
func TestAdmissionLifecycle(t *testing.T) {
	h := newHarness(t)
	h.relayUp(2)
	h.nodeUp(dispatch.Held{})
	o := h.other("relay-2")

	g := h.grant()
	path := "/v1/reservations/" + g.Admission
	out := func(k client.Outcome) client.OutcomeRequest {
		return client.OutcomeRequest{Admission: g.Admission, Outcome: k}
	}
	// API-28: before claim, only released is allowed.
	h.wantErr(http.StatusConflict, client.CodeConflict, "POST", path+"/outcome", out(client.OutcomeEmpty))
	// API-27: body naming another admission: 400; unknown: 404; another's: 404.
	h.wantErr(http.StatusBadRequest, client.CodeInvalid, "POST", path+"/outcome", client.OutcomeRequest{Admission: "a12345", Outcome: client.OutcomeJob})
	h.wantErr(http.StatusNotFound, client.CodeNotFound, "POST", "/v1/reservations/a12345/outcome", client.OutcomeRequest{Admission: "a12345", Outcome: client.OutcomeJob})
	o.wantErr(http.StatusNotFound, client.CodeNotFound, "POST", path+"/outcome", out(client.OutcomeJob))
	h.wantErr(http.StatusBadRequest, client.CodeInvalid, "POST", path+"/outcome", []byte(`{"admission":"`+g.Admission+`","outcome":"maybe"}`))

	h.want(http.StatusNoContent, nil, "POST", path+"/claim", nil)
	// API-29: renew answers the lease the node granted.
	type answer struct {
		code int
		body []byte
	}
	got := make(chan answer, 1)
	go func() {
		c, b, _ := h.call("POST", path+"/renew", client.RenewRequest{})
		got <- answer{c, b}
	}()
	rn := expectFrame[dispatch.Renew](h)
	if rn.Reservation != g.Reservation {
		t.Fatalf("renew frame = %+v", rn)
	}
	h.nodeSay(&dispatch.Lease{Reservation: g.Reservation, State: dispatch.LeaseHeld, RemainingSecs: 77})
	if a := <-got; a.code != http.StatusOK || !contains(a.body, `"lease_secs":77`) {
		t.Fatalf("renew = %d %s, want 200 lease 77", a.code, a.body)
	}
	// API-28: empty ends it (ARB-34 releases the reservation); repeat 204;
	// a different outcome 409.
	h.want(http.StatusNoContent, nil, "POST", path+"/outcome", out(client.OutcomeEmpty))
	if rel := expectFrame[dispatch.Release](h); rel.Reservation != g.Reservation {
		t.Fatalf("release = %+v", rel)
	}
	h.want(http.StatusNoContent, nil, "POST", path+"/outcome", out(client.OutcomeEmpty))
	h.wantErr(http.StatusConflict, client.CodeConflict, "POST", path+"/outcome", out(client.OutcomeJob))
	// API-29: renew of an ended reservation: 410. API-30: release 204 always.
	h.wantErr(http.StatusGone, client.CodeReservationGone, "POST", path+"/renew", nil)
	h.want(http.StatusNoContent, nil, "DELETE", path, nil)
	h.want(http.StatusNoContent, nil, "DELETE", "/v1/reservations/a777777", nil)

	// A claimed grant released by DELETE, then renewed: 410.
	g2 := h.claimedFor("r2")
	h.want(http.StatusNoContent, nil, "DELETE", "/v1/reservations/"+g2.Reservation, nil) // by reservation ID too
	if rel := expectFrame[dispatch.Release](h); rel.Reservation != g2.Reservation {
		t.Fatalf("release = %+v", rel)
	}
	h.wantErr(http.StatusGone, client.CodeReservationGone, "POST", "/v1/reservations/"+g2.Admission+"/renew", nil)
}

func contains(b []byte, s string) bool { return len(s) == 0 || bytesIndex(b, s) >= 0 }

func bytesIndex(b []byte, s string) int {
	for i := 0; i+len(s) <= len(b); i++ {
		if string(b[i:i+len(s)]) == s {
			return i
		}
	}
	return -1
}

var _ = context.Background

// A relay may report runners of any placement, however large (the hub
// bounds none), and a reservation must name its runner's reported
// placement: the session report is the only source of placements.
//
// spec: AUTH-15, API-16, PLACE-03
func TestRelayPlacementsUnbounded(t *testing.T) {
	h := newHarness(t)
	huge := client.Placement{Pool: "nowhere", Labels: []string{"x"}, Envelope: client.Envelope{Mem: 4 << 40, CPUs: 4096, Disk: 64 << 40}}
	d := h.srv.Driver()
	if err := d.RelayConnected(t.Context(), h.relay, h.rsend); err != nil {
		t.Fatal(err)
	}
	rep := &client.RelayReport{Runners: []client.RunnerReport{{Name: "big", Placement: huge, RequestConcurrency: 1}}}
	if err := d.RelayFrame(t.Context(), h.relay, rep); err != nil {
		t.Fatal(err)
	}
	h.heartbeat(nil, nil)
	h.nodeUp(dispatch.Held{})
	// Accepted (queued) whatever its size; no node of its pool exists, so
	// nothing is offered (API-16).
	h.want(http.StatusAccepted, nil, "POST", "/v1/reservations", client.ReservationRequest{Runner: "big", Queue: true,
		RequestID: client.NewRequestID(), Placement: huge})
	h.noFrame()
	// A request whose placement differs from the runner's reported one is
	// refused: the report is the only source of placements (PLACE-03).
	h.wantErr(http.StatusForbidden, client.CodeForbidden, "POST", "/v1/reservations", client.ReservationRequest{Runner: "big", Queue: true,
		RequestID: client.NewRequestID(), Placement: testPlacement})
}

// oldRelay is a relay session at version 1.
type oldRelay struct{ fakeRelay }

func (oldRelay) NewWorkAllowed() bool { return false }

// spec: RSESS-11, API-48
func TestVersion1RelayNoNewWork(t *testing.T) {
	h := newHarness(t)
	d := h.srv.Driver()
	if err := d.RelayConnected(t.Context(), h.relay, &oldRelay{fakeRelay{frames: make(chan client.RelayMessage, 8)}}); err != nil {
		t.Fatal(err)
	}
	rep := &client.RelayReport{Runners: []client.RunnerReport{{Name: "r1", Placement: testPlacement, RequestConcurrency: 1}}}
	if err := d.RelayFrame(t.Context(), h.relay, rep); err != nil {
		t.Fatal(err)
	}
	h.heartbeat(nil, nil)
	h.wantErr(http.StatusForbidden, client.CodeForbidden, "POST", "/v1/reservations", client.ReservationRequest{Runner: "r1", Queue: true,
		RequestID: client.NewRequestID(), Placement: testPlacement})
	h.wantErr(http.StatusForbidden, client.CodeForbidden, "POST", "/v1/capacity", client.CapacityRequest{Placement: testPlacement})
	h.wantErr(http.StatusForbidden, client.CodeForbidden, "POST", "/v1/jobs", client.JobSubmission{Runner: "r1",
		RequestID: client.NewRequestID(), Placement: testPlacement, Spec: testSpec(71)})
}
