package sched_test

import (
	"testing"
	"time"

	"github.com/vk-ci/vk/sched"
	"github.com/vk-ci/vk/sched/schedtest"
)

// FuzzStep feeds the Core arbitrary event sequences: every field of every
// event comes from the fuzzer, as it would from a misbehaving relay or node
// through the hub. The Core must not panic and its bookkeeping must stay
// consistent.
func FuzzStep(f *testing.F) {
	f.Add([]byte{0, 1, 1, 4, 3, 1, 1, 2, 9, 1, 1, 3, 1, 1, 1, 4, 2, 1, 5, 2, 1})
	f.Add([]byte{0, 1, 2, 4, 3, 1, 1, 9, 9, 9, 2, 1, 1, 3, 1, 1, 0, 11, 10, 12, 1, 6, 1, 1, 7, 1})
	f.Add([]byte{0, 2, 9, 0, 1, 9, 4, 1, 1, 2, 5, 1, 3, 5, 1, 1, 4, 6, 1, 8, 7, 1, 1, 9, 1, 13, 14, 15})
	f.Fuzz(func(t *testing.T, data []byte) {
		// packing, automatic drains and the renewal bound on (BS-21, BS-22,
		// ARB-32), so their bookkeeping is fuzzed too
		h := schedtest.New(sched.Policy{Tenants: map[sched.TenantID]sched.TenantPolicy{1: {Cap: 2}},
			PackAboveUtilization: 0.5, DrainsPerPool: 1, WideFraction: 0.25, DrainMaxHold: time.Minute, ClaimRenewals: 1}, 7)
		h.Check = true
		i := 0
		next := func() uint8 {
			if i >= len(data) {
				return 0
			}
			i++
			return data[i-1]
		}
		env := schedtest.Envelope(1, 4, 1)
		for i < len(data) {
			op, a, b := next(), next(), next()
			var ev sched.Event
			switch op % 18 {
			case 0:
				r := schedtest.Node(sched.NodeID(a%4), int64(b%16), int64(b%33), 100, "linux")
				r.MaxConcurrency = int(a % 5)
				r.State = sched.NodeState(b % 6)
				ev = r
			case 1:
				ev = sched.RelayUp{Relay: sched.RelayID(a % 3), Session: uint64(b)}
			case 2:
				ev = sched.RelayInventory{Relay: sched.RelayID(a % 3), Concurrent: int(b % 5), Runners: []sched.RunnerInfo{
					schedtest.Runner(sched.RunnerID(b%4), sched.TenantID(a%3), "linux", env)}}
			case 3:
				ev = sched.RelayHeartbeat{Relay: sched.RelayID(a % 3), Runners: []sched.RunnerBeat{{
					Runner: sched.RunnerID(b % 4), RequestAdmissions: []sched.AdmissionID{sched.AdmissionID(a)},
					JobAdmissions: []sched.AdmissionID{sched.AdmissionID(b)}, UnadmittedJobs: int(a % 3)}}}
			case 4:
				ev = sched.TicketQueued{Ticket: sched.TicketID(a), Runner: sched.RunnerID(b % 4)}
			case 5:
				ev = sched.OfferReplied{Node: sched.NodeID(a % 4), Reservation: sched.ReservationID(b), Accepted: a&1 == 0, LeaseSecs: int(b)}
			case 6:
				ev = sched.Claimed{Admission: sched.AdmissionID(a)}
			case 7:
				ev = sched.Outcome{Admission: sched.AdmissionID(a), Kind: sched.OutcomeKind(b % 6)}
			case 8:
				ev = sched.JobSubmitted{Job: sched.JobID(a), Runner: sched.RunnerID(b % 4), Admission: sched.AdmissionID(b),
					Reservation: sched.ReservationID(a % 7), PlaceWithin: time.Duration(b) * time.Second, Project: "p",
					Name: []string{"", "x", "y"}[a%3]}
			case 9:
				ev = sched.JobStartReplied{Job: sched.JobID(a), Node: sched.NodeID(b % 4), Accepted: a&1 == 1}
			case 10:
				if b&1 == 0 {
					ev = sched.JobFinished{Job: sched.JobID(a)}
				} else {
					ev = sched.RenewRequested{Admission: sched.AdmissionID(a)}
				}
			case 11:
				ev = sched.JobSettled{Job: sched.JobID(a)}
			case 12:
				ev = sched.NodeLost{Node: sched.NodeID(a % 4)}
			case 13:
				ev = sched.RelayDown{Relay: sched.RelayID(a % 3)}
			case 14:
				ev = sched.LeaseGone{Reservation: sched.ReservationID(a), Why: "expired"}
			case 15:
				ev = sched.TicketCancelled{Ticket: sched.TicketID(a)}
			case 16:
				switch {
				case b&3 == 0:
					ev = sched.CeilingSet{Node: sched.NodeID(a % 4), Ceiling: int(b % 4), Zero: a&1 == 1}
				case b&3 == 1:
					ev = sched.SubmissionRefused{Admission: sched.AdmissionID(a)}
				case b&3 == 2:
					ev = sched.JobCancelled{Job: sched.JobID(a)}
				default:
					ev = sched.DrainReserve{Node: sched.NodeID(a % 4), Job: sched.JobID(b % 8)}
				}
			default:
				h.Now = h.Now.Add(time.Duration(a) * 100 * time.Millisecond)
				ev = sched.Tick{}
			}
			h.Step(ev)
			if len(h.Failures) > 0 {
				t.Fatalf("after %#v: %v", ev, h.Failures)
			}
		}
	})
}
