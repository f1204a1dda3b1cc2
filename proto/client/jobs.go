package client

import (
	"fmt"

	"github.com/vk-ci/vk/proto/internal/enum"
	"github.com/vk-ci/vk/proto/job"
)

// JobSubmission is the body of POST /v1/jobs (PROTO-05, API-07,
// API-31..35): run a job, on a reservation when there is one. Answered
// 201 JobView.
type JobSubmission struct {
	// Runner names the relay's runner; empty for API-key clients.
	Runner string `json:"runner,omitempty"`
	// Admission is the grant's admission the job was taken under; empty
	// for a job without one (ARB-36, API-33).
	Admission string `json:"admission,omitempty"`
	// RequestID makes the submission idempotent (API-42, API-43). Required.
	RequestID string `json:"request_id"`
	// Placement is the runner's placement; must match the admission's
	// (API-31). Required.
	Placement Placement `json:"placement"`
	// Reservation is the grant's reservation; empty when the job has none.
	Reservation string `json:"reservation,omitempty"`
	// PlaceWithinSecs bounds how long the hub tries to place a job whose
	// reservation is missing or gone, in seconds (ARB-37, ARB-38; vk-gitlab
	// sends 300); past it the job ends no_capacity. 0 means the hub's
	// default.
	PlaceWithinSecs int `json:"place_within_secs,omitempty"`
	// Spec is the job. At most job.MaxSpecBytes serialized (API-35).
	Spec job.JobSpec `json:"spec"`
	// Queue is what GitLab said about its queue when it handed the job
	// out; nil for a job that did not come from GitLab's job request. The
	// hub keeps it in its workload trace only (docs/replay.md). Additive:
	// a hub that predates it refuses the unknown field 400 invalid, and
	// vk-gitlab then submits again without it.
	Queue *GitLabQueue `json:"gitlab_queue,omitempty"`
}

// GitLabQueue is GitLab's job_info queue metrics as its job response
// carried them.
type GitLabQueue struct {
	// TimeInQueueSecs is how long the job was pending before GitLab handed
	// it out (time_in_queue_seconds).
	TimeInQueueSecs float64 `json:"time_in_queue_secs"`
	// Size is how many pending jobs the runner could take when GitLab
	// picked this one, this one included (queue_size).
	Size int64 `json:"size"`
	// Depth is how far into them GitLab looked to find it (queue_depth).
	Depth int64 `json:"depth"`
}

// Redacted returns a copy of s with the spec's secrets removed, for the
// hub's records and audit log (AUTH-07).
func (s JobSubmission) Redacted() JobSubmission {
	s.Spec = s.Spec.Redacted()
	return s
}

// JobState is where a job is in its life (PROTO-06). Unknown states decode
// to JobStateOther.
//
//	queued ──▶ starting ──▶ running ──▶ finished
//	   │           │                       ▲
//	   └───────────┴───────────────────────┘  (no_capacity, lost, canceled)
type JobState string

// Job states.
const (
	JobQueued     JobState = "queued"   // waiting for a node
	JobStarting   JobState = "starting" // start sent, node has not answered accepted
	JobRunning    JobState = "running"  // accepted by its node
	JobFinished   JobState = "finished" // ended; JobView.Result is set
	JobStateOther JobState = "other"    // not known to this version
)

var knownJobStates = []JobState{JobQueued, JobStarting, JobRunning, JobFinished, JobStateOther}

// UnmarshalText maps unknown states to JobStateOther.
func (s *JobState) UnmarshalText(b []byte) error {
	*s = enum.Parse(string(b), JobStateOther, knownJobStates)
	return nil
}

// CancelMode says how to stop a job (PROTO-07). Unknown modes decode to
// CancelOther.
type CancelMode string

// Cancel modes.
const (
	// CancelGraceful lets after_script and uploads on failure run.
	CancelGraceful CancelMode = "graceful"
	// CancelImmediate stops the job at once; it overrides an earlier
	// graceful cancel (API-40).
	CancelImmediate CancelMode = "immediate"
	// CancelOther stands for a mode this version does not know.
	CancelOther CancelMode = "other"
)

var knownCancelModes = []CancelMode{CancelGraceful, CancelImmediate, CancelOther}

// UnmarshalText maps unknown modes to CancelOther.
func (m *CancelMode) UnmarshalText(b []byte) error {
	*m = enum.Parse(string(b), CancelOther, knownCancelModes)
	return nil
}

// CancelRequest is the body of POST /v1/jobs/<id>/cancel (PROTO-07,
// API-08, API-40), answered 202 JobView.
type CancelRequest struct {
	// Mode is graceful or immediate. Required.
	Mode CancelMode `json:"mode"`
}

// Validate checks Mode; errors wrap ErrInvalid.
func (r CancelRequest) Validate() error {
	if r.Mode != CancelGraceful && r.Mode != CancelImmediate {
		return fmt.Errorf("%w: cancel mode %q is not graceful or immediate", ErrInvalid, r.Mode)
	}
	return nil
}

// JobView is the hub's view of a job (PROTO-06, API-07, API-36): the answer
// to POST /v1/jobs, GET /v1/jobs/<id> and cancel.
type JobView struct {
	// ID is the hub's job ID.
	ID string `json:"id"`
	// Revision changes on every change but output growth (API-36); long
	// polls wait for it to pass `after`.
	Revision uint64 `json:"revision"`
	// State is queued, starting, running or finished.
	State JobState `json:"state"`
	// Node is the ID of the node the job was started on; empty while queued.
	Node string `json:"node,omitempty"`
	// Stage is the stage the node last reported (e.g. "step_script");
	// empty before the first.
	Stage string `json:"stage,omitempty"`
	// OutputLen is the length of the stored output so far, in bytes.
	OutputLen int64 `json:"output_len"`
	// Cancel is the strongest cancel requested; empty when none.
	Cancel CancelMode `json:"cancel,omitempty"`
	// Result is how the job ended; set exactly when State is finished.
	Result *JobResult `json:"result,omitempty"`
	// Wait says why a queued job waits and how long it is expected to;
	// absent once a node was chosen (additive: older hubs never send it).
	Wait *JobWait `json:"wait,omitempty"`
}

// JobWait is why a queued job waits, as the hub's scheduler sees it.
type JobWait struct {
	// Reason is the operator text of the wait reason, e.g. "waiting: no
	// ready node of the placement has room".
	Reason string `json:"reason"`
	// Class is the scheduling class it waits in ("deadline", "normal",
	// …; free text).
	Class string `json:"class,omitempty"`
	// Ahead is how many requests competing for the same room go before
	// it.
	Ahead int `json:"ahead"`
	// Waiting is how many requests wait for that room, itself included.
	Waiting int `json:"waiting"`
	// EstimatedSecs is the estimated wait in seconds, from the
	// scheduler's view and the runtimes of earlier jobs; absent when it
	// cannot be estimated (no runtimes yet, or a cap holds it back).
	EstimatedSecs *int64 `json:"estimated_secs,omitempty"`
}

// Validate checks that Result is set exactly when the job is finished.
// Errors wrap ErrInvalid.
func (v JobView) Validate() error {
	if (v.State == JobFinished) != (v.Result != nil) {
		return fmt.Errorf("%w: job view: state %q with result set=%t", ErrInvalid, v.State, v.Result != nil)
	}
	return nil
}

// ClientHello is the body of POST /v1/clients (API-09): an API-key client
// introduces itself; answered 204, refused to relays.
type ClientHello struct {
	// Name identifies the client program for logs and the UI, e.g.
	// "ci-dashboard". Required.
	Name string `json:"name"`
	// Version is the client's release, free form; empty means unknown.
	Version string `json:"version,omitempty"`
}
