package hub

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
	"github.com/vk-ci/vk/sched"
	"pgregory.net/rapid"
)

func TestIDRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.Uint64Range(1, 1<<63).Draw(t, "n")
		if got, ok := parseAdmission(admissionWire(sched.AdmissionID(n))); !ok || uint64(got) != n {
			t.Fatalf("admission %d → %q → %d %v", n, admissionWire(sched.AdmissionID(n)), got, ok)
		}
		if got, ok := parseReservation(reservationWire(sched.ReservationID(n))); !ok || uint64(got) != n {
			t.Fatalf("reservation %d round trip: %d %v", n, got, ok)
		}
		ep := rapid.StringMatching(`[0-9a-f]{8}`).Draw(t, "epoch")
		got, same, ok := parseTicket(ticketWire(ep, sched.TicketID(n)), ep)
		if !ok || !same || uint64(got) != n {
			t.Fatalf("ticket %d round trip: %d %v %v", n, got, same, ok)
		}
		if _, same, ok := parseTicket(ticketWire(ep, sched.TicketID(n)), "other"); !ok || same {
			t.Fatalf("ticket of another epoch read as ours")
		}
	})
	for _, bad := range []string{"", "a", "a0", "a01", "r-1", "ax", "a18446744073709551616", "t-1", "t1", "tzz-1", "t12-0", "b5"} {
		_, aok := parseAdmission(bad)
		_, rok := parseReservation(bad)
		_, _, tok := parseTicket(bad, "12")
		if aok || rok || tok {
			t.Errorf("%q parsed as an ID", bad)
		}
	}
}

func genPlacement(t *rapid.T) client.Placement {
	labels := rapid.SliceOfDistinct(rapid.StringMatching(`[a-z]{1,6}`), func(s string) string { return s }).Draw(t, "labels")
	if len(labels) == 0 {
		labels = nil
	}
	return client.Placement{
		Pool:   rapid.StringMatching(`[a-z]{1,8}`).Draw(t, "pool"),
		Labels: labels,
		Envelope: client.Envelope{
			Mem:  client.Size(rapid.Int64Range(1, 1<<40).Draw(t, "mem")),
			CPUs: rapid.IntRange(1, 256).Draw(t, "cpus"),
			Disk: client.Size(rapid.Int64Range(1, 1<<42).Draw(t, "disk")),
		},
	}
}

func TestPlacementRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := genPlacement(t)
		back := placementFromSched(placementToSched(p))
		if !samePlacement(p, back) || back.Envelope != p.Envelope || back.Pool != p.Pool {
			t.Fatalf("placement %+v → %+v", p, back)
		}
		k, ok := parsePlacementKey(placementKey(p))
		if !ok || !samePlacement(k, p) {
			t.Fatalf("placement key of %+v read back as %+v", p, k)
		}
		// label order does not matter
		rev := p
		rev.Labels = append([]string(nil), p.Labels...)
		for i, j := 0, len(rev.Labels)-1; i < j; i, j = i+1, j-1 {
			rev.Labels[i], rev.Labels[j] = rev.Labels[j], rev.Labels[i]
		}
		if !samePlacement(p, rev) {
			t.Fatalf("reversed labels differ: %+v", p)
		}
	})
}

func TestOutcomeRoundTrip(t *testing.T) {
	for _, o := range []client.Outcome{client.OutcomeJob, client.OutcomeEmpty, client.OutcomeError, client.OutcomeReleased} {
		if got := outcomes.fromSched(outcomeToSched(o), client.OutcomeOther); got != o {
			t.Errorf("outcome %s → %s", o, got)
		}
	}
	if outcomeToSched(client.OutcomeOther) != sched.OutcomeNone {
		t.Error("other outcome maps to a real one")
	}
}

func TestEnumTable(t *testing.T) {
	tab := enumTable[string, int]{{"one", 1}, {"two", 2}}
	for _, tc := range []struct {
		wire  string
		sched int
	}{{"one", 1}, {"two", 2}} {
		if got := tab.toSched(tc.wire, -1); got != tc.sched {
			t.Errorf("toSched(%q) = %d, want %d", tc.wire, got, tc.sched)
		}
		if got := tab.fromSched(tc.sched, "?"); got != tc.wire {
			t.Errorf("fromSched(%d) = %q, want %q", tc.sched, got, tc.wire)
		}
	}
	if got := tab.toSched("three", -1); got != -1 {
		t.Errorf("toSched(unknown) = %d, want the caller's -1", got)
	}
	if got := tab.fromSched(3, "?"); got != "?" {
		t.Errorf("fromSched(unknown) = %q, want the caller's ?", got)
	}
}

// fromSched returns s's wire value in t, or unknown if s has no row: the
// table read backwards, as only the tests need it.
func (t enumTable[W, S]) fromSched(s S, unknown W) W {
	for _, p := range t {
		if p.sched == s {
			return p.wire
		}
	}
	return unknown
}

// checkBijection fails unless each wire value and each sched value stands
// in at most one row of tab (else one direction would lose a value).
func checkBijection[W, S comparable](t *testing.T, name string, tab enumTable[W, S]) {
	t.Helper()
	wires, scheds := map[W]bool{}, map[S]bool{}
	for _, p := range tab {
		if wires[p.wire] || scheds[p.sched] {
			t.Errorf("%s: row %v repeats a value", name, p)
		}
		wires[p.wire], scheds[p.sched] = true, true
	}
}

func TestEnumTablesComplete(t *testing.T) {
	checkBijection(t, "outcomes", outcomes)
	checkBijection(t, "nodeStates", nodeStates)
	// Every outcome a core event may carry has a wire name (none is
	// OutcomeNone, the "no outcome yet" zero value).
	for k := sched.OutcomeJob; k <= sched.OutcomeReleased; k++ {
		if got := outcomes.fromSched(k, client.OutcomeOther); got == client.OutcomeOther || outcomeToSched(got) != k {
			t.Errorf("outcome %s → %q → %s", k, got, outcomeToSched(got))
		}
	}
	if got := outcomes.fromSched(sched.OutcomeNone, client.OutcomeOther); got != client.OutcomeOther {
		t.Errorf("outcome none has wire name %q", got)
	}
	for _, o := range []client.Outcome{"", client.OutcomeOther, "teleported"} {
		if got := outcomeToSched(o); got != sched.OutcomeNone {
			t.Errorf("outcomeToSched(%q) = %s, want none", o, got)
		}
	}
	// Every core node state has a wire name; unknown wire states take no
	// work (maintenance).
	for s := sched.NodeReady; s <= sched.NodeMaintenance; s++ {
		if got := nodeStateToSched(nodeStates.fromSched(s, "")); got != s {
			t.Errorf("node state %s → %q → %s", s, nodeStates.fromSched(s, ""), got)
		}
	}
	for _, s := range []dispatch.NodeState{"", dispatch.NodeOther, "melting"} {
		if got := nodeStateToSched(s); got != sched.NodeMaintenance {
			t.Errorf("nodeStateToSched(%q) = %s, want maintenance", s, got)
		}
	}
}

func TestDispatchConversions(t *testing.T) {
	for _, s := range []dispatch.NodeState{dispatch.NodeReady, dispatch.NodeDraining, dispatch.NodeDrained, dispatch.NodeQuarantined, dispatch.NodeMaintenance} {
		if got := nodeStates.fromSched(nodeStateToSched(s), ""); got != s {
			t.Errorf("node state %s → %s", s, got)
		}
	}
	if nodeStateToSched(dispatch.NodeOther) == sched.NodeReady {
		t.Error("an unknown node state reads as ready")
	}
	rapid.Check(t, func(t *rapid.T) {
		env := genPlacement(t).Envelope
		rid := sched.ReservationID(rapid.Uint64Range(1, 1<<62).Draw(t, "rid"))
		off := offerFromSched(sched.Offer{Reservation: rid, Envelope: envelopeToSched(env), LeaseSecs: 90})
		if off.Envelope != env {
			t.Fatalf("offer envelope %+v, want %+v", off.Envelope, env)
		}
		acc := rapid.Bool().Draw(t, "accepted")
		rep := dispatch.OfferReply{Reservation: off.Reservation, Reply: dispatch.ReplyRefused, Reason: dispatch.RefusalMemory}
		if acc {
			rep = dispatch.OfferReply{Reservation: off.Reservation, Reply: dispatch.ReplyAccepted, LeaseSecs: 60}
		}
		ev, ok := offerReplyToSched(7, rep)
		want := sched.OfferReplied{Node: 7, Reservation: rid, Accepted: acc}
		if acc {
			want.LeaseSecs = 60
		} else {
			want.Reason = "memory"
		}
		if !ok || !cmp.Equal(ev, want) {
			t.Fatalf("offer reply → %+v, want %+v", ev, want)
		}
		for _, l := range []dispatch.Lease{
			{Reservation: off.Reservation, State: dispatch.LeaseHeld, RemainingSecs: 33},
			{Reservation: off.Reservation, State: dispatch.LeaseGone, Why: dispatch.GoneExpired},
		} {
			ev, ok := leaseToSched(l)
			switch e := ev.(type) {
			case sched.Renewed:
				if !ok || e.Reservation != rid || e.RemainingSecs != 33 {
					t.Fatalf("lease held → %+v", e)
				}
			case sched.LeaseGone:
				if !ok || e.Reservation != rid || e.Why != "expired" {
					t.Fatalf("lease gone → %+v", e)
				}
			default:
				t.Fatalf("lease → %T", ev)
			}
		}
	})
	held, unknown := heldToSched(dispatch.Held{
		Reservations: []dispatch.HeldReservation{{Reservation: "r5"}, {Reservation: "junk"}},
		Jobs:         []dispatch.HeldJob{{Job: "known"}, {Job: "stranger"}},
	}, func(id string) (sched.JobID, bool) { return 9, id == "known" })
	if !cmp.Equal(held, &sched.Held{Reservations: []sched.ReservationID{5}, Jobs: []sched.JobID{9}}) || !cmp.Equal(unknown, []string{"stranger"}) {
		t.Fatalf("held → %+v, unknown %v", held, unknown)
	}
}

func TestHeartbeatToSched(t *testing.T) {
	hb := client.RelayHeartbeat{Runners: []client.RunnerHeartbeat{
		{Name: "b", RequestAdmissions: []string{"a3", "bogus"}, JobAdmissions: []client.JobAdmission{{GitLabJob: 1, Admission: "a4"}, {GitLabJob: 2}}},
		{Name: "a", RequestAdmissions: []string{"a1"}},
		{Name: "gone"},
	}}
	ids := map[string]sched.RunnerID{"a": 2, "b": 1}
	got := heartbeatToSched(5, hb, func(n string) (sched.RunnerID, bool) { id, ok := ids[n]; return id, ok })
	want := sched.RelayHeartbeat{Relay: 5, Runners: []sched.RunnerBeat{
		{Runner: 1, RequestAdmissions: []sched.AdmissionID{3}, JobAdmissions: []sched.AdmissionID{4}, UnadmittedJobs: 1},
		{Runner: 2, RequestAdmissions: []sched.AdmissionID{1}},
	}}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("heartbeat (-want +got):\n%s", d)
	}
}
