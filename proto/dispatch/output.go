package dispatch

import "github.com/vk-ci/vk/proto/client"

// MaxUnackedOutput is how many output bytes a node may send past the last
// ack (NODE-11): 4 MiB.
const MaxUnackedOutput = 4 << 20

// Output carries job output (node → hub, kind "output", NSESS-15): Data
// are the output's bytes from Offset, at most MaxOutputChunk raw. The hub
// trims an overlap and treats a gap as a protocol error (NODE-12).
type Output struct {
	// Job is the hub's job ID. Required.
	Job string `json:"job"`
	// Offset is Data's first byte's offset in the job's output (bytes of
	// the trace as GitLab will store it, NODE-10).
	Offset int64 `json:"offset"`
	// Data are the bytes, base64 in JSON. At most MaxOutputChunk.
	Data []byte `json:"data"`
}

// OutputAck says output is durably stored up to Offset (hub → node, kind
// "output_ack", NSESS-08); no answer. After a reconnect the node resends
// from the acked offset (NODE-11).
type OutputAck struct {
	// Job is the hub's job ID. Required.
	Job string `json:"job"`
	// Offset is the end of what is stored: every byte before it is synced.
	Offset int64 `json:"offset"`
	// Epoch is the leader lease epoch of the hub that sent it (docs/ha.md):
	// a node refuses a command older than the newest epoch it has heard.
	// 0 (absent) from a hub without a lease. Optional and additive.
	Epoch uint64 `json:"epoch,omitempty"`
}

// Result is how a job ended (node → hub, kind "result", NSESS-16), sent
// once every byte up to Result.OutputLen is acked and repeated until
// [Recorded].
type Result struct {
	// Job is the hub's job ID. Required.
	Job string `json:"job"`
	// Result is the outcome. Required.
	Result client.JobResult `json:"result"`
	// Egress is the job's final egress report, the highest revision
	// (NSESS-19); nil when the node does not measure egress. Sent at
	// every version (NSESS-20).
	Egress *EgressReport `json:"egress,omitempty"`
}

// Egress reports a running job's egress so far (node → hub, kind
// "egress", version ≥ 6, NSESS-17, NSESS-19, NSESS-20): when it changed,
// at most once every 2 s, and after a reconnect.
type Egress struct {
	// Job is the hub's job ID. Required.
	Job string `json:"job"`
	// Report is cumulative; the hub keeps the highest revision.
	Report EgressReport `json:"report"`
}

// EgressReport is a job's network egress so far, cumulative since the job
// started (NSESS-19). The spec names only its revision; the counters are
// our choice: totals plus the busiest destinations.
type EgressReport struct {
	// Revision increases with every new report of the job; a report with
	// a revision at or below one already kept is ignored. Starts at 1.
	Revision uint64 `json:"revision"`
	// TxBytes are bytes the job sent off the node.
	TxBytes int64 `json:"tx_bytes"`
	// RxBytes are bytes the job received from off the node.
	RxBytes int64 `json:"rx_bytes"`
	// Connections counts outbound connections opened.
	Connections int64 `json:"connections,omitempty"`
	// Destinations break the totals down per destination, largest first;
	// the node may cut the list short (it keeps at most 64).
	Destinations []EgressDestination `json:"destinations,omitempty"`
}

// EgressDestination is one destination in an EgressReport.
type EgressDestination struct {
	// Host is the destination's address or name, e.g. "10.0.0.7" or
	// "registry.example.com".
	Host string `json:"host"`
	// Port is the destination port; 0 for port-less protocols.
	Port int `json:"port,omitempty"`
	// Proto is "tcp" or "udp".
	Proto string `json:"proto,omitempty"`
	// TxBytes sent to it.
	TxBytes int64 `json:"tx_bytes"`
	// RxBytes received from it.
	RxBytes int64 `json:"rx_bytes"`
}

// FrameType returns TypeJob.
func (Output) FrameType() Type { return TypeJob }

// FrameType returns TypeJob.
func (OutputAck) FrameType() Type { return TypeJob }

// FrameType returns TypeJob.
func (Result) FrameType() Type { return TypeJob }

// FrameType returns TypeJob.
func (Egress) FrameType() Type { return TypeJob }

// FrameKind returns KindOutput.
func (Output) FrameKind() Kind { return KindOutput }

// FrameKind returns KindOutputAck.
func (OutputAck) FrameKind() Kind { return KindOutputAck }

// FrameKind returns KindResult.
func (Result) FrameKind() Kind { return KindResult }

// FrameKind returns KindEgress.
func (Egress) FrameKind() Kind { return KindEgress }
func (Output) sealed()         {}
func (OutputAck) sealed()      {}
func (Result) sealed()         {}
func (Egress) sealed()         {}
