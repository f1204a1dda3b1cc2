package ledger

// Reason is why the ledger refused an offer or a start. The values are the
// wire names of NSESS-21; the node session converts them at its edge.
type Reason string

// Refusal reasons (NSESS-21).
const (
	// ReasonMemory: the envelope's memory does not fit what is free.
	ReasonMemory Reason = "memory"
	// ReasonDisk: the envelope's disk does not fit what is free.
	ReasonDisk Reason = "disk"
	// ReasonCPUs: the envelope's vCPUs do not fit what is free.
	ReasonCPUs Reason = "cpus"
	// ReasonNotReady: the node is draining, drained, quarantined or in
	// maintenance.
	ReasonNotReady Reason = "not_ready"
	// ReasonPolicy: the node's own policy refuses the work. The ledger never
	// returns it; it is here so callers share one set of names.
	ReasonPolicy Reason = "policy"
	// ReasonNoReservation: a start named a reservation the node does not hold
	// and the job does not fit without it (NODE-08).
	ReasonNoReservation Reason = "no_reservation"
	// ReasonInvalid: the request is malformed (empty ID, negative or empty
	// envelope, non-positive lease, an ID reused with another envelope).
	ReasonInvalid Reason = "invalid"
	// ReasonCeiling: held reservations plus unfinished jobs reach the hub's
	// ceiling as last applied (PLACE-06).
	ReasonCeiling Reason = "ceiling"
	// ReasonConcurrency: the same count reaches the node's own
	// max_concurrency (PLACE-06).
	ReasonConcurrency Reason = "concurrency"
	// ReasonRunner: a local gitlab-runner with the vk executor is present
	// (PLACE-08).
	ReasonRunner Reason = "runner"
)

// GoneWhy is why a reservation is no longer held (NSESS-13).
type GoneWhy string

// Why a reservation ended.
const (
	// GoneExpired: its lease ran out on the node's monotonic clock (NODE-03).
	GoneExpired GoneWhy = "expired"
	// GoneReleased: the hub released it, or a quarantine did (NODE-05).
	GoneReleased GoneWhy = "released"
	// GoneStarted: a start converted it into a job's entry (NODE-07).
	GoneStarted GoneWhy = "started"
	// GoneUnknown: the ledger never held it, or has forgotten it.
	GoneUnknown GoneWhy = "unknown"
)

// State is the node's admission state.
type State string

// Node states. Every state but StateReady refuses offers and starts without a
// reservation with [ReasonNotReady].
const (
	StateReady       State = "ready"
	StateDraining    State = "draining"
	StateDrained     State = "drained"
	StateQuarantined State = "quarantined"
	StateMaintenance State = "maintenance"
)

// Valid reports whether s is one of the known states.
func (s State) Valid() bool {
	switch s {
	case StateReady, StateDraining, StateDrained, StateQuarantined, StateMaintenance:
		return true
	}
	return false
}
