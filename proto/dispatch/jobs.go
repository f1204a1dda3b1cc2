package dispatch

import (
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/internal/enum"
	"github.com/vk-ci/vk/proto/job"
)

// Start runs a job (hub → node, kind "start", NSESS-07); the node journals
// it and answers [JobUpdate] accepted or refused (NODE-06). A start
// redelivered after a reconnect is answered from the journal.
type Start struct {
	// Job is the hub's job ID. Required.
	Job string `json:"job"`
	// Reservation is the reservation the job starts on; empty for a job
	// placed without one (NODE-08).
	Reservation string `json:"reservation,omitempty"`
	// Envelope is the room the job may use at most. Required.
	Envelope client.Envelope `json:"envelope"`
	// Spec is the job, secrets included. Required.
	Spec job.JobSpec `json:"spec"`
	// Cache is where the job keeps its caches with a token the hub minted
	// for it (XFER-13): set when the node's reported registry (XFER-17)
	// is one of the hub's [[registries]], minted as this frame was built
	// and never stored by the hub. nil means the node's own registry
	// credential and caches (XFER-15).
	Cache *CacheRegistry `json:"cache,omitempty"`
	// Epoch is the leader lease epoch of the hub that sent it (docs/ha.md):
	// a node refuses a command older than the newest epoch it has heard.
	// 0 (absent) from a hub without a lease. Optional and additive.
	Epoch uint64 `json:"epoch,omitempty"`
}

// CacheRegistry is a job's own cache repository and registry token
// (XFER-13, XFER-14, XFER-16).
type CacheRegistry struct {
	// Repository is the absolute repository path on the node's registry,
	// e.g. "ci-cache/gitlab.example.com/12".
	Repository string `json:"repository"`
	// Token is the bearer token scoped to Repository. Secret: masked in the
	// trace and dropped from the journal once the result is written.
	Token string `json:"token"`
	// ExpiresInSecs is the token's lifetime from the start's receipt, in
	// seconds; 0 means unknown. (No wall-clock time crosses the wire.)
	ExpiresInSecs int `json:"expires_in_secs,omitempty"`
}

// Redacted returns a copy of s with every secret removed (the spec's, see
// job.CiJob.Redacted, and the cache token), for journals and logs that
// outlive the job (AUTH-07, XFER-16).
func (s Start) Redacted() Start {
	s.Spec = s.Spec.Redacted()
	if s.Cache != nil {
		c := *s.Cache
		c.Token = ""
		s.Cache = &c
	}
	return s
}

// JobStateKind tags a JobUpdate. Unknown values decode to JobStateOther.
//
//	accepted ──▶ running ──▶ … ──▶ running ──▶ finished
//	refused (terminal: the hub may place the job again, FAIL-14)
type JobStateKind string

// Job states a node reports.
const (
	JobAccepted   JobStateKind = "accepted" // journaled; will run
	JobRefused    JobStateKind = "refused"  // not taken; Reason says why
	JobRunning    JobStateKind = "running"  // in Stage
	JobFinished   JobStateKind = "finished" // ended; a Result follows once output is acked
	JobStateOther JobStateKind = "other"    // not known to this version
)

var knownJobStates = []JobStateKind{JobAccepted, JobRefused, JobRunning, JobFinished, JobStateOther}

// UnmarshalText maps unknown states to JobStateOther.
func (s *JobStateKind) UnmarshalText(b []byte) error {
	*s = enum.Parse(string(b), JobStateOther, knownJobStates)
	return nil
}

// JobUpdate reports a job's state (node → hub, kind "job", NSESS-14):
// accepted, refused {reason, message?}, running {stage, activity?,
// guest?}, or finished.
type JobUpdate struct {
	// Job is the hub's job ID. Required.
	Job string `json:"job"`
	// State is the job's state. Required.
	State JobStateKind `json:"state"`
	// Reason is why a start was refused; set only when refused.
	Reason RefusalReason `json:"reason,omitempty"`
	// Message details a refusal; optional.
	Message string `json:"message,omitempty"`
	// Stage is the stage running, e.g. "prepare_executor",
	// "step_script" (STAGE-01); set only when running.
	Stage string `json:"stage,omitempty"`
	// Activity is a short note on what the stage does now, e.g. "pulling
	// ruby:3.3"; optional, only when running.
	Activity string `json:"activity,omitempty"`
	// Guest is the size the job runs with, once prepare sized it
	// (NSESS-18, DECISIONS 9); nil before, and when not running.
	Guest *Guest `json:"guest,omitempty"`
}

// Guest is the size a job actually runs with (NSESS-18).
type Guest struct {
	// CPUs is the number of vCPUs.
	CPUs int `json:"cpus"`
	// MemMiB is the memory in MiB.
	MemMiB int64 `json:"mem_mib"`
}

// Cancel stops a job (hub → node, kind "cancel", NSESS-09); the node
// answers [JobUpdate], then [Result]. A later immediate overrides a graceful.
type Cancel struct {
	// Job is the hub's job ID. Required.
	Job string `json:"job"`
	// Mode is graceful or immediate. Required.
	Mode client.CancelMode `json:"mode"`
	// Epoch is the leader lease epoch of the hub that sent it (docs/ha.md):
	// a node refuses a command older than the newest epoch it has heard.
	// 0 (absent) from a hub without a lease. Optional and additive.
	Epoch uint64 `json:"epoch,omitempty"`
}

// Recorded says the hub stored a job's result (hub → node, kind
// "recorded", NSESS-10); the node stops repeating it and forgets the job.
type Recorded struct {
	// Job is the hub's job ID. Required.
	Job string `json:"job"`
}

// FrameType returns TypeJob.
func (Start) FrameType() Type { return TypeJob }

// FrameType returns TypeJob.
func (JobUpdate) FrameType() Type { return TypeJob }

// FrameType returns TypeJob.
func (Cancel) FrameType() Type { return TypeJob }

// FrameType returns TypeJob.
func (Recorded) FrameType() Type { return TypeJob }

// FrameKind returns KindStart.
func (Start) FrameKind() Kind { return KindStart }

// FrameKind returns KindJob.
func (JobUpdate) FrameKind() Kind { return KindJob }

// FrameKind returns KindCancel.
func (Cancel) FrameKind() Kind { return KindCancel }

// FrameKind returns KindRecorded.
func (Recorded) FrameKind() Kind { return KindRecorded }
func (Start) sealed()            {}
func (JobUpdate) sealed()        {}
func (Cancel) sealed()           {}
func (Recorded) sealed()         {}
