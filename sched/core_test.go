package sched_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/vk-ci/vk/sched"
	"github.com/vk-ci/vk/sched/schedtest"
)

// offerOf returns the first offer among acts, nil when none.
func offerOf(acts []sched.Action) *sched.Offer {
	for _, a := range acts {
		if o, ok := a.(sched.Offer); ok {
			return &o
		}
	}
	return nil
}

// backoffAfter has a busy runner (it took a job just now, so it makes no
// probes) get k empty outcomes at once, then queues two tickets and
// returns how long after the empties the first (the lead request) and the
// second were offered, measured in 10 ms ticks. The lead is granted but
// never claimed, so it does not move the backoff on.
func backoffAfter(t *testing.T, seed uint64, k int) (lead, rest time.Duration) {
	t.Helper()
	h := schedtest.New(sched.Policy{}, seed)
	h.Check = true
	h.Step(schedtest.Node(1, 8, 64, 100, "linux"))
	ri := schedtest.Runner(1, 1, "linux", schedtest.Envelope(1, 4, 1))
	ri.RequestConcurrency = 16
	h.ConnectRelay(1, 0, ri)
	grant := func(tk sched.TicketID) sched.Grant {
		t.Helper()
		o := offerOf(h.Step(sched.TicketQueued{Ticket: tk, Runner: 1}))
		if o == nil {
			t.Fatalf("ticket %d: no offer", tk)
		}
		g := h.Step(sched.OfferReplied{Node: o.Node, Reservation: o.Reservation, Accepted: true})[0].(sched.Grant)
		h.Step(sched.Claimed{Admission: g.Admission})
		return g
	}
	g := grant(1)
	h.Step(sched.Outcome{Admission: g.Admission, Kind: sched.OutcomeJob})
	var gs []sched.Grant
	for i := range k {
		gs = append(gs, grant(sched.TicketID(i+2)))
	}
	for _, g := range gs {
		h.Step(sched.Outcome{Admission: g.Admission, Kind: sched.OutcomeEmpty})
	}
	ended := h.Now
	a, b := sched.TicketID(k+2), sched.TicketID(k+3)
	h.Step(sched.TicketQueued{Ticket: a, Runner: 1})
	h.Step(sched.TicketQueued{Ticket: b, Runner: 1})
	for (lead == 0 || rest == 0) && h.Now.Sub(ended) < 2*time.Minute {
		for _, x := range h.Advance(10 * time.Millisecond) {
			if o, ok := x.(sched.Offer); ok {
				switch o.Ticket {
				case a:
					lead = h.Now.Sub(ended)
					// granted, never claimed: the lead stays out
					h.Step(sched.OfferReplied{Node: o.Node, Reservation: o.Reservation, Accepted: true})
				case b:
					rest = h.Now.Sub(ended)
				}
			}
		}
		h.Step(sched.TicketPolled{Ticket: a}) // keep the tickets alive
		h.Step(sched.TicketPolled{Ticket: b})
	}
	if len(h.Failures) > 0 {
		t.Fatal(h.Failures)
	}
	return lead, rest
}

// spec: ARB-20, ARB-21
//
// TestBackoffDoublesWithJitter: after k consecutive empty outcomes a
// runner's requests wait initial·2^(k-1) capped at max (1 s doubling to
// 60 s), ±25 % jitter from the seed — all but its lead request, which
// waits only the base interval (DECISIONS 14).
func TestBackoffDoublesWithJitter(t *testing.T) {
	want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60}
	var firsts []time.Duration
	for seed := uint64(1); seed <= 3; seed++ {
		for k := 1; k <= len(want); k++ {
			lead, rest := backoffAfter(t, seed, k)
			base := want[k-1] * time.Second
			lo, hi := base*3/4, base*5/4+10*time.Millisecond
			if rest < lo || rest > hi {
				t.Errorf("seed %d: after %d empties the other requests waited %v, want within [%v, %v]", seed, k, rest, lo, hi)
			}
			if lead < 750*time.Millisecond || lead > 1260*time.Millisecond {
				t.Errorf("seed %d: after %d empties the lead request waited %v, want the base 1 s ±25 %%", seed, k, lead)
			}
			if k == 3 {
				firsts = append(firsts, rest)
			}
		}
	}
	// the jitter comes from the seed: different seeds, different delays
	if firsts[0] == firsts[1] && firsts[1] == firsts[2] {
		t.Errorf("seeds 1..3 gave identical backoffs %v: no jitter", firsts)
	}
}

// spec: ARB-20
//
// TestBackoffLeadRequestOnly: an idle runner answered empty again and again
// asks GitLab about once per base interval — its lead request, one at a
// time — however long the empty spell lasts (DECISIONS 14: gitlab-runner
// with check_interval = 1 asks once a second), and a ticket of it queued
// 10 minutes into the spell is offered within the base interval.
func TestBackoffLeadRequestOnly(t *testing.T) {
	h := schedtest.New(sched.Policy{}, 1)
	h.Check = true
	h.Step(schedtest.Node(1, 8, 64, 100, "linux"))
	h.ConnectRelay(1, 0, schedtest.Runner(1, 1, "linux", schedtest.Envelope(1, 4, 1)))
	// four request loops, as the relay runs them: each re-queues at once
	// after its answer
	next := sched.TicketID(1)
	queued := map[sched.TicketID]bool{}
	queue := func() {
		queued[next] = true
		h.Step(sched.TicketQueued{Ticket: next, Runner: 1})
		next++
	}
	for range 4 {
		queue()
	}
	offers := 0
	var answered []time.Time
	start := h.Now
	for h.Now.Sub(start) < 10*time.Minute {
		for _, a := range h.Advance(10 * time.Millisecond) {
			o, ok := a.(sched.Offer)
			if !ok {
				continue
			}
			offers++
			g := h.Step(sched.OfferReplied{Node: o.Node, Reservation: o.Reservation, Accepted: true})[0].(sched.Grant)
			h.Step(sched.Claimed{Admission: g.Admission})
			h.Step(sched.Outcome{Admission: g.Admission, Kind: sched.OutcomeEmpty})
			answered = append(answered, h.Now)
			delete(queued, o.Ticket)
			queue()
		}
		if h.Now.Sub(start)%(30*time.Second) == 0 {
			for tk := range queued {
				h.Step(sched.TicketPolled{Ticket: tk})
			}
		}
	}
	if len(h.Failures) > 0 {
		t.Fatal(h.Failures)
	}
	// 600 s at one request per 0.75..1.25 s, plus the first burst
	if offers < 400 || offers > 900 {
		t.Errorf("%d GitLab requests in 10 minutes of empty answers, want about one a second", offers)
	}
	for i := 1; i < len(answered); i++ {
		if gap := answered[i].Sub(answered[i-1]); gap > 1260*time.Millisecond {
			t.Fatalf("request %d came %v after the previous one: a request waited longer than the base interval", i, gap)
		}
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

// spec: ARB-20
//
// TestBackoffEasesOneRequestPerJob: when the lead request of a runner
// backed off for a long empty spell brings a job, the lead goes again at
// once but still alone (one more GitLab request, not one per request
// loop); each further job in a row lets one more request ask, and jobs in
// a row as many as the runner's request loops (4 here) clear the backoff,
// every waiting request going; a job and then an empty answer leave only
// the lead asking (DECISIONS 14).
func TestBackoffEasesOneRequestPerJob(t *testing.T) {
	for _, tc := range []struct {
		name string
		then []sched.OutcomeKind // answers after the first job, one at a time
		want []int               // requests out within 500 ms of each
	}{
		{"jobs in a row", []sched.OutcomeKind{sched.OutcomeJob, sched.OutcomeJob, sched.OutcomeJob}, []int{2, 3, 4}},
		{"job then empty", []sched.OutcomeKind{sched.OutcomeEmpty}, []int{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newOneRunner()
			h := r.h
			answer := func(k sched.OutcomeKind) {
				o := r.offers[0]
				r.offers = r.offers[1:]
				r.collect(h.Step(sched.Outcome{Admission: r.claim(o), Kind: k}))
				r.queue() // a loop queues again at once after its answer
			}
			for range 4 {
				r.queue()
			}
			// 30 s of empty answers: the runner is backed off far beyond
			// the base interval, only its lead request asking
			for start := h.Now; h.Now.Sub(start) < 30*time.Second; {
				for len(r.offers) > 0 {
					answer(sched.OutcomeEmpty)
				}
				r.collect(h.Advance(10 * time.Millisecond))
			}
			for len(r.offers) == 0 {
				r.collect(h.Advance(10 * time.Millisecond))
			}
			answer(sched.OutcomeJob)
			r.within(500 * time.Millisecond)
			if len(r.offers) != 1 {
				t.Fatalf("after the lead's job %d requests went within 500 ms, want the lead alone at once", len(r.offers))
			}
			for i, k := range tc.then {
				answer(k)
				r.within(500 * time.Millisecond)
				if len(r.offers) != tc.want[i] {
					t.Fatalf("after a job and then %v, %d requests out within 500 ms, want %d", tc.then[:i+1], len(r.offers), tc.want[i])
				}
			}
			if len(h.Failures) > 0 {
				t.Fatal(h.Failures)
			}
		})
	}
}

// spec: ARB-20, ARB-33
//
// TestReleasedKeepsTheBackoff: a backed-off runner's lead request held
// longer than the backoff (Workhorse long-polling it) comes back
// released; the runner stays backed off, so only the lead asks again, at
// once, not every loop of the runner for what is at most the one job that
// changed its queue (docs/capacity-policy.md, "One request for one job
// under long polling").
func TestReleasedKeepsTheBackoff(t *testing.T) {
	r := newOneRunner()
	h := r.h
	for range 4 {
		r.queue()
	}
	// the probe brings a job: the runner is busy and every loop asks
	a := r.claim(r.offers[0])
	r.offers = r.offers[1:]
	r.collect(h.Step(sched.Outcome{Admission: a, Kind: sched.OutcomeJob}))
	r.queue()
	r.collect(h.Advance(100 * time.Millisecond))
	if len(r.offers) != 4 {
		t.Fatalf("%d requests out after a job, want every loop's", len(r.offers))
	}
	// one empty answer backs the runner off for about a second; the
	// other loops, granted too, give their grants back unasked
	var adms []sched.AdmissionID
	for _, o := range r.offers {
		adms = append(adms, r.claim(o))
	}
	r.offers = nil
	r.collect(h.Step(sched.Outcome{Admission: adms[0], Kind: sched.OutcomeEmpty}))
	r.queue()
	for _, a := range adms[1:] { // given back unasked while the lead waits
		r.collect(h.Step(sched.Outcome{Admission: a, Kind: sched.OutcomeReleased}))
		r.queue()
	}
	for len(r.offers) == 0 {
		r.collect(h.Advance(10 * time.Millisecond))
	}
	if len(r.offers) != 1 {
		t.Fatalf("%d requests after the backoff, want the lead alone", len(r.offers))
	}
	lead := r.claim(r.offers[0])
	r.offers = nil
	// the lead is held 10 s, far past the backoff, and comes back released
	for end := h.Now.Add(10 * time.Second); h.Now.Before(end); {
		r.collect(h.Advance(100 * time.Millisecond))
	}
	n := len(r.offers)
	r.collect(h.Step(sched.Outcome{Admission: lead, Kind: sched.OutcomeReleased}))
	r.queue()
	r.within(500 * time.Millisecond)
	if got := len(r.offers) - n; got != 1 {
		t.Fatalf("%d requests within 500 ms of the held lead's release (%d while it was held), want the lead alone at once", got, n)
	}
	if len(h.Failures) > 0 {
		t.Fatal(h.Failures)
	}
}

// oneRunner is the stage of the backoff tests: a checked harness with one
// node (8 CPUs) and runner 1 on relay 1 (up to 4 jobs of 1 CPU), and the
// offers its steps made that the test has not answered yet.
type oneRunner struct {
	h      *schedtest.Harness
	offers []sched.Offer
	next   sched.TicketID // the next ticket queue mints
}

func newOneRunner() *oneRunner {
	h := schedtest.New(sched.Policy{}, 1)
	h.Check = true
	h.Step(schedtest.Node(1, 8, 64, 100, "linux"))
	h.ConnectRelay(1, 0, schedtest.Runner(1, 1, "linux", schedtest.Envelope(1, 4, 1)))
	return &oneRunner{h: h, next: 1}
}

// collect keeps the offers among acts.
func (r *oneRunner) collect(acts []sched.Action) {
	for _, a := range acts {
		if o, ok := a.(sched.Offer); ok {
			r.offers = append(r.offers, o)
		}
	}
}

// queue queues the runner's next ticket.
func (r *oneRunner) queue() {
	r.collect(r.h.Step(sched.TicketQueued{Ticket: r.next, Runner: 1}))
	r.next++
}

// claim accepts offer o on its node and claims the grant.
func (r *oneRunner) claim(o sched.Offer) sched.AdmissionID {
	g := r.h.Step(sched.OfferReplied{Node: o.Node, Reservation: o.Reservation, Accepted: true})[0].(sched.Grant)
	r.h.Step(sched.Claimed{Admission: g.Admission})
	return g.Admission
}

// within advances the clock by d in 10 ms ticks, collecting offers.
func (r *oneRunner) within(d time.Duration) {
	for end := r.h.Now.Add(d); r.h.Now.Before(end); {
		r.collect(r.h.Advance(10 * time.Millisecond))
	}
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
