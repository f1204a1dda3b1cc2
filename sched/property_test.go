package sched_test

import (
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/vk-ci/vk/sched"
	"github.com/vk-ci/vk/sched/schedtest"
)

// world tracks what a driver would know from the actions so far, so the
// generator only produces plausible replies.
type world struct {
	offers   []sched.Offer
	grants   []sched.Grant
	claimed  []sched.AdmissionID
	jobAdms  []sched.AdmissionID
	starts   []sched.Start
	running  []sched.JobID
	finished []sched.JobID
	nextTk   sched.TicketID
	nextJob  sched.JobID
	session  uint64
}

func (w *world) absorb(acts []sched.Action) {
	for _, a := range acts {
		switch a := a.(type) {
		case sched.Offer:
			w.offers = append(w.offers, a)
		case sched.Grant:
			w.grants = append(w.grants, a)
		case sched.Start:
			w.starts = append(w.starts, a)
		case sched.EndJob:
			w.running = slices.DeleteFunc(w.running, func(j sched.JobID) bool { return j == a.Job })
			w.finished = append(w.finished, a.Job)
		}
	}
}

func pick[T any](t *rapid.T, xs *[]T, label string) (T, bool) {
	var zero T
	if len(*xs) == 0 {
		return zero, false
	}
	i := rapid.IntRange(0, len(*xs)-1).Draw(t, label)
	x := (*xs)[i]
	*xs = slices.Delete(*xs, i, i+1)
	return x, true
}

func testPolicy() sched.Policy {
	return sched.Policy{
		Tenants: map[sched.TenantID]sched.TenantPolicy{
			1: {Weight: 1, Cap: 3}, 2: {Weight: 2, Cap: 5}, 3: {Weight: 1},
		},
		ProductionRunners: map[sched.RunnerID]bool{4: true},
		Headroom: []sched.HeadroomEntry{{Placement: sched.Placement{Pool: "linux",
			Envelope: schedtest.Envelope(2, 4, 10)}, Slots: 2}},
		ProbeLimit: 2,
	}
}

// history generates and applies one random history, returning the events
// fed (with their times) and checking invariants after every step.
func history(t *rapid.T, seed uint64) (*schedtest.Harness, []timedEvent) {
	return historyWith(t, seed, genOpts{policy: testPolicy, runners: 4})
}

// genOpts shapes a generated history: the policy (also what PolicyChanged
// sends), how many of the runners (1..5; runner 5 is wide) submit, and a
// check run after every step with the node views from before it.
type genOpts struct {
	policy  func() sched.Policy
	runners int
	check   func(t *rapid.T, h *schedtest.Harness, before []sched.NodeView, ev sched.Event, acts []sched.Action)
}

func historyWith(t *rapid.T, seed uint64, o genOpts) (*schedtest.Harness, []timedEvent) {
	testPolicy := o.policy
	h := schedtest.New(testPolicy(), seed)
	h.Check = true
	var log []timedEvent
	w := &world{nextTk: 1, nextJob: 1}
	stepH := func(ev sched.Event) []sched.Action {
		var before []sched.NodeView
		if o.check != nil {
			before = h.Core.Nodes()
		}
		acts := h.Step(ev)
		if o.check != nil {
			o.check(t, h, before, ev, acts)
		}
		return acts
	}
	step := func(ev sched.Event) {
		log = append(log, timedEvent{h.Now, ev})
		w.absorb(stepH(ev))
	}
	nNodes := rapid.IntRange(1, 4).Draw(t, "nodes")
	for i := 1; i <= nNodes; i++ {
		r := schedtest.Node(sched.NodeID(i), int64(rapid.IntRange(2, 16).Draw(t, "cpu")),
			int64(rapid.IntRange(4, 32).Draw(t, "mem")), 100, "linux")
		r.MaxConcurrency = rapid.IntRange(0, 4).Draw(t, "max")
		step(r)
	}
	runners := []sched.RunnerInfo{
		schedtest.Runner(1, 1, "linux", schedtest.Envelope(2, 4, 10)),
		schedtest.Runner(2, 2, "linux", schedtest.Envelope(1, 2, 5)),
		schedtest.Runner(3, 3, "linux", schedtest.Envelope(2, 4, 10)),
		schedtest.Runner(4, 3, "linux", schedtest.Envelope(2, 4, 10)),
	}
	runners[0].Limit = 2
	if o.runners >= 5 {
		runners = append(runners, schedtest.Runner(5, 3, "linux", schedtest.Envelope(8, 16, 10)))
	}
	w.session = 1
	step(sched.RelayUp{Relay: 1, Session: w.session})
	step(sched.RelayInventory{Relay: 1, Concurrent: rapid.IntRange(0, 6).Draw(t, "concurrent"), Runners: runners})
	step(sched.RelayHeartbeat{Relay: 1})

	n := rapid.IntRange(10, 120).Draw(t, "steps")
	for range n {
		switch rapid.IntRange(0, 21).Draw(t, "op") {
		case 0, 1:
			step(sched.TicketQueued{Ticket: w.nextTk, Runner: sched.RunnerID(rapid.IntRange(1, o.runners).Draw(t, "runner"))})
			w.nextTk++
		case 2, 3:
			if o, ok := pick(t, &w.offers, "offer"); ok {
				step(sched.OfferReplied{Node: o.Node, Reservation: o.Reservation,
					Accepted: rapid.Bool().Draw(t, "accept"), LeaseSecs: 90})
			}
		case 4:
			if g, ok := pick(t, &w.grants, "grant"); ok {
				step(sched.Claimed{Admission: g.Admission})
				w.claimed = append(w.claimed, g.Admission)
			}
		case 5:
			if a, ok := pick(t, &w.claimed, "claimed"); ok {
				k := sched.OutcomeKind(rapid.IntRange(1, 4).Draw(t, "kind"))
				step(sched.Outcome{Admission: a, Kind: k})
				if k == sched.OutcomeJob {
					w.jobAdms = append(w.jobAdms, a)
				}
			}
		case 6:
			if a, ok := pick(t, &w.jobAdms, "jobadm"); ok {
				// the runner is whatever the grant said; find it via a
				// submission on each runner until one is accepted
				for r := sched.RunnerID(1); r <= sched.RunnerID(o.runners); r++ {
					acts := stepH(sched.JobSubmitted{Job: w.nextJob, Runner: r, Admission: a, PlaceWithin: 300 * time.Second})
					log = append(log, timedEvent{h.Now, sched.JobSubmitted{Job: w.nextJob, Runner: r, Admission: a, PlaceWithin: 300 * time.Second}})
					w.absorb(acts)
					if v, ok := acts[0].(sched.Verdict); ok && v.Code == sched.VerdictOK {
						break
					}
				}
				w.nextJob++
			}
		case 7:
			var images []string
			if rapid.Bool().Draw(t, "built") {
				images = []string{"dockerfile:app"}
			}
			step(sched.JobSubmitted{Job: w.nextJob, Runner: sched.RunnerID(rapid.IntRange(1, o.runners).Draw(t, "runner")),
				PlaceWithin: time.Duration(rapid.IntRange(0, 300).Draw(t, "within")) * time.Second,
				Project:     "p", Images: images, Name: []string{"", "short", "long"}[rapid.IntRange(0, 2).Draw(t, "jobname")]})
			w.nextJob++
		case 8:
			if s, ok := pick(t, &w.starts, "start"); ok {
				acc := rapid.Bool().Draw(t, "started")
				step(sched.JobStartReplied{Job: s.Job, Node: s.Node, Accepted: acc})
				if acc {
					w.running = append(w.running, s.Job)
				}
			}
		case 9:
			if j, ok := pick(t, &w.running, "running"); ok {
				step(sched.JobFinished{Job: j, Name: []string{"", "short", "long"}[rapid.IntRange(0, 2).Draw(t, "name")],
					Wall: time.Duration(rapid.IntRange(0, 600).Draw(t, "wall")) * time.Minute})
				w.finished = append(w.finished, j)
			}
		case 10:
			if j, ok := pick(t, &w.finished, "finished"); ok {
				step(sched.JobSettled{Job: j})
			}
		case 11:
			h.Now = h.Now.Add(time.Duration(rapid.IntRange(0, 30000).Draw(t, "ms")) * time.Millisecond)
			step(sched.Tick{})
		case 12:
			if rapid.IntRange(0, 5).Draw(t, "lost") == 0 {
				nd := sched.NodeID(rapid.IntRange(1, nNodes).Draw(t, "node"))
				step(sched.NodeLost{Node: nd})
				r := schedtest.Node(nd, 8, 16, 100, "linux")
				step(r)
			} else {
				step(sched.CeilingSet{Node: sched.NodeID(rapid.IntRange(1, nNodes).Draw(t, "node")), Ceiling: rapid.IntRange(0, 3).Draw(t, "ceiling"),
					Zero: rapid.IntRange(0, 3).Draw(t, "zero") == 0})
			}
		case 14:
			step(sched.TicketCancelled{Ticket: sched.TicketID(rapid.IntRange(1, int(w.nextTk)).Draw(t, "cancel"))})
		case 15:
			if g, ok := pick(t, &w.grants, "gone"); ok {
				step(sched.LeaseGone{Reservation: g.Reservation, Why: "expired"})
				w.claimed = append(w.claimed, g.Admission) // the relay may still try
			}
		case 16:
			nd := sched.NodeID(rapid.IntRange(1, nNodes).Draw(t, "node"))
			if rapid.Bool().Draw(t, "unreachable") {
				step(sched.NodeUnreachable{Node: nd})
			} else {
				r := schedtest.Node(nd, 8, 16, 100, "linux")
				var held sched.Held
				for _, s := range w.starts {
					if s.Node == nd && rapid.Bool().Draw(t, "listed") {
						held.Jobs = append(held.Jobs, s.Job)
					}
				}
				r.Held = &held
				step(r)
			}
		case 17:
			p := testPolicy()
			tp := p.Tenants[1]
			tp.Cap = rapid.IntRange(0, 4).Draw(t, "cap")
			p.Tenants[1] = tp
			p.ProbeLimit = rapid.IntRange(1, 3).Draw(t, "probes")
			step(sched.PolicyChanged{Policy: p})
		case 18:
			step(sched.RelayHeartbeat{Relay: 1, Runners: []sched.RunnerBeat{{Runner: sched.RunnerID(rapid.IntRange(1, 4).Draw(t, "runner")),
				RequestAdmissions: slices.Clone(w.claimed), JobAdmissions: slices.Clone(w.jobAdms),
				UnadmittedJobs: rapid.IntRange(0, 2).Draw(t, "unadmitted")}}})
		case 19:
			step(sched.DrainReserve{Node: sched.NodeID(rapid.IntRange(1, nNodes).Draw(t, "node")),
				Job: sched.JobID(rapid.IntRange(0, int(w.nextJob)).Draw(t, "job"))})
		case 20:
			// API-34: the driver refused the admission's submission.
			if a, ok := pick(t, &w.jobAdms, "refused"); ok {
				step(sched.SubmissionRefused{Admission: a})
			}
		case 21:
			// ARB-35: a queued job cancelled; it settles later (op 10/11).
			step(sched.JobCancelled{Job: sched.JobID(rapid.IntRange(0, int(w.nextJob)).Draw(t, "cancelled"))})
		case 13:
			step(sched.RelayDown{Relay: 1})
			w.session++
			step(sched.RelayUp{Relay: 1, Session: w.session})
			step(sched.RelayHeartbeat{Relay: 1, Runners: []sched.RunnerBeat{{Runner: 1, JobAdmissions: slices.Clone(w.jobAdms)}}})
		}
		if len(h.Failures) > 0 {
			t.Fatalf("invariants broken:\n%s\ntranscript:\n%s", h.Failures, h.Transcript())
		}
	}
	return h, log
}

type timedEvent struct {
	at time.Time
	ev sched.Event
}

// spec: ARB-11, ARB-15, ARB-19, PLACE-05, PLACE-13, FAIL-14
//
// TestPropertyInvariants: over generated histories no node goes over its
// memory, disk or cap, no tenant over its cap, headroom holds for normal
// work, no ticket is granted twice, no job is started twice, and the
// Core's bookkeeping always matches a recount.
func TestPropertyInvariants(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		history(t, rapid.Uint64().Draw(t, "seed"))
	})
}

// TestPropertyDeterministic: the same seed and events give a
// byte-identical transcript.
func TestPropertyDeterministic(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		seed := rapid.Uint64().Draw(t, "seed")
		h1, log := history(t, seed)
		h2 := schedtest.New(testPolicy(), seed)
		for _, e := range log {
			h2.Now = e.at
			h2.Step(e.ev)
		}
		if a, b := h1.Transcript(), h2.Transcript(); a != b {
			t.Fatalf("transcripts differ:\n--- first\n%s\n--- replay\n%s", a, b)
		}
	})
}
