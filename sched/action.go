package sched

import "strconv"

// Action is one output of [Core.Step] for the driver to carry out. The set is
// closed. Every action has a String form used in transcripts.
type Action interface {
	isAction()
	String() string
}

// Verdict answers the event that caused the step, for events that are client
// requests (claim, outcome, renew, release, ticket poll/cancel, job
// submission, offer replies). It is always the first action of such a step.
type Verdict struct {
	Code    VerdictCode
	Message string
}

// VerdictCode maps onto the API's answers; the driver turns it into HTTP.
type VerdictCode uint8

// Verdict codes.
const (
	// VerdictOK: done (204/201/200).
	VerdictOK VerdictCode = iota
	// VerdictPending: accepted, still waiting (202 for tickets).
	VerdictPending
	// VerdictConflict: the state forbids it (409, API-28/API-24/API-32).
	VerdictConflict
	// VerdictGone: the ticket, grant or reservation is gone (410 reservation_gone).
	VerdictGone
	// VerdictNotFound: unknown admission or job (404).
	VerdictNotFound
	// VerdictForbidden: a job not matching its admission (403, API-31).
	VerdictForbidden
	// VerdictInvalid: malformed event (400).
	VerdictInvalid
	// VerdictUnavailable: the relay's session is not connected or its runner
	// unknown yet (503 unavailable, API-21).
	VerdictUnavailable
)

var verdictNames = [...]string{"ok", "pending", "conflict", "gone", "not_found", "forbidden", "invalid", "unavailable"}

func (v VerdictCode) String() string {
	if int(v) < len(verdictNames) {
		return verdictNames[v]
	}
	return "unknown"
}

// Offer asks Node to set Envelope aside for LeaseSecs under Reservation
// (NSESS-04), for Ticket. (Queued jobs get a [Start] directly.)
type Offer struct {
	Node        NodeID
	Reservation ReservationID
	Ticket      TicketID
	Envelope    Resources
	LeaseSecs   int
}

// Grant: the ticket is granted (answer the long poll 201, ARB-24).
type Grant struct {
	Ticket      TicketID
	Admission   AdmissionID
	Reservation ReservationID
	Node        NodeID
	Envelope    Resources
	LeaseSecs   int
}

// Release tells Node to drop Reservation (NSESS-06).
type Release struct {
	Reservation ReservationID
	Node        NodeID
}

// Renew asks Node to extend Reservation's lease from now (NSESS-05).
type Renew struct {
	Reservation ReservationID
	Node        NodeID
	LeaseSecs   int
}

// Start tells Node to run Job (NSESS-07), on Reservation when non-zero.
type Start struct {
	Job         JobID
	Node        NodeID
	Reservation ReservationID
	Envelope    Resources
}

// Expire ends a ticket: its next poll answers 410 (API-23).
type Expire struct {
	Ticket TicketID
	Reason string
}

// EndJob ends a job that never ran: Failure is "no_capacity" or "lost"
// (FAIL-10, FAIL-11, FAIL-19), Message the human reason.
type EndJob struct {
	Job     JobID
	Failure string
	Message string
}

// CancelJob tells Node to cancel Job immediately (FAIL-17, NSESS-24).
type CancelJob struct {
	Node NodeID
	Job  JobID
}

// AdmissionEnded: an admission ended without a job (empty, error, released,
// reclaimed, node lost); the driver drops its persisted record.
type AdmissionEnded struct {
	Admission AdmissionID
	// Ticket is the admission's ticket, which ends with it; 0 for a
	// restored admission (it has none).
	Ticket TicketID
	Reason string
}

func (Verdict) isAction()        {}
func (Offer) isAction()          {}
func (Grant) isAction()          {}
func (Release) isAction()        {}
func (Renew) isAction()          {}
func (Start) isAction()          {}
func (Expire) isAction()         {}
func (EndJob) isAction()         {}
func (CancelJob) isAction()      {}
func (AdmissionEnded) isAction() {}

func (a Verdict) String() string {
	if a.Message == "" {
		return "verdict " + a.Code.String()
	}
	return "verdict " + a.Code.String() + " " + strconv.Quote(a.Message)
}
func (a Offer) String() string {
	return "offer n" + u(a.Node) + " r" + u(a.Reservation) + " t" + u(a.Ticket) + " lease=" + strconv.Itoa(a.LeaseSecs)
}
func (a Grant) String() string {
	return "grant t" + u(a.Ticket) + " a" + u(a.Admission) + " r" + u(a.Reservation) + " n" + u(a.Node) + " lease=" + strconv.Itoa(a.LeaseSecs)
}
func (a Release) String() string { return "release r" + u(a.Reservation) + " n" + u(a.Node) }
func (a Renew) String() string {
	return "renew r" + u(a.Reservation) + " n" + u(a.Node) + " lease=" + strconv.Itoa(a.LeaseSecs)
}
func (a Start) String() string {
	return "start j" + u(a.Job) + " n" + u(a.Node) + " r" + u(a.Reservation)
}
func (a Expire) String() string { return "expire t" + u(a.Ticket) + " " + strconv.Quote(a.Reason) }
func (a EndJob) String() string {
	return "endjob j" + u(a.Job) + " " + a.Failure + " " + strconv.Quote(a.Message)
}
func (a CancelJob) String() string { return "cancel j" + u(a.Job) + " n" + u(a.Node) }
func (a AdmissionEnded) String() string {
	return "admission-ended a" + u(a.Admission) + " " + strconv.Quote(a.Reason)
}

// u formats an ID in decimal (sched avoids fmt: it imports os).
func u[T ~uint32 | ~uint64](v T) string { return strconv.FormatUint(uint64(v), 10) }
