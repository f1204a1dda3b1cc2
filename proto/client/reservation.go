package client

import (
	"fmt"

	"github.com/vk-ci/vk/proto/internal/enum"
)

// ReservationRequest is the body of POST /v1/reservations (PROTO-03,
// API-03, API-16..21): set a placement's envelope aside on a node before
// asking GitLab for a job.
type ReservationRequest struct {
	// Runner names the relay's runner; required for relays (API-19).
	Runner string `json:"runner,omitempty"`
	// Queue: join the queue and answer 202 ReservationTicket unless a grant
	// is ready at once (API-17). False: wait up to WaitSecs, then 503
	// no_capacity (API-18).
	Queue bool `json:"queue,omitempty"`
	// RequestID makes the request idempotent (API-42, API-44). Required;
	// see NewRequestID.
	RequestID string `json:"request_id"`
	// Placement is the shape to reserve. Required.
	Placement Placement `json:"placement"`
	// LeaseSecs is the lease asked for, in seconds; 0 means the hub's
	// default (90, ARB-28). Nodes cap leases at 600 (NODE-04).
	LeaseSecs int `json:"lease_secs,omitempty"`
	// WaitSecs bounds the wait when Queue is false, in seconds (at least 5,
	// at most 60); ignored when queued.
	WaitSecs int `json:"wait_secs,omitempty"`
}

// ReservationGrant is a node's acceptance of a reservation (PROTO-03,
// ARB-24): the answer 201 to POST /v1/reservations and to a ticket GET, and
// 200 to renew.
type ReservationGrant struct {
	// Admission is the ID the relay claims, reports the outcome on, and
	// names in its job's submission.
	Admission string `json:"admission"`
	// Reservation is the reservation's ID on the hub and node.
	Reservation string `json:"reservation"`
	// Node is the ID of the node holding it.
	Node string `json:"node"`
	// Envelope is the room set aside.
	Envelope Envelope `json:"envelope"`
	// LeaseSecs is what remains of the node's lease at answer time, in
	// seconds (ARB-30, API-22); the relay counts it from when it sent its
	// request (ARB-31).
	LeaseSecs int `json:"lease_secs"`
}

// ReservationTicket is the answer 202 to a queued reservation request and
// to a ticket GET while it waits (PROTO-03, API-04, API-22).
type ReservationTicket struct {
	// Ticket is the ID to poll at /v1/reservations/tickets/<ticket>.
	Ticket string `json:"ticket"`
}

// RenewRequest is the body of POST /v1/reservations/<id>/renew (API-06,
// API-29): restart the lease from now.
type RenewRequest struct {
	// LeaseSecs is the lease asked for, in seconds; 0 means the hub's
	// default (90). The answer's grant says what the node granted.
	LeaseSecs int `json:"lease_secs,omitempty"`
}

// Outcome is what came of a claimed admission (PROTO-04, ARB-33). Unknown
// values decode to OutcomeOther, which the hub refuses as invalid.
type Outcome string

// Admission outcomes.
const (
	OutcomeJob      Outcome = "job"      // GitLab gave a job; a submission follows
	OutcomeEmpty    Outcome = "empty"    // GitLab answered 204
	OutcomeError    Outcome = "error"    // the GitLab request failed
	OutcomeReleased Outcome = "released" // given back without asking GitLab
	OutcomeOther    Outcome = "other"    // not known to this version
)

var knownOutcomes = []Outcome{OutcomeJob, OutcomeEmpty, OutcomeError, OutcomeReleased, OutcomeOther}

// UnmarshalText maps unknown outcomes to OutcomeOther.
func (o *Outcome) UnmarshalText(b []byte) error {
	*o = enum.Parse(string(b), OutcomeOther, knownOutcomes)
	return nil
}

// OutcomeRequest is the body of POST /v1/reservations/<admission>/outcome
// (PROTO-04, API-05, API-27, API-28).
type OutcomeRequest struct {
	// Admission must equal the path's (else 400 invalid). Required.
	Admission string `json:"admission"`
	// Outcome is exactly one of job, empty, error, released. Required.
	Outcome Outcome `json:"outcome"`
	// Next, when set, is the runner's next reservation request, made by
	// the same answer once the outcome is taken: 201 with its grant or
	// 202 with its ticket instead of 204, so an empty answer from GitLab
	// costs no separate POST /v1/reservations. It must queue, and it is
	// idempotent by its own request_id exactly as that POST is (API-44):
	// a retried outcome with the same Next answers the same ticket. An
	// outcome the hub refuses makes no reservation; one it takes while the
	// reservation fails is answered 204, and the relay then sends Next as
	// a POST of its own, with the same request_id, which answers the
	// error. Only hubs of relay session version 4 or newer know the field
	// (older ones refuse it 400 invalid).
	Next *ReservationRequest `json:"next,omitempty"`
}

// Validate checks the admission is set, the outcome one of the four and
// Next, when set, queued; errors wrap ErrInvalid. The hub checks Next's
// other fields as it checks a POST /v1/reservations body.
func (r OutcomeRequest) Validate() error {
	if r.Admission == "" {
		return fmt.Errorf("%w: outcome: admission missing", ErrInvalid)
	}
	if r.Next != nil && !r.Next.Queue {
		return fmt.Errorf("%w: outcome: the next reservation request must queue", ErrInvalid)
	}
	switch r.Outcome {
	case OutcomeJob, OutcomeEmpty, OutcomeError, OutcomeReleased:
		return nil
	}
	return fmt.Errorf("%w: outcome %q is not job, empty, error or released", ErrInvalid, r.Outcome)
}
