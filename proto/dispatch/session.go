package dispatch

import "github.com/vk-ci/vk/proto/internal/enum"

// Hello is the node's first frame (type "hello", no seq): its versions and,
// when resuming, the previous session.
type Hello struct {
	// Versions is the range the node speaks (NodeVersions). Required.
	Versions Range `json:"versions"`
	// Node is the node's enrolled ID; the hub checks it against the key the
	// session was authenticated with.
	Node string `json:"node"`
	// Release is the node's vk version, e.g. "0.4.1", for logs and the UI.
	Release string `json:"release,omitempty"`
	// Resume names the previous session to resume; nil for a new one.
	Resume *Resume `json:"resume,omitempty"`
}

// Resume names a previous session in a hello (STYLE C6).
type Resume struct {
	// Handle is the previous Welcome.Handle.
	Handle string `json:"handle"`
	// LastSeq is the last hub seq the node processed in that session.
	LastSeq uint64 `json:"last_seq"`
}

// Welcome is the hub's answer to hello (type "welcome", no seq): the
// negotiated version and the intervals the node must keep.
type Welcome struct {
	// Version is the negotiated version, within both ranges.
	Version int `json:"version"`
	// Handle names this session for a later Resume.
	Handle string `json:"handle"`
	// Resumed: the hub continued the session named in hello's Resume.
	// False means a new session: seq restarts at 1 both ways and the node
	// sends report then held.
	Resumed bool `json:"resumed,omitempty"`
	// LastSeq is the last node seq the hub processed, when Resumed; 0
	// otherwise.
	LastSeq uint64 `json:"last_seq,omitempty"`
	// HeartbeatSecs is how often the node sends a heartbeat, in seconds
	// (DECISIONS 10 suggests 5). Required (> 0).
	HeartbeatSecs int `json:"heartbeat_secs"`
	// UnreachableAfterSecs is how long without any frame before the hub
	// counts the node unreachable, in seconds; the node may use it to
	// judge its own link. 0 means not stated.
	UnreachableAfterSecs int `json:"unreachable_after_secs,omitempty"`
}

// ErrorCode is why a peer ends a session. Unknown codes decode to
// ErrorOther.
type ErrorCode string

// Error frame codes.
const (
	ErrorVersion      ErrorCode = "version"      // no common version; see ErrorFrame.Versions
	ErrorProtocol     ErrorCode = "protocol"     // a frame broke the protocol (bad seq, job message below 3, gap in output, …)
	ErrorUnauthorized ErrorCode = "unauthorized" // the node is unknown, removed, or not who its hello says
	ErrorReplaced     ErrorCode = "replaced"     // a newer session of the same node took over
	ErrorShutdown     ErrorCode = "shutdown"     // the hub is stopping; redial later
	ErrorOther        ErrorCode = "other"        // not known to this version
)

var knownErrorCodes = []ErrorCode{ErrorVersion, ErrorProtocol, ErrorUnauthorized, ErrorReplaced, ErrorShutdown, ErrorOther}

// UnmarshalText maps unknown codes to ErrorOther.
func (c *ErrorCode) UnmarshalText(b []byte) error {
	*c = enum.Parse(string(b), ErrorOther, knownErrorCodes)
	return nil
}

// ErrorFrame is sent before closing a session (type "error", no seq).
type ErrorFrame struct {
	// Code says why. Required.
	Code ErrorCode `json:"code"`
	// Message is for the peer's log, e.g. a VersionError's text naming
	// both ranges.
	Message string `json:"message"`
	// Versions is the sender's range, with code version; nil otherwise.
	Versions *Range `json:"versions,omitempty"`
}

// Keepalive proves the link is up (type "keepalive", no seq). It carries
// no state (STYLE C6).
type Keepalive struct{}

// Settings is what the hub applies to the node (type "settings", seq): sent
// after welcome and whenever an operator changes it.
type Settings struct {
	// Ceiling is the hub's concurrency ceiling for the node (OPS-02,
	// PLACE-04, PLACE-06); 0 means none.
	Ceiling int `json:"ceiling,omitempty"`
	// Pools are the pools an operator put the node in (OPS-01). They
	// replace the pools of the node's config only when PoolsSet is true or
	// Pools is non-empty: a frame that only changes the ceiling or the
	// drain leaves the node's pools as they are.
	Pools []string `json:"pools,omitempty"`
	// PoolsSet: an operator set the node's pools, possibly to none (an
	// empty Pools then means "in no pool"). Optional and additive: a hub
	// that does not send it names pools only by a non-empty Pools.
	PoolsSet bool `json:"pools_set,omitempty"`
	// CeilingZero sets a ceiling of 0 (OPS-02: the node takes no new
	// placed work, running and held work carries on); Ceiling is then
	// ignored. Optional and additive: a node that does not know it reads
	// the frame as "no ceiling" and the hub still offers it nothing.
	CeilingZero bool `json:"ceiling_zero,omitempty"`
	// Drain: an operator drained the node at the hub (`vk-hub nodes
	// drain`); the node refuses new offers and starts, as for a local
	// drain, until a later settings frame clears it. Optional and additive.
	Drain bool `json:"drain,omitempty"`
	// Epoch is the leader lease epoch of the hub that sent it (docs/ha.md):
	// a node refuses a command older than the newest epoch it has heard.
	// 0 (absent) from a hub without a lease. Optional and additive.
	Epoch uint64 `json:"epoch,omitempty"`
}

// FrameType returns TypeHello.
func (Hello) FrameType() Type { return TypeHello }

// FrameType returns TypeWelcome.
func (Welcome) FrameType() Type { return TypeWelcome }

// FrameType returns TypeError.
func (ErrorFrame) FrameType() Type { return TypeError }

// FrameType returns TypeKeepalive.
func (Keepalive) FrameType() Type { return TypeKeepalive }

// FrameType returns TypeSettings.
func (Settings) FrameType() Type { return TypeSettings }

// FrameKind returns no kind ("").
func (Hello) FrameKind() Kind { return "" }

// FrameKind returns no kind ("").
func (Welcome) FrameKind() Kind { return "" }

// FrameKind returns no kind ("").
func (ErrorFrame) FrameKind() Kind { return "" }

// FrameKind returns no kind ("").
func (Keepalive) FrameKind() Kind { return "" }

// FrameKind returns no kind ("").
func (Settings) FrameKind() Kind { return "" }

func (Hello) sealed()      {}
func (Welcome) sealed()    {}
func (ErrorFrame) sealed() {}
func (Keepalive) sealed()  {}
func (Settings) sealed()   {}
