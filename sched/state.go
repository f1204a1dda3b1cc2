package sched

import "time"

// ticketState is a ticket's lifecycle (see README.md):
//
//	queued ──offer──▶ offered ──accepted──▶ granted ──claim──▶ claimed
//	  ▲                 │ refused/5 s            │ lease end, cancel,
//	  └─────────────────┘                        ▼ session end
//	queued/offered/granted ──cancel, 120 s unpolled, session end──▶ ended
type ticketState uint8

const (
	tkQueued ticketState = iota
	tkOffered
	tkGranted
	tkClaimed
	tkEnded
)

var ticketStateNames = [...]string{"queued", "offered", "granted", "claimed", "ended"}

func (s ticketState) String() string { return ticketStateNames[s] }

// resState is a reservation's lifecycle:
//
//	offered ──accepted──▶ held ──start──▶ started
//	   │ refused/timeout    │ release, lease gone, node lost
//	   ▼                    ▼
//	  gone ◀────────────────┘
type resState uint8

const (
	resOffered resState = iota
	resHeld
	resStarted
	resGone
)

// admState is an admission's lifecycle:
//
//	granted ──claim──▶ claimed ──outcome job──▶ job ──submission──▶ (job owns it)
//	   │ released          │ empty/error/released, reclaimed
//	   ▼                   ▼
//	 ended ◀───────────────┘
type admState uint8

const (
	admGranted admState = iota
	admClaimed
	admJob
	admEnded
)

var admStateNames = [...]string{"granted", "claimed", "job", "ended"}

func (s admState) String() string { return admStateNames[s] }

// jobState is a job's lifecycle as the Core sees it:
//
//	queued ──start──▶ starting ──accepted──▶ running ──finished──▶ finished ──settle──▶ (gone)
//	  ▲                  │ refused / not in held
//	  └──────────────────┘
//	queued ──deadline──▶ ended(no_capacity);  starting/running ──node lost──▶ ended(lost)
type jobState uint8

const (
	jobQueued jobState = iota
	jobStarting
	jobRunning
	jobFinished
	jobEnded
)

var jobStateNames = [...]string{"queued", "starting", "running", "finished", "ended"}

func (s jobState) String() string { return jobStateNames[s] }

// Internal arbitration classes, in ARB-06 order. Normal and normal-probe form
// one spec class ("normal work") and are merged by (share, age) at pick time;
// they are split so the fleet-wide probe limit can skip probes in O(1).
const (
	clsDeadline  = iota // queued jobs with a place_within deadline
	clsReserved         // jobs holding a reservation (kept for ARB-06 order; see README)
	clsProd             // production work other than probes
	clsProdProbe        // production probes
	clsNormal           // normal work, not probes
	clsNormProbe        // normal work, probes
	nClasses
)

func isProbeClass(c int) bool  { return c == clsProdProbe || c == clsNormProbe }
func isNormalClass(c int) bool { return c == clsNormal || c == clsNormProbe }

type node struct {
	id        NodeID
	known     bool // reported at least once since it was added or lost
	capacity  Resources
	pools     []string // sorted
	labels    []string // sorted
	maxConc   int
	ceiling   int
	closed    bool // the hub's ceiling is 0: no new placed work
	local     bool
	state     NodeState
	reachable bool
	load1     float64
	hasLoad   bool

	used   Resources // offers + reservations + jobs
	placed int       // count of the same
	res    []*reservation
	jobs   []*job

	// queues are the placement queues of its pools whose labels it has,
	// each with its entry in that queue's node index
	queues []queueMembership
	// headroomEntries index the headroom entries (Core.headroom) it
	// matches; headroomRoom, parallel, is the room for each entry's
	// envelope it adds to that entry's fleetRoom
	headroomEntries []int
	headroomRoom    []int

	drainFor  JobID           // drain reservation: only this job may start here
	autoDrain *placementQueue // automatic drain: held for this placement's first waiter (BS-22)
	// drainEnd is when the automatic drain is lifted (Unix ns); fairDrain
	// says it is a fairness drain (fairdrain.go), not one for wide work
	drainEnd  int64
	fairDrain bool
	// drainStart is when the automatic drain was placed (Unix ns);
	// drainUnwanted: its placement's demand no longer counts it, and it
	// ends at drainEnd, drainGrace after that, unless demand returns
	drainStart    int64
	drainUnwanted bool
	// drainReady is when the drain is predicted to complete (Unix ns):
	// work predicted to end before it may backfill the node (backfill.go)
	drainReady    int64
	inUtilization bool          // counted in its pools' utilization (poolStat)
	inShapes      bool          // counted in its pools' shapes (poolStat)
	imageIdle     time.Duration // image_cache_idle_secs; 0 means the default
	sent          sentWindow    // vCPUs of starts in the last minute (PLACE-16)
}

type tenant struct {
	id   TenantID
	held int // requests charged: what caps count (ARB-11)
	// holds is what it holds per pool in resources, for fair share
	// (DECISIONS 13); finished jobs awaiting their settle count against
	// caps (ARB-35) but hold no node room, so they are not in holds.
	holds []poolHold
	tqs   []*tenantQ
	chk   struct { // scratch of CheckInvariants
		held  int
		holds []poolHold
	}
}

type relay struct {
	id         RelayID
	up         bool
	session    uint64
	synced     bool // current session sent a heartbeat
	concurrent int
	held       int
	open       int       // unclaimed tickets of its runners (API-20)
	bare       int       // live admissions without a ticket (restored ones)
	runners    []*runner // sorted by id
	adms       map[AdmissionID]*admission
}

type runner struct {
	id          RunnerID
	relay       *relay
	tenant      *tenant
	p           *placementQueue
	limit       int
	reqConc     int // request_concurrency; 0 means no bound here
	open        int // unclaimed tickets (API-20)
	held        int
	unadmitted  int
	unadmittedQ *placementQueue // placement its unadmitted jobs are held under
	holds       []poolHold      // what it holds for fair share, per pool
	chk         struct {        // scratch of CheckInvariants
		held, open int
		holds      []poolHold
	}
	production   bool
	lastJob      time.Time // zero: never took a job
	backoffN     int
	backoffEnd   time.Time // its requests but the lead wait until then
	leadEnd      time.Time // its lead request waits until then (backoff)
	leadOut      int       // lead requests out: offered to answered (at most leadAllow)
	leadJobs     int       // backed off, and its lead requests' last answers were this many jobs in a row
	indexedLead  bool      // indexed while backed off: the oldest ticket only
	probesOut    int
	waiting      []*ticket // queued tickets not parked, in seq order
	tickets      map[TicketID]*ticket
	indexed      bool
	indexedCls   int
	probeTimerAt time.Time
	// stats: wall times of its finished jobs, predicting a request's job
	// before GitLab names it (backfill.go)
	stats RuntimeStat
}

type waiter struct {
	seq     uint64
	tq      *tenantQ // non-nil while in an index
	skip    map[NodeID]bool
	retryAt int64   // Unix ns; parked until then when non-zero
	tk      *ticket // exactly one of tk, jb is set
	jb      *job
}

type ticket struct {
	waiter
	id        TicketID
	runner    *runner
	state     ticketState
	lastPoll  time.Time
	probe     bool
	lead      bool // the runner's lead request while it is backed off
	charged   bool
	chargedTo *placementQueue // placement it is charged under while charged
	res       *reservation
	adm       *admission
	endWhy    string
	idleTm    timer
	// immediate: offered in the Step that queued it, and no offer of it
	// failed since (API-17)
	immediate bool
}

type reservation struct {
	id        ReservationID
	node      *node
	env       Resources
	state     resState
	ticket    *ticket
	adm       *admission
	job       *job
	offeredAt time.Time
	leaseEnd  time.Time
	leaseSecs int
	nodeIdx   int
	tm        timer // pending offer or lease timer
}

type admission struct {
	id        AdmissionID
	runner    *runner
	state     admState
	outcome   OutcomeKind
	res       *reservation
	ticket    *ticket
	job       *job
	claimedAt time.Time
	session   uint64
	charged   bool
	chargedTo *placementQueue // placement it is charged under while charged
	restored  bool
	renewals  int32 // renewals asked since the claim (ARB-32)
}

// job is kept small: 200,000 of them are the bulk of the Core's memory.
type job struct {
	waiter
	id     JobID
	runner *runner
	p      *placementQueue // its placement; the envelope is p.pl.Envelope
	admID  AdmissionID
	res    *reservation
	node   *node
	// at is one of two instants (Unix ns), told apart by started: until
	// the job's node accepts it, its place_within deadline (0 none; read
	// it through placeBy); from then on, when it started (startedAt), for
	// runtime predictions (BS-23). One slot serves both because 200,000
	// jobs must stay within 160 bytes each (a second int64 moves a job
	// into the next allocation size class, 3 MiB more at that count), and
	// a started job is never queued again, so its deadline is spent.
	at          int64
	deadlineSeq uint64 // pending deadline timer's seq, 0 none
	project     string
	ref         string
	nodeIdx     int32
	name        uint32 // interned job name (Core.names), 0 none
	state       jobState
	cls         uint8
	legacy      bool
	charged     bool
	held        bool // waiting unindexed: project not listed (ARB-41)
	rulesHit    bool // was refused a node with room by placement rules
	started     bool // its node accepted it: at is its start, not its deadline
	// idle: the job finished but is still charged until settled (ARB-35);
	// it holds no node room, so fair share leaves it out (ARB-09).
	idle bool
}

func (j *job) env() Resources { return j.p.pl.Envelope }

// placeBy is the job's place_within deadline (Unix ns): 0 when it has none
// or has started.
func (j *job) placeBy() int64 {
	if j.started {
		return 0
	}
	return j.at
}

// startedAt is when the job's node accepted it (Unix ns), 0 before.
func (j *job) startedAt() int64 {
	if !j.started {
		return 0
	}
	return j.at
}

// queueMembership is a node's membership in one placement's index.
type queueMembership struct {
	p   *placementQueue
	ent nodeEntry
	in  bool
}
