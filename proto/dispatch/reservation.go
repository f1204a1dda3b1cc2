package dispatch

import (
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/internal/enum"
)

// MaxLeaseSecs is the longest lease a node grants (NODE-04).
const MaxLeaseSecs = 600

// Offer asks the node to set an envelope aside (hub → node, kind "offer",
// NSESS-04); the node answers [OfferReply] at once (NODE-01).
type Offer struct {
	// Reservation is the hub's ID for it. Required.
	Reservation string `json:"reservation"`
	// Envelope is the room to set aside. Required.
	Envelope client.Envelope `json:"envelope"`
	// LeaseSecs is the lease asked for, in seconds, from the node's
	// acceptance on its monotonic clock (ARB-30); at most MaxLeaseSecs.
	LeaseSecs int `json:"lease_secs"`
	// Epoch is the leader lease epoch of the hub that sent it (docs/ha.md):
	// a node refuses a command older than the newest epoch it has heard.
	// 0 (absent) from a hub without a lease. Optional and additive.
	Epoch uint64 `json:"epoch,omitempty"`
}

// ReplyKind tags an OfferReply. Unknown values decode to ReplyOther.
type ReplyKind string

// Offer replies.
const (
	ReplyAccepted ReplyKind = "accepted" // set aside; LeaseSecs says for how long
	ReplyRefused  ReplyKind = "refused"  // not set aside; Reason says why
	ReplyOther    ReplyKind = "other"    // not known to this version
)

var knownReplies = []ReplyKind{ReplyAccepted, ReplyRefused, ReplyOther}

// UnmarshalText maps unknown replies to ReplyOther.
func (r *ReplyKind) UnmarshalText(b []byte) error {
	*r = enum.Parse(string(b), ReplyOther, knownReplies)
	return nil
}

// RefusalReason says why a node refused an offer or a start (NSESS-21).
// Unknown values decode to RefusalOther (NSESS-22).
type RefusalReason string

// Refusal reasons.
const (
	RefusalMemory        RefusalReason = "memory"         // not enough memory free
	RefusalDisk          RefusalReason = "disk"           // not enough disk free
	RefusalCPUs          RefusalReason = "cpus"           // not enough CPUs
	RefusalNotReady      RefusalReason = "not_ready"      // draining, drained, quarantined or in maintenance
	RefusalPolicy        RefusalReason = "policy"         // the node's policy forbids the job
	RefusalNoReservation RefusalReason = "no_reservation" // a start's reservation is not held and the job does not fit
	RefusalInvalid       RefusalReason = "invalid"        // the message or spec is malformed
	RefusalCeiling       RefusalReason = "ceiling"        // held + unfinished reach the hub's ceiling
	RefusalConcurrency   RefusalReason = "concurrency"    // the same, at the node's own max_concurrency
	RefusalRunner        RefusalReason = "runner"         // the host runs its own gitlab-runner with the vk executor
	RefusalOther         RefusalReason = "other"          // not known to this version
)

var knownRefusals = []RefusalReason{RefusalMemory, RefusalDisk, RefusalCPUs, RefusalNotReady,
	RefusalPolicy, RefusalNoReservation, RefusalInvalid, RefusalCeiling, RefusalConcurrency,
	RefusalRunner, RefusalOther}

// UnmarshalText maps unknown reasons to RefusalOther.
func (r *RefusalReason) UnmarshalText(b []byte) error {
	*r = enum.Parse(string(b), RefusalOther, knownRefusals)
	return nil
}

// OfferReply answers an offer (node → hub, kind "offer_reply", NSESS-12):
// accepted {lease_secs} or refused {reason, message?}.
type OfferReply struct {
	// Reservation is the offer's. Required.
	Reservation string `json:"reservation"`
	// Reply is accepted or refused. Required.
	Reply ReplyKind `json:"reply"`
	// LeaseSecs is the lease granted, in seconds; set only when accepted.
	LeaseSecs int `json:"lease_secs,omitempty"`
	// Reason is why it was refused; set only when refused.
	Reason RefusalReason `json:"reason,omitempty"`
	// Message details a refusal; optional.
	Message string `json:"message,omitempty"`
}

// Renew extends a lease from now (hub → node, kind "renew", NSESS-05); the
// node answers [Lease].
type Renew struct {
	// Reservation to renew. Required.
	Reservation string `json:"reservation"`
	// LeaseSecs is the lease asked for, in seconds from now; at most
	// MaxLeaseSecs.
	LeaseSecs int `json:"lease_secs"`
	// Epoch is the leader lease epoch of the hub that sent it (docs/ha.md):
	// a node refuses a command older than the newest epoch it has heard.
	// 0 (absent) from a hub without a lease. Optional and additive.
	Epoch uint64 `json:"epoch,omitempty"`
}

// Release gives a reservation back (hub → node, kind "release", NSESS-06);
// the node answers [Lease] gone.
type Release struct {
	// Reservation to release. Required.
	Reservation string `json:"reservation"`
	// Epoch is the leader lease epoch of the hub that sent it (docs/ha.md):
	// a node refuses a command older than the newest epoch it has heard.
	// 0 (absent) from a hub without a lease. Optional and additive.
	Epoch uint64 `json:"epoch,omitempty"`
}

// LeaseState tags a Lease. Unknown values decode to LeaseOther.
type LeaseState string

// Lease states.
const (
	LeaseHeld  LeaseState = "held"  // still held; RemainingSecs left
	LeaseGone  LeaseState = "gone"  // no longer held; Why says why
	LeaseOther LeaseState = "other" // not known to this version
)

var knownLeaseStates = []LeaseState{LeaseHeld, LeaseGone, LeaseOther}

// UnmarshalText maps unknown states to LeaseOther.
func (s *LeaseState) UnmarshalText(b []byte) error {
	*s = enum.Parse(string(b), LeaseOther, knownLeaseStates)
	return nil
}

// GoneWhy says why a reservation is gone (NSESS-13). Unknown values decode
// to GoneOther.
type GoneWhy string

// Reasons a reservation is gone.
const (
	GoneExpired  GoneWhy = "expired"  // its lease ran out on the node (NODE-03)
	GoneReleased GoneWhy = "released" // released by the hub or by quarantine
	GoneStarted  GoneWhy = "started"  // a start converted it into a job (NODE-07)
	GoneUnknown  GoneWhy = "unknown"  // the node does not know it
	GoneOther    GoneWhy = "other"    // not known to this version
)

var knownGoneWhys = []GoneWhy{GoneExpired, GoneReleased, GoneStarted, GoneUnknown, GoneOther}

// UnmarshalText maps unknown reasons to GoneOther.
func (w *GoneWhy) UnmarshalText(b []byte) error {
	*w = enum.Parse(string(b), GoneOther, knownGoneWhys)
	return nil
}

// Lease reports a reservation's lease (node → hub, kind "lease",
// NSESS-13): held {remaining_secs} or gone {why}. Sent in answer to renew
// and release, and unasked when a lease expires.
type Lease struct {
	// Reservation concerned. Required.
	Reservation string `json:"reservation"`
	// State is held or gone. Required.
	State LeaseState `json:"state"`
	// RemainingSecs is what is left of the lease, in seconds; set only when
	// held (0 when held means less than a second).
	RemainingSecs int `json:"remaining_secs,omitempty"`
	// Why is set only when gone.
	Why GoneWhy `json:"why,omitempty"`
}

// Held lists everything the node holds (node → hub, kind "held",
// NSESS-11, NSESS-24), once per new session, right after its report. The
// hub releases reservations it does not know, cancels jobs it gave up on,
// and acks each job it follows at its stored offset.
type Held struct {
	// Reservations the node holds, each with the lease left.
	Reservations []HeldReservation `json:"reservations,omitempty"`
	// Jobs the node has accepted and not yet seen recorded.
	Jobs []HeldJob `json:"jobs,omitempty"`
}

// HeldReservation is one reservation in Held.
type HeldReservation struct {
	// Reservation is its ID.
	Reservation string `json:"reservation"`
	// Envelope is the room it holds.
	Envelope client.Envelope `json:"envelope"`
	// RemainingSecs is the lease left, in seconds.
	RemainingSecs int `json:"remaining_secs"`
}

// HeldJob is one job in Held.
type HeldJob struct {
	// Job is the hub's job ID.
	Job string `json:"job"`
	// Finished: the job ended and its result waits for recorded.
	Finished bool `json:"finished,omitempty"`
	// Spooled is how many output bytes the node holds for it (the end of
	// its output so far), so the hub can tell how far behind it is.
	Spooled int64 `json:"spooled"`
}

// FrameType returns TypeJob.
func (Offer) FrameType() Type { return TypeJob }

// FrameType returns TypeJob.
func (OfferReply) FrameType() Type { return TypeJob }

// FrameType returns TypeJob.
func (Renew) FrameType() Type { return TypeJob }

// FrameType returns TypeJob.
func (Release) FrameType() Type { return TypeJob }

// FrameType returns TypeJob.
func (Lease) FrameType() Type { return TypeJob }

// FrameType returns TypeJob.
func (Held) FrameType() Type { return TypeJob }

// FrameKind returns KindOffer.
func (Offer) FrameKind() Kind { return KindOffer }

// FrameKind returns KindOfferReply.
func (OfferReply) FrameKind() Kind { return KindOfferReply }

// FrameKind returns KindRenew.
func (Renew) FrameKind() Kind { return KindRenew }

// FrameKind returns KindRelease.
func (Release) FrameKind() Kind { return KindRelease }

// FrameKind returns KindLease.
func (Lease) FrameKind() Kind { return KindLease }

// FrameKind returns KindHeld.
func (Held) FrameKind() Kind { return KindHeld }
func (Offer) sealed()        {}
func (OfferReply) sealed()   {}
func (Renew) sealed()        {}
func (Release) sealed()      {}
func (Lease) sealed()        {}
func (Held) sealed()         {}
