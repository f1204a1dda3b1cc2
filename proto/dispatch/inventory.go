package dispatch

import (
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/internal/enum"
)

// Report is the node's inventory (type "report", seq): sent right after
// welcome on a new session, and again whenever it changes. A version-3+
// node sends [Held] right after it (NSESS-11, NSESS-24).
type Report struct {
	// Release is the node's vk version, e.g. "0.4.1".
	Release string `json:"release,omitempty"`
	// Host is the node's host name, for the UI.
	Host string `json:"host,omitempty"`
	// Name is the node's configured name ([node] name), which the hub
	// shows instead of the name it enrolled with; empty when none is
	// configured. Optional and additive.
	Name string `json:"name,omitempty"`
	// Resources is what the node offers to placed work in total (its
	// ceilings, not what is free now).
	Resources Resources `json:"resources"`
	// Labels are the labels declared in the node's config (PLACE-02).
	Labels []string `json:"labels,omitempty"`
	// Pools are the pools the node last applied from Settings, so the hub
	// can tell whether its settings reached the node; empty when none.
	Pools []string `json:"pools,omitempty"`
	// Registry is the node's [registry] base URL (XFER-17), e.g.
	// "https://registry.example.com"; empty when it has none.
	Registry string `json:"registry,omitempty"`
	// MaxConcurrency is the node's [executor.schedule] max_concurrency
	// (PLACE-04); 0 means no limit of its own.
	MaxConcurrency int `json:"max_concurrency,omitempty"`
	// Executor names the executor backend: "process", "oci" or "microvm".
	Executor string `json:"executor,omitempty"`
	// LocalRunner: a local gitlab-runner using the vk executor runs on the
	// host; the hub places nothing here (PLACE-08, PLACE-09).
	LocalRunner bool `json:"local_runner,omitempty"`
}

// Resources is a node's capacity for placed work.
type Resources struct {
	// Mem is the memory available to jobs.
	Mem client.Size `json:"mem"`
	// Disk is the scratch disk available to jobs.
	Disk client.Size `json:"disk"`
	// CPUs is the number of CPUs available to jobs.
	CPUs int `json:"cpus"`
}

// NodeState is a node's readiness. Unknown values decode to NodeOther.
type NodeState string

// Node states.
const (
	NodeReady       NodeState = "ready"       // takes offers and starts
	NodeDraining    NodeState = "draining"    // refuses new offers; running jobs finish; reservations lapse (NODE-05)
	NodeDrained     NodeState = "drained"     // draining finished: nothing running
	NodeQuarantined NodeState = "quarantined" // refuses everything; held reservations released
	NodeMaintenance NodeState = "maintenance" // being updated or reset
	NodeOther       NodeState = "other"       // not known to this version
)

var knownNodeStates = []NodeState{NodeReady, NodeDraining, NodeDrained, NodeQuarantined, NodeMaintenance, NodeOther}

// UnmarshalText maps unknown states to NodeOther.
func (s *NodeState) UnmarshalText(b []byte) error {
	*s = enum.Parse(string(b), NodeOther, knownNodeStates)
	return nil
}

// Heartbeat is the node's periodic state (type "heartbeat", seq), every
// Welcome.HeartbeatSecs.
type Heartbeat struct {
	// State is the node's readiness. Required.
	State NodeState `json:"state"`
	// Load1 is the host's 1-minute load average (PLACE-12); nil when the
	// node cannot read it.
	Load1 *float64 `json:"load1,omitempty"`
	// Jobs is the number of unfinished jobs the node runs.
	Jobs int `json:"jobs"`
	// Reservations is the number of reservations it holds.
	Reservations int `json:"reservations"`
	// Free is what the node's ledger has not granted; nil when not reported.
	Free *Resources `json:"free,omitempty"`
}

// FrameType returns TypeReport.
func (Report) FrameType() Type { return TypeReport }

// FrameType returns TypeHeartbeat.
func (Heartbeat) FrameType() Type { return TypeHeartbeat }

// FrameKind returns no kind ("").
func (Report) FrameKind() Kind { return "" }

// FrameKind returns no kind ("").
func (Heartbeat) FrameKind() Kind { return "" }
func (Report) sealed()            {}
func (Heartbeat) sealed()         {}
