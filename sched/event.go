package sched

import "time"

// Event is one input to [Core.Step]. The set is closed: only types of this
// package implement it.
type Event interface{ isEvent() }

// NodeReport is a node's inventory, sent when its session starts and whenever
// it changes. The first report adds the node. When Held is non-nil (the
// node's `held` message, NSESS-11/24) the Core reconciles: reservations it
// does not know are released, unknown jobs are cancelled, starts whose answer
// was lost are resolved (FAIL-15), restored admissions are adopted
// (DECISIONS 6).
type NodeReport struct {
	Node     NodeID
	Capacity Resources // what the node can give jobs
	Pools    []string
	Labels   []string
	// MaxConcurrency is the node's own `[executor.schedule] max_concurrency`;
	// 0 means unlimited (PLACE-04).
	MaxConcurrency int
	// LocalRunner: a local gitlab-runner uses the vk executor; the node takes
	// no placement (PLACE-08/09).
	LocalRunner bool
	State       NodeState
	// Held, when non-nil, lists what the node holds.
	Held *Held
	// ImageCacheIdle is the node's image_cache_idle_secs (PLACE-15); 0
	// means [DefaultImageCacheIdle].
	ImageCacheIdle time.Duration
}

// Held is a node's `held` list.
type Held struct {
	Reservations []ReservationID
	Jobs         []JobID
}

// NodeHeartbeat carries a node's 1-minute load average. HasLoad false means
// the node does not report it (PLACE-12 leaves the term out).
type NodeHeartbeat struct {
	Node    NodeID
	Load1   float64
	HasLoad bool
}

// NodeUnreachable: the node's session is gone past the unreachable threshold.
// It gets no offers or starts; outstanding offers count as unanswered.
type NodeUnreachable struct{ Node NodeID }

// NodeLost: the node is gone for good for its work (FAIL-16). Its
// reservations are gone, its jobs end lost, and it leaves the fleet until it
// reports again.
type NodeLost struct{ Node NodeID }

// CeilingSet sets the hub's concurrency ceiling for a node; 0 clears it
// (PLACE-04, PLACE-07) unless Zero is set.
type CeilingSet struct {
	Node    NodeID
	Ceiling int
	// Zero sets a ceiling of 0: the node takes no new placed work (no
	// offers, no starts off a reservation), while what it holds carries on
	// (PLACE-07; admin.Backend.SetCeiling's 0). Ceiling is then ignored.
	Zero bool
}

// RelayUp: a relay's session started. Session must differ from the previous
// one; a new session while one is up ends the old one first (its unclaimed
// tickets end, ARB-03); a repeat of the current one changes nothing. The
// relay's tickets wait until this session's first heartbeat (ARB-12, ARB-40).
type RelayUp struct {
	Relay   RelayID
	Session uint64
}

// RelayDown: a relay's session ended; every unclaimed ticket of it ends
// (ARB-03).
type RelayDown struct{ Relay RelayID }

// RelayInventory is a relay's session report (RSESS-02/03).
type RelayInventory struct {
	Relay      RelayID
	Concurrent int // 0 means no relay-wide limit
	Runners    []RunnerInfo
}

// RunnerInfo is one runner of a relay inventory.
type RunnerInfo struct {
	Runner             RunnerID
	Tenant             TenantID
	Placement          Placement
	Limit              int // 0: no limit beyond the relay's concurrent
	RequestConcurrency int
}

// RelayHeartbeat is a relay's heartbeat (RSESS-04).
type RelayHeartbeat struct {
	Relay   RelayID
	Runners []RunnerBeat
}

// RunnerBeat is one runner's part of a heartbeat.
type RunnerBeat struct {
	Runner            RunnerID
	RequestAdmissions []AdmissionID
	JobAdmissions     []AdmissionID
	// UnadmittedJobs counts jobs the runner holds without an admission; they
	// count against caps and limits (ARB-11).
	UnadmittedJobs int
}

// TicketQueued: a runner queued a reservation request (queue=true).
type TicketQueued struct {
	Ticket TicketID
	Runner RunnerID
}

// TicketPolled: the relay polled the ticket; it keeps it alive (ARB-03).
type TicketPolled struct{ Ticket TicketID }

// TicketCancelled: DELETE on the ticket (API-24).
type TicketCancelled struct{ Ticket TicketID }

// OfferReplied is a node's offer_reply (NSESS-12).
type OfferReplied struct {
	Node        NodeID
	Reservation ReservationID
	Accepted    bool
	// LeaseSecs is the lease the node granted (accepted only).
	LeaseSecs int
	// Reason is the refusal reason as the node sent it (refused only).
	Reason string
}

// Claimed: the relay claims a grant (API-26).
type Claimed struct{ Admission AdmissionID }

// Outcome: the relay reports an admission's outcome (API-27/28).
type Outcome struct {
	Admission AdmissionID
	Kind      OutcomeKind
}

// RenewRequested: the relay asks to renew its reservation (API-29).
type RenewRequested struct{ Admission AdmissionID }

// Renewed: the node answered lease held with RemainingSecs (NSESS-13).
type Renewed struct {
	Reservation   ReservationID
	RemainingSecs int
}

// Released: the relay deleted its reservation (API-30).
type Released struct{ Admission AdmissionID }

// LeaseGone: the node answered lease gone (NSESS-13); Why is expired,
// released, started or unknown.
type LeaseGone struct {
	Reservation ReservationID
	Why         string
}

// JobSubmitted: a job was submitted (API-07). Admission and Reservation are
// zero when absent. PlaceWithin zero means no deadline.
type JobSubmitted struct {
	Job         JobID
	Runner      RunnerID
	Admission   AdmissionID
	Reservation ReservationID
	PlaceWithin time.Duration
	Project     string
	Ref         string
	// Legacy marks a job recorded before capacity arbitration, without a
	// scheduling identity: it is never held (ARB-42).
	Legacy bool
	// Images lists the images (its own and its services') the node builds
	// from the checkout (dockerfile: or compose:); non-empty makes the job
	// subject to image affinity (PLACE-14).
	Images []string
	// Name is the driver's job name (as in [JobFinished]); with it the
	// job's remaining time is predicted from [Core.RuntimeStats] of that
	// name when choosing a node to drain (BS-23). "" means unknown.
	Name string
}

// JobStartReplied is the node's answer to a start: accepted or refused
// (NSESS-14).
type JobStartReplied struct {
	Node     NodeID
	Job      JobID
	Accepted bool
	Reason   string
}

// JobFinished: the node reported the job finished; its room is free. Name
// (the driver's job name) and Wall (usage.wall_ms), when set, feed
// [Core.RuntimeStats]. When Name is "" the job's [JobSubmitted].Name is
// used, and then a zero Wall means the time since its node accepted it.
type JobFinished struct {
	Job  JobID
	Name string
	Wall time.Duration
}

// JobSettled: the relay settled the job; its admission stops being charged
// (ARB-35).
type JobSettled struct{ Job JobID }

// SubmissionRefused: the driver refused a job submission naming
// Admission with a 4xx after the admission's outcome "job" was reported
// (API-34: the admission ends as empty). It ends the admission, releasing
// its reservation, when it is still waiting for its job; otherwise it does
// nothing. It emits no verdict.
type SubmissionRefused struct{ Admission AdmissionID }

// JobCancelled: a job no node started was cancelled (API-40). A queued job
// ends canceled (EndJob) and keeps its charge until [JobSettled] (ARB-35);
// a job in any other state is left alone (the driver cancels started jobs
// on their node). It emits no verdict.
type JobCancelled struct{ Job JobID }

// PolicyChanged replaces the capacity policy.
type PolicyChanged struct{ Policy Policy }

// Tick only lets time pass: due deadlines fire. Every event does that first,
// so a driver sends Tick when it has nothing else to say (e.g. every 250 ms).
type Tick struct{}

// Restore re-creates, after a hub restart, the claimed admissions the driver
// persisted (ARB-04, DECISIONS 6). Send it right after [New], before any node
// reports. A restored admission is adopted when its node's held lists the
// reservation; otherwise the first heartbeat of its relay's session decides
// (ARB-40).
type Restore struct {
	Admissions []RestoredAdmission
	Jobs       []RestoredJob
	// NextID is a floor for the reservation and admission IDs the Core
	// mints from now on (the driver persists the highest it saw).
	NextID uint64
}

// RestoredJob is a job a node had accepted before the restart; it is charged
// and counted on its node until the node's held says otherwise.
type RestoredJob struct {
	Job       JobID
	Node      NodeID
	Runner    RunnerID
	Tenant    TenantID
	Relay     RelayID
	Admission AdmissionID
	Envelope  Resources
}

// RestoredAdmission is one persisted claimed admission.
type RestoredAdmission struct {
	Admission   AdmissionID
	Reservation ReservationID // zero when it has none any more
	Node        NodeID
	Runner      RunnerID
	Tenant      TenantID
	Relay       RelayID
	Placement   Placement
}

func (NodeReport) isEvent()        {}
func (NodeHeartbeat) isEvent()     {}
func (NodeUnreachable) isEvent()   {}
func (NodeLost) isEvent()          {}
func (CeilingSet) isEvent()        {}
func (RelayUp) isEvent()           {}
func (RelayDown) isEvent()         {}
func (RelayInventory) isEvent()    {}
func (RelayHeartbeat) isEvent()    {}
func (TicketQueued) isEvent()      {}
func (TicketPolled) isEvent()      {}
func (TicketCancelled) isEvent()   {}
func (OfferReplied) isEvent()      {}
func (Claimed) isEvent()           {}
func (Outcome) isEvent()           {}
func (RenewRequested) isEvent()    {}
func (Renewed) isEvent()           {}
func (Released) isEvent()          {}
func (LeaseGone) isEvent()         {}
func (JobSubmitted) isEvent()      {}
func (JobStartReplied) isEvent()   {}
func (JobFinished) isEvent()       {}
func (JobSettled) isEvent()        {}
func (PolicyChanged) isEvent()     {}
func (SubmissionRefused) isEvent() {}
func (JobCancelled) isEvent()      {}
func (Tick) isEvent()              {}
func (Restore) isEvent()           {}
