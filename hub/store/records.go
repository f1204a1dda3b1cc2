package store

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"time"
)

// Time is a point in time as stored: implementations keep it to the
// nanosecond in UTC (the monotonic reading is dropped).
type Time = time.Time

// Hash is a SHA-256 digest (request bodies, enrolment tokens).
type Hash [32]byte

// Sum returns the SHA-256 of b.
func Sum(b []byte) Hash { return sha256.Sum256(b) }

// MarshalText writes the hash as lowercase hex.
func (h Hash) MarshalText() ([]byte, error) { return []byte(hex.EncodeToString(h[:])), nil }

// UnmarshalText reads 64 hex digits.
func (h *Hash) UnmarshalText(b []byte) error {
	if len(b) != 2*len(h) {
		return fmt.Errorf("store: hash of %d hex digits, want 64", len(b))
	}
	var out Hash
	if _, err := hex.Decode(out[:], b); err != nil {
		return fmt.Errorf("store: hash: %w", err)
	}
	*h = out
	return nil
}

// AnswerTTL is how long a request_id makes a create idempotent (API-42).
const AnswerTTL = 24 * time.Hour

// JobState is a job's lifecycle state, as JobView shows it:
//
//	queued ──► starting ──► running ──► finished
//	   │            │                      ▲
//	   └────────────┴──────────────────────┘ (cancelled, lost, refused)
type JobState string

// Job states.
const (
	JobQueued   JobState = "queued"
	JobStarting JobState = "starting"
	JobRunning  JobState = "running"
	JobFinished JobState = "finished"
)

// CancelMode is a requested cancellation; the zero value means none.
type CancelMode string

// Cancel modes (API-40: immediate overrides graceful).
const (
	CancelNone      CancelMode = ""
	CancelGraceful  CancelMode = "graceful"
	CancelImmediate CancelMode = "immediate"
)

// Job is a hub job record. It holds only the redacted spec (AUTH-07): the
// secrets live in the hub's memory until the node accepted the job.
type Job struct {
	// ID is the hub job ID; required, unique.
	ID string `json:"id"`
	// Principal is the relay (or API key) that submitted the job.
	Principal string `json:"principal"`
	// Runner is the relay's runner name.
	Runner string `json:"runner,omitempty"`
	// Tenant is the capacity-policy tenant charged for the job.
	Tenant string `json:"tenant,omitempty"`
	// Instance names the GitLab server as approvals do ([InstanceKey]:
	// host[:port]). Records written before it was so may hold the
	// server's URL; readers pass it through InstanceKey.
	Instance string `json:"instance,omitempty"`
	// Project is GitLab's project ID; 0 if unknown.
	Project int64 `json:"project,omitempty"`
	// GitLabJobID is GitLab's job ID; 0 if unknown.
	GitLabJobID int64 `json:"gitlab_job,omitempty"`
	// Admission is the admission the job was submitted under; empty if none.
	Admission string `json:"admission,omitempty"`
	// Reservation is the reservation the job was submitted on; empty if none.
	Reservation string `json:"reservation,omitempty"`
	// Placement is the placement (pool) the job asked for.
	Placement string `json:"placement,omitempty"`
	// RequestID is the create's request_id; empty if none.
	RequestID string `json:"request_id,omitempty"`
	// State is the job's state.
	State JobState `json:"state"`
	// Revision moves with every change but the output's length (JobView).
	Revision uint64 `json:"revision"`
	// Node is the node the job was started on; empty before.
	Node string `json:"node,omitempty"`
	// Stage is the stage the node reported last; empty before.
	Stage string `json:"stage,omitempty"`
	// OutputLen is the output's acked length in bytes, as last recorded;
	// the output store holds the authoritative length.
	OutputLen int64 `json:"output_len"`
	// Cancel is the requested cancellation, if any.
	Cancel CancelMode `json:"cancel,omitempty"`
	// Result is the job's result (proto JSON, opaque to the store, kept
	// byte for byte), present once finished; nil before.
	Result []byte `json:"result,omitempty"`
	// Settled records that the outcome reached GitLab (API-41).
	Settled bool `json:"settled,omitempty"`
	// Spec is the REDACTED CiJob spec as JSON, opaque to the store and
	// kept byte for byte (AUTH-07). Never the spec with secrets.
	Spec []byte `json:"spec,omitempty"`
	// Created and Updated are when the record was made and last changed.
	Created Time `json:"created"`
	Updated Time `json:"updated"`
}

// Admission is a claimed admission (DECISIONS 6): after a restart the hub
// adopts the reservation again when its node reports it held.
type Admission struct {
	// ID is the admission ID; required.
	ID string `json:"id"`
	// Reservation is the reservation it was granted on.
	Reservation string `json:"reservation"`
	// Node is the node holding the reservation.
	Node string `json:"node"`
	// Relay is the principal that claimed it.
	Relay string `json:"relay"`
	// Runner is the relay's runner.
	Runner string `json:"runner,omitempty"`
	// Tenant is the capacity-policy tenant charged.
	Tenant string `json:"tenant,omitempty"`
	// Placement is the placement (pool) of the reservation.
	Placement string `json:"placement,omitempty"`
	// Job is the job submitted under it; empty while none.
	Job string `json:"job,omitempty"`
	// ClaimedAt is when the grant was claimed.
	ClaimedAt Time `json:"claimed_at"`
}

// Answer is the stored first answer to a create, keyed by principal and
// request_id (API-42/43).
type Answer struct {
	// Principal and RequestID are the key; both required.
	Principal string `json:"principal"`
	RequestID string `json:"request_id"`
	// BodyHash is the SHA-256 of the create's body: a retry with another
	// body is 409 conflict.
	BodyHash Hash `json:"body_hash"`
	// Status is the HTTP status answered.
	Status int `json:"status"`
	// Body is the answer body (JSON) replayed to a retry.
	Body []byte `json:"body,omitempty"`
	// Job is the job the create made; empty if none (refusals).
	Job string `json:"job,omitempty"`
	// Created is when the answer was recorded; the TTL runs from it.
	Created Time `json:"created"`
	// Dropped is set when Job was deleted from the history.
	Dropped bool `json:"dropped,omitempty"`
}

// Expired reports whether the answer no longer replays at now: older than
// [AnswerTTL], or its job dropped.
func (a Answer) Expired(now Time) bool {
	return a.Dropped || !now.Before(a.Created.Add(AnswerTTL))
}

// ApprovalState is an operator's decision on a project or server.
type ApprovalState string

// Approval states.
const (
	ApprovalPending  ApprovalState = "pending"
	ApprovalApproved ApprovalState = "approved"
	ApprovalRejected ApprovalState = "rejected"
)

// Approval is the approval state of a GitLab project, or with Project 0,
// of the GitLab server (instance) itself.
type Approval struct {
	// Instance names the GitLab server; required.
	Instance string `json:"instance"`
	// Project is GitLab's project ID; 0 means the server.
	Project int64 `json:"project"`
	// Path is the project's path ("acme/web") or the server's URL, for
	// display.
	Path string `json:"path,omitempty"`
	// State is the decision.
	State ApprovalState `json:"state"`
	// By is who decided (operator name); empty while pending.
	By string `json:"by,omitempty"`
	// Updated is when the state last changed.
	Updated Time `json:"updated"`
}

// PrincipalKind says what an enrolled principal is.
type PrincipalKind string

// Principal kinds.
const (
	KindRelay PrincipalKind = "gitlab"
	KindNode  PrincipalKind = "node"
)

// Principal is an enrolled relay or node, pinned by its ed25519 public key.
type Principal struct {
	// ID is the principal ID (vk-relay); required.
	ID string `json:"id"`
	// Kind is relay or node.
	Kind PrincipalKind `json:"kind"`
	// PublicKey is the raw 32-byte ed25519 public key.
	PublicKey []byte `json:"public_key"`
	// Name is a display name (host name).
	Name string `json:"name,omitempty"`
	// Removed is set once an operator removed it; its key is then refused
	// (AUTH-13).
	Removed bool `json:"removed,omitempty"`
	// RemovedAt is when it was removed; zero while enrolled.
	RemovedAt Time `json:"removed_at,omitzero"`
	// Created is when it enrolled.
	Created Time `json:"created"`
}

// Token is a one-time enrolment token. Only its hash is stored.
type Token struct {
	// Hash is the SHA-256 of the token text; required.
	Hash Hash `json:"hash"`
	// Kind is the principal kind it enrolls.
	Kind PrincipalKind `json:"kind"`
	// Created and Expires bound its life.
	Created Time `json:"created"`
	Expires Time `json:"expires"`
	// Used is set once consumed, with UsedBy the principal it enrolled.
	Used   bool   `json:"used,omitempty"`
	UsedBy string `json:"used_by,omitempty"`
	UsedAt Time   `json:"used_at,omitzero"`
}

// AuditEntry is one line of the hub's audit log. It holds no secrets: the
// hub writes redacted data only (AUTH-07).
type AuditEntry struct {
	// Seq is assigned by [Audit.AppendAudit].
	Seq uint64 `json:"seq"`
	// Time is when it happened.
	Time Time `json:"time"`
	// Actor is who did it (operator, principal ID, "hub").
	Actor string `json:"actor"`
	// Action is what was done ("token.create", "relay.remove", …).
	Action string `json:"action"`
	// Subject is what it was done to (an ID).
	Subject string `json:"subject,omitempty"`
	// Detail is free text.
	Detail string `json:"detail,omitempty"`
}

// MetaSchedulerSeed is the meta key of the scheduler's persisted seed (8
// bytes, big-endian), so decisions after a restart follow the same stream
// (STYLE C2).
const MetaSchedulerSeed = "sched.seed"

// Clone returns a deep copy of j (its byte slices copied).
func (j Job) Clone() Job {
	j.Result = slices.Clone(j.Result)
	j.Spec = slices.Clone(j.Spec)
	return j
}

// Clone returns a deep copy of a.
func (a Answer) Clone() Answer {
	a.Body = slices.Clone(a.Body)
	return a
}

// Clone returns a deep copy of p.
func (p Principal) Clone() Principal {
	p.PublicKey = slices.Clone(p.PublicKey)
	return p
}
