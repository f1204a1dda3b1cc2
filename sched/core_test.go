package sched_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/vk-ci/vk/sched"
	"github.com/vk-ci/vk/sched/schedtest"
)

// backoffDelays returns how long the runner waited after each of n
// consecutive empty outcomes, measured in 10 ms ticks.
func backoffDelays(t *testing.T, seed uint64, n int) []time.Duration {
	t.Helper()
	h := schedtest.New(sched.Policy{}, seed)
	h.Check = true
	h.Step(schedtest.Node(1, 8, 64, 100, "linux"))
	h.ConnectRelay(1, 0, schedtest.Runner(1, 1, "linux", schedtest.Envelope(1, 4, 1)))
	var out []time.Duration
	offerOf := func(acts []sched.Action) *sched.Offer {
		for _, a := range acts {
			if o, ok := a.(sched.Offer); ok {
				return &o
			}
		}
		return nil
	}
	o := offerOf(h.Step(sched.TicketQueued{Ticket: 1, Runner: 1}))
	for i := range n {
		if o == nil {
			t.Fatalf("round %d: no offer", i)
		}
		var g sched.Grant
		for _, a := range h.Step(sched.OfferReplied{Node: o.Node, Reservation: o.Reservation, Accepted: true}) {
			g = a.(sched.Grant)
		}
		h.Step(sched.Claimed{Admission: g.Admission})
		h.Step(sched.Outcome{Admission: g.Admission, Kind: sched.OutcomeEmpty})
		ended := h.Now
		o = offerOf(h.Step(sched.TicketQueued{Ticket: sched.TicketID(i + 2), Runner: 1}))
		for o == nil && h.Now.Sub(ended) < 2*time.Minute {
			o = offerOf(h.Advance(10 * time.Millisecond))
			// keep the ticket alive
			h.Step(sched.TicketPolled{Ticket: sched.TicketID(i + 2)})
		}
		out = append(out, h.Now.Sub(ended))
	}
	if len(h.Failures) > 0 {
		t.Fatal(h.Failures)
	}
	return out
}

// spec: ARB-20, ARB-21
func TestBackoffDoublesWithJitter(t *testing.T) {
	want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60}
	for seed := uint64(1); seed <= 5; seed++ {
		got := backoffDelays(t, seed, len(want))
		for i, d := range got {
			base := want[i] * time.Second
			lo, hi := base*3/4, base*5/4+10*time.Millisecond
			if d < lo || d > hi {
				t.Errorf("seed %d: backoff %d = %v, want within [%v, %v]", seed, i+1, d, lo, hi)
			}
		}
	}
	// the jitter comes from the seed: different seeds, different delays
	a, b := backoffDelays(t, 1, 3), backoffDelays(t, 2, 3)
	if a[0] == b[0] && a[1] == b[1] && a[2] == b[2] {
		t.Errorf("seeds 1 and 2 gave identical backoffs %v: no jitter", a)
	}
}

// spec: ARB-20
func TestJobOutcomeClearsBackoff(t *testing.T) {
	h := schedtest.New(sched.Policy{ProbeLimit: 5}, 1)
	h.Step(schedtest.Node(1, 8, 64, 100, "linux"))
	h.ConnectRelay(1, 0, schedtest.Runner(1, 1, "linux", schedtest.Envelope(1, 4, 1)))
	grant := func(tk sched.TicketID) sched.Grant {
		t.Helper()
		acts := h.Step(sched.TicketQueued{Ticket: tk, Runner: 1})
		o, ok := acts[len(acts)-1].(sched.Offer)
		if !ok {
			t.Fatalf("ticket %d: no offer in %v", tk, acts)
		}
		g := h.Step(sched.OfferReplied{Node: o.Node, Reservation: o.Reservation, Accepted: true})[0].(sched.Grant)
		h.Step(sched.Claimed{Admission: g.Admission})
		return g
	}
	g := grant(1)
	h.Step(sched.Outcome{Admission: g.Admission, Kind: sched.OutcomeError})
	h.Advance(3 * time.Second)
	g = grant(2)
	h.Step(sched.Outcome{Admission: g.Admission, Kind: sched.OutcomeJob})
	// no backoff now: the next ticket is offered at once
	grant(3)
}

// spec: ARB-14, PLACE-19
func TestPolicyValidate(t *testing.T) {
	tests := []struct {
		name string
		p    sched.Policy
		ok   bool
	}{
		{"zero", sched.Policy{}, true},
		{"64 headroom", sched.Policy{Headroom: make([]sched.HeadroomEntry, 64)}, true},
		{"65 headroom", sched.Policy{Headroom: make([]sched.HeadroomEntry, 65)}, false},
		{"65 rules", sched.Policy{Tenants: map[sched.TenantID]sched.TenantPolicy{1: {Projects: map[string]sched.ProjectPolicy{
			"p": {Rules: make([]sched.PlacementRule, 65)}}}}}, false},
		{"257 pools", sched.Policy{Tenants: map[sched.TenantID]sched.TenantPolicy{1: {Projects: map[string]sched.ProjectPolicy{
			"p": {Rules: []sched.PlacementRule{{Pools: make([]string, 257)}}}}}}}, false},
		{"bad glob", sched.Policy{Tenants: map[sched.TenantID]sched.TenantPolicy{1: {Projects: map[string]sched.ProjectPolicy{
			"p": {Rules: []sched.PlacementRule{{Branches: []string{"["}}}}}}}}, false},
		{"negative cap", sched.Policy{Tenants: map[sched.TenantID]sched.TenantPolicy{1: {Cap: -1}}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Validate()
			if (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, sched.ErrInvalidPolicy) {
				t.Fatalf("Validate() = %v, not ErrInvalidPolicy", err)
			}
		})
	}
}

// spec: API-20
func TestTicketLimitPerRunner(t *testing.T) {
	h := schedtest.New(sched.Policy{}, 1)
	h.Check = true
	ri := schedtest.Runner(1, 1, "linux", schedtest.Envelope(1, 4, 1))
	ri.RequestConcurrency = 2
	h.ConnectRelay(1, 0, ri)
	var codes []sched.VerdictCode
	for tk := sched.TicketID(1); tk <= 3; tk++ {
		codes = append(codes, h.Step(sched.TicketQueued{Ticket: tk, Runner: 1})[0].(sched.Verdict).Code)
	}
	want := []sched.VerdictCode{sched.VerdictPending, sched.VerdictPending, sched.VerdictUnavailable}
	if !slices.Equal(codes, want) {
		t.Fatalf("verdicts = %v, want %v", codes, want)
	}
	// a cancelled ticket frees its place
	h.Step(sched.TicketCancelled{Ticket: 1})
	if v := h.Step(sched.TicketQueued{Ticket: 4, Runner: 1})[0].(sched.Verdict); v.Code != sched.VerdictPending {
		t.Fatalf("after a cancel: %v, want pending", v)
	}
	if len(h.Failures) > 0 {
		t.Fatal(h.Failures)
	}
}

// spec: ARB-03, ARB-12
//
// A new session that replaces one the driver never reported ended still
// ends the old session's unclaimed tickets, and the relay waits for the new
// session's heartbeat.
func TestNewSessionEndsOldTickets(t *testing.T) {
	h := schedtest.New(sched.Policy{}, 1)
	h.Check = true
	h.ConnectRelay(1, 0, schedtest.Runner(1, 1, "linux", schedtest.Envelope(1, 4, 1)))
	h.Step(sched.TicketQueued{Ticket: 1, Runner: 1})
	acts := h.Step(sched.RelayUp{Relay: 1, Session: 99})
	if len(acts) != 1 || acts[0].(sched.Expire).Ticket != 1 {
		t.Fatalf("RelayUp(new session) = %v, want ticket 1 expired", acts)
	}
	h.Step(sched.TicketQueued{Ticket: 2, Runner: 1})
	if v, _ := h.Core.Ticket(2); v.Wait.Code != sched.ReasonHeartbeat {
		t.Fatalf("ticket 2 waits for %v, want the new session's heartbeat", v.Wait.Text())
	}
	if acts := h.Step(sched.RelayUp{Relay: 1, Session: 99}); len(acts) != 0 {
		t.Fatalf("a repeated RelayUp = %v, want nothing", acts)
	}
	if len(h.Failures) > 0 {
		t.Fatal(h.Failures)
	}
}
