package hub

import (
	"cmp"

	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
	"github.com/vk-ci/vk/proto/job"
	"github.com/vk-ci/vk/sched"
)

// This file is the one edge between proto/dispatch (node-session frames)
// and sched's compact types. Node IDs on the wire are the nodes' principal
// IDs; the driver's idTable maps them to sched.NodeID.

// nodeStates are the node states both sides know (an [enumTable]).
var nodeStates = enumTable[dispatch.NodeState, sched.NodeState]{
	{dispatch.NodeReady, sched.NodeReady},
	{dispatch.NodeDraining, sched.NodeDraining},
	{dispatch.NodeDrained, sched.NodeDrained},
	{dispatch.NodeQuarantined, sched.NodeQuarantined},
	{dispatch.NodeMaintenance, sched.NodeMaintenance},
}

// nodeStateToSched maps a state the hub does not know (a newer node's, or
// "other") to maintenance, where an unknown outcome is refused instead: a
// node's state is not a request to judge but a fact to act on, and a node
// in a state the hub cannot read is safest taking no work (the core
// offers only to ready nodes), as in maintenance.
func nodeStateToSched(s dispatch.NodeState) sched.NodeState {
	return nodeStates.toSched(s, sched.NodeMaintenance)
}

// reportToSched converts a node's report. state is the node's last
// heartbeat state (ready until one says otherwise).
func reportToSched(id sched.NodeID, r dispatch.Report, state dispatch.NodeState) sched.NodeReport {
	return sched.NodeReport{
		Node:           id,
		Capacity:       sched.Resources{MemBytes: r.Resources.Mem.Bytes(), DiskBytes: r.Resources.Disk.Bytes(), CPUs: int64(r.Resources.CPUs)},
		Pools:          r.Pools,
		Labels:         r.Labels,
		MaxConcurrency: r.MaxConcurrency,
		LocalRunner:    r.LocalRunner,
		State:          nodeStateToSched(state),
	}
}

// heldToSched converts a node's held list; job maps a wire job ID to the
// core's (ok false: a job this hub does not know, reported with a zero ID
// the core answers with a cancel when it has a core ID, else dropped here
// and cancelled by the driver).
func heldToSched(h dispatch.Held, job func(string) (sched.JobID, bool)) (*sched.Held, []string) {
	out := &sched.Held{}
	var unknown []string
	for _, r := range h.Reservations {
		if id, ok := parseReservation(r.Reservation); ok {
			out.Reservations = append(out.Reservations, id)
		}
	}
	for _, j := range h.Jobs {
		if id, ok := job(j.Job); ok {
			out.Jobs = append(out.Jobs, id)
		} else {
			unknown = append(unknown, j.Job)
		}
	}
	return out, unknown
}

func offerReplyToSched(node sched.NodeID, r dispatch.OfferReply) (sched.OfferReplied, bool) {
	id, ok := parseReservation(r.Reservation)
	if !ok {
		return sched.OfferReplied{}, false
	}
	return sched.OfferReplied{Node: node, Reservation: id, Accepted: r.Reply == dispatch.ReplyAccepted,
		LeaseSecs: r.LeaseSecs, Reason: string(r.Reason)}, true
}

// leaseToSched converts a lease answer into Renewed or LeaseGone.
func leaseToSched(l dispatch.Lease) (sched.Event, bool) {
	id, ok := parseReservation(l.Reservation)
	if !ok {
		return nil, false
	}
	if l.State == dispatch.LeaseHeld {
		return sched.Renewed{Reservation: id, RemainingSecs: l.RemainingSecs}, true
	}
	return sched.LeaseGone{Reservation: id, Why: string(cmp.Or(l.Why, dispatch.GoneUnknown))}, true
}

func offerFromSched(a sched.Offer) dispatch.Offer {
	return dispatch.Offer{Reservation: reservationWire(a.Reservation), Envelope: envelopeFromSched(a.Envelope), LeaseSecs: a.LeaseSecs}
}

func releaseFromSched(a sched.Release) dispatch.Release {
	return dispatch.Release{Reservation: reservationWire(a.Reservation)}
}

func renewFromSched(a sched.Renew) dispatch.Renew {
	return dispatch.Renew{Reservation: reservationWire(a.Reservation), LeaseSecs: a.LeaseSecs}
}

// startFromSched builds the start frame; spec is the job's full spec, with
// its secrets (the node needs them).
func startFromSched(a sched.Start, jobID string, spec job.JobSpec) dispatch.Start {
	s := dispatch.Start{Job: jobID, Envelope: envelopeFromSched(a.Envelope), Spec: spec}
	if a.Reservation != 0 {
		s.Reservation = reservationWire(a.Reservation)
	}
	return s
}

func cancelFrame(jobID string, mode client.CancelMode) dispatch.Cancel {
	return dispatch.Cancel{Job: jobID, Mode: mode}
}
