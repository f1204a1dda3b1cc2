package admin

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/proto/client"
)

// Sentinel errors a [Backend] returns (wrapped) so the admin socket can
// answer them plainly; any other error is an internal one.
var (
	// ErrNotFound: no node (or relay) with that ID. Answered 404.
	ErrNotFound = errors.New("admin: not found")
	// ErrInvalid: the request is malformed or refused as given. Answered
	// 400.
	ErrInvalid = errors.New("admin: invalid request")
)

// NoCeiling as a ceiling means the hub sets none: the node's own
// max_concurrency alone caps it (PLACE-04).
const NoCeiling = -1

// Backend is what the admin socket needs of the hub's live state, which
// the hub's driver owns (nodes, ceilings, pools, drain, the capacity
// policy) and implements. Enrolment tokens, relays and project approvals
// are handled by this package against the store directly; Backend is told
// of the changes that affect live state. Methods are called from HTTP
// handler goroutines, concurrently; each must be safe for that and return
// once the change is in effect (or durably queued).
type Backend interface {
	// Nodes lists the enrolled nodes with their live state, any order
	// (the CLI sorts by ID).
	Nodes(ctx context.Context) ([]Node, error)
	// SetPools sets the pools a node belongs to (OPS-01), replacing its
	// previous pools; an empty list takes it out of every pool.
	SetPools(ctx context.Context, node string, pools []string) error
	// SetCeiling sets the node's concurrency ceiling (OPS-02): n >= 0 (0
	// takes no new placed work), or [NoCeiling]. The node's cap is the
	// smaller of it and the node's max_concurrency (PLACE-04); lowering it
	// stops no running job (PLACE-07).
	SetCeiling(ctx context.Context, node string, n int) error
	// Drain starts (on) or ends (!on) draining a node: it takes no new
	// offers and lets held reservations lapse (NODE-05).
	Drain(ctx context.Context, node string, on bool) error
	// Policy returns the capacity policy in force (OPS-03).
	Policy(ctx context.Context) (Policy, error)
	// SetPolicy replaces the capacity policy (OPS-03). p has passed
	// [Policy.Validate]; the hub converts it to its own form here (the
	// conversion hook) and may refuse it with an error wrapping
	// [ErrInvalid] (e.g. a node ID it does not know). It persists the
	// policy so a restarted hub keeps it.
	SetPolicy(ctx context.Context, p Policy) error
	// RelayRemoved tells the hub an operator removed a relay (already
	// marked removed in the store): it ends the relay's session; the
	// relay's signed requests are refused from now on (AUTH-13).
	RelayRemoved(ctx context.Context, relay string) error
	// NodeRemoved tells the hub an operator removed a node that will not
	// come back (already marked removed in the store): its session ends,
	// its reservations end, its jobs end lost, and it leaves the node
	// list; its key is refused from now on.
	NodeRemoved(ctx context.Context, node string) error
	// ApprovalChanged tells the hub an operator approved or rejected a
	// project or (Project 0) a GitLab server (OPS-06), already stored: it
	// releases or fails the jobs held for it and updates relays' server
	// status.
	ApprovalChanged(ctx context.Context, a store.Approval) error
	// Queue lists what waits for room: the waiting tickets (queued,
	// offered, or granted and unclaimed) in arbitration order, then the
	// queued jobs in submission order, each with its wait reason.
	Queue(ctx context.Context) ([]Waiting, error)
}

// WaitingKind says what waits in the queue.
type WaitingKind string

// Waiting kinds.
const (
	// WaitTicket is a reservation ticket: a relay's runner waiting for
	// room before it asks GitLab for a job.
	WaitTicket WaitingKind = "ticket"
	// WaitJob is a submitted job not yet started on a node.
	WaitJob WaitingKind = "job"
	// WaitRunner is a runner that asks for no room at all: its relay
	// waits for an operator to approve its GitLab server.
	WaitRunner WaitingKind = "runner"
)

// Waiting is one entry of the hub's queue, as `vk-hub queue` and the UI's
// Queue page show it.
type Waiting struct {
	// Kind is ticket or job.
	Kind WaitingKind `json:"kind"`
	// ID is the ticket or job ID.
	ID string `json:"id"`
	// Tenant is the capacity-policy tenant charged; empty means the
	// default tenant.
	Tenant string `json:"tenant,omitempty"`
	// Relay and Runner name the relay and its runner that asked.
	Relay  string `json:"relay,omitempty"`
	Runner string `json:"runner,omitempty"`
	// Instance and Project name the GitLab server and project (a job's;
	// tickets have none yet: Project 0).
	Instance string `json:"instance,omitempty"`
	Project  int64  `json:"project,omitempty"`
	// Placement is the placement (pool) asked for.
	Placement string `json:"placement,omitempty"`
	// Class is the scheduling class ("production", "normal", "probe", …;
	// free text shown as is).
	Class string `json:"class,omitempty"`
	// Since is when it started waiting; zero if unknown.
	Since time.Time `json:"since,omitzero"`
	// Reason is the current wait reason as operator text,
	// sched.Reason.Text() (e.g. "waiting: tenant cap 20 reached"); empty
	// means none known.
	Reason string `json:"reason,omitempty"`
	// Idle: a runner's standing request while its runner is backed off
	// because GitLab had no job for it lately: no work waits behind it.
	Idle bool `json:"idle,omitempty"`
	// Competing is how many requests wait for the same room (its own
	// placement's and those of placements whose envelopes fit the same
	// nodes), itself included; 0 when unknown. Ahead is how many of them
	// go before it.
	Competing int `json:"competing,omitempty"`
	Ahead     int `json:"ahead,omitempty"`
	// EstimatedSecs is the scheduler's estimate of the wait left, in
	// seconds; nil when it cannot estimate (no job finished yet, or a
	// cap or a backoff rather than room holds it back).
	EstimatedSecs *int64 `json:"estimated_secs,omitempty"`
	// WaitedSecs is how long it has waited so far by the hub's clock; 0
	// when unknown.
	WaitedSecs int64 `json:"waited_secs,omitempty"`
}

// PositionText is "N of M", the entry's place among the requests waiting
// for the same room; "-" when unknown.
func (w Waiting) PositionText() string {
	if w.Competing == 0 {
		return "-"
	}
	return strconv.Itoa(w.Ahead+1) + " of " + strconv.Itoa(w.Competing)
}

// EstimateText is the estimated wait ("~5m40s", "now"); "-" when
// unknown.
func (w Waiting) EstimateText() string {
	switch {
	case w.EstimatedSecs == nil:
		return "-"
	case *w.EstimatedSecs == 0:
		return "now"
	}
	return "~" + (time.Duration(*w.EstimatedSecs) * time.Second).String()
}

// Node is one node as `vk-hub nodes list` shows it.
type Node struct {
	// ID is the node's enrolled ID.
	ID string `json:"id"`
	// Name is its display (host) name.
	Name string `json:"name,omitempty"`
	// State is its readiness as the hub sees it: "ready", "draining",
	// "drained", "quarantined", "unreachable", "disconnected", … (free
	// text, shown as is).
	State string `json:"state"`
	// Pools it belongs to, set by the operator.
	Pools []string `json:"pools,omitempty"`
	// Labels it reports.
	Labels []string `json:"labels,omitempty"`
	// Ceiling is the hub's concurrency ceiling, or [NoCeiling].
	Ceiling int `json:"ceiling"`
	// MaxConcurrency is the node's own reported limit; 0 means unknown.
	MaxConcurrency int `json:"max_concurrency,omitempty"`
	// Jobs counts its unfinished placed jobs; Reservations its held
	// reservations.
	Jobs         int `json:"jobs"`
	Reservations int `json:"reservations"`
	// Capacity is its total envelope as reported.
	Capacity client.Envelope `json:"capacity"`
	// LastSeen is its last heartbeat; zero if never.
	LastSeen time.Time `json:"last_seen,omitzero"`
}
