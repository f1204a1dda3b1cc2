package sched

import "strconv"

// ReasonCode is why a ticket or job is not (yet) placed. The set is closed;
// [Reason.Text] is the human form shown to operators ("waiting: …").
type ReasonCode uint8

// Reason codes, with their consequence.
const (
	// ReasonNone: not waiting (granted, claimed, started or unknown).
	ReasonNone ReasonCode = iota
	// ReasonNoRoom: no ready node of the placement has room; waits for room.
	ReasonNoRoom
	// ReasonQueued: eligible, room exists, other requests go first (class or share).
	ReasonQueued
	// ReasonTenantCap: the tenant holds its cap (ARB-11, ARB-13).
	ReasonTenantCap
	// ReasonRelayConcurrent: the relay holds its concurrent (ARB-11).
	ReasonRelayConcurrent
	// ReasonRunnerLimit: the runner holds its limit (ARB-11).
	ReasonRunnerLimit
	// ReasonBackoff: the runner is backed off after empty/error (ARB-20).
	ReasonBackoff
	// ReasonHeartbeat: the relay's current session has not sent a heartbeat (ARB-12).
	ReasonHeartbeat
	// ReasonProbeLimit: probe_limit probes are outstanding fleet-wide (ARB-19).
	ReasonProbeLimit
	// ReasonRunnerProbe: the runner already has a probe outstanding (ARB-19).
	ReasonRunnerProbe
	// ReasonHeadroom: only production headroom is left (ARB-15).
	ReasonHeadroom
	// ReasonOffered: an offer is out to a node, awaiting its answer.
	ReasonOffered
	// ReasonRetry: every fitting node refused; retried shortly (ARB-23).
	ReasonRetry
	// ReasonRelayDown: the relay's session is not connected.
	ReasonRelayDown
	// ReasonPlacementRules: nodes have room but the project's rules allow none (PLACE-25).
	ReasonPlacementRules
	// ReasonProjectUnlisted: the tenant no longer lists the project (ARB-41).
	ReasonProjectUnlisted
	// ReasonStarting: a start is out to a node, awaiting its answer (FAIL-15).
	ReasonStarting
	// ReasonDrain: no node has room; node N is drained for the
	// placement's first waiter and takes no new work until it fits (BS-22).
	ReasonDrain
)

// Reason is a code with the values its text names.
type Reason struct {
	Code ReasonCode
	// N is the number the text names (a cap, limit or count), if any.
	N int
}

// Text returns the operator-facing wording.
func (r Reason) Text() string {
	switch r.Code {
	case ReasonNone:
		return ""
	case ReasonNoRoom:
		return "waiting: no ready node of the placement has room"
	case ReasonQueued:
		return "waiting: queued behind earlier or higher-priority requests"
	case ReasonTenantCap:
		return "waiting: tenant cap " + strconv.Itoa(r.N) + " reached"
	case ReasonRelayConcurrent:
		return "waiting: relay concurrent " + strconv.Itoa(r.N) + " reached"
	case ReasonRunnerLimit:
		return "waiting: runner limit " + strconv.Itoa(r.N) + " reached"
	case ReasonBackoff:
		return "waiting: runner backed off after an empty or failed job request"
	case ReasonHeartbeat:
		return "waiting: relay session has not sent a heartbeat yet"
	case ReasonProbeLimit:
		return "waiting: probe limit " + strconv.Itoa(r.N) + " reached"
	case ReasonRunnerProbe:
		return "waiting: runner already has a probe outstanding"
	case ReasonHeadroom:
		return "waiting: remaining room is production headroom"
	case ReasonOffered:
		return "waiting: offer sent to a node"
	case ReasonRetry:
		return "waiting: every fitting node refused, retrying"
	case ReasonRelayDown:
		return "waiting: relay session not connected"
	case ReasonPlacementRules:
		return "waiting: project placement rules allow no node with room"
	case ReasonProjectUnlisted:
		return "waiting: project no longer listed for its tenant"
	case ReasonStarting:
		return "waiting: start sent to a node"
	case ReasonDrain:
		return "waiting: no node has room; node " + strconv.Itoa(r.N) + " takes no new work until the placement's first request fits there"
	}
	return "waiting"
}

// Messages of EndJob (ARB-41, PLACE-25, FAIL-10).
const (
	MsgPlacementRules   = "project placement rules"
	MsgProjectUnlisted  = "project no longer listed for its tenant"
	MsgNoCapacity       = "not placed within place_within_secs"
	MsgNodeLost         = "node lost"
	MsgCanceled         = "canceled before it was placed"
	MsgNotAcceptedAfter = "hub restarted before a node accepted the job"
)
