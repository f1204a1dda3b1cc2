package sched

import (
	"slices"
	"strings"
)

// NodeID names a node. The driver mints it (e.g. an index into its own table
// of node keys); zero is not a valid ID.
type NodeID uint32

// TenantID names a tenant of the capacity policy; zero is not valid.
type TenantID uint32

// RunnerID names one runner of one relay; zero is not valid.
type RunnerID uint32

// RelayID names an enrolled relay; zero is not valid.
type RelayID uint32

// TicketID names a queued reservation request; minted by the driver.
type TicketID uint64

// JobID names a job submitted to the hub; minted by the driver.
type JobID uint64

// ReservationID names one offer/reservation on one node. The Core mints
// reservation IDs itself (see [Core.Step] and [Restore]); the driver maps them
// to wire IDs.
type ReservationID uint64

// AdmissionID names the admission a grant creates. The Core mints it when a
// node accepts an offer; it is the ID the relay claims and reports the
// outcome of.
type AdmissionID uint64

// Resources is an amount of node resources. MemBytes and DiskBytes are bytes;
// CPUs is whole vCPUs. The zero value is "nothing".
type Resources struct {
	MemBytes  int64
	DiskBytes int64
	CPUs      int64
}

// String renders r as "mem=… disk=… cpus=…" in bytes and vCPUs.
func (r Resources) String() string {
	return "mem=" + itoa(r.MemBytes) + " disk=" + itoa(r.DiskBytes) + " cpus=" + itoa(r.CPUs)
}

func (r Resources) add(o Resources) Resources {
	return Resources{r.MemBytes + o.MemBytes, r.DiskBytes + o.DiskBytes, r.CPUs + o.CPUs}
}

func (r Resources) sub(o Resources) Resources {
	return Resources{r.MemBytes - o.MemBytes, r.DiskBytes - o.DiskBytes, r.CPUs - o.CPUs}
}

// Placement says where a runner's work may go: nodes of Pool carrying every
// one of Labels, each job taking Envelope. Labels are compared as a set.
type Placement struct {
	Pool     string
	Labels   []string
	Envelope Resources
}

// Key returns a canonical string naming the placement (labels sorted and
// deduplicated), usable as a map key and ordered deterministically.
func (p Placement) Key() string {
	ls := slices.Clone(p.Labels)
	slices.Sort(ls)
	ls = slices.Compact(ls)
	var b strings.Builder
	b.WriteString(p.Pool)
	b.WriteByte('|')
	b.WriteString(strings.Join(ls, ","))
	b.WriteByte('|')
	b.WriteString(itoa(p.Envelope.MemBytes))
	b.WriteByte('/')
	b.WriteString(itoa(p.Envelope.DiskBytes))
	b.WriteByte('/')
	b.WriteString(itoa(p.Envelope.CPUs))
	return b.String()
}

func itoa(v int64) string {
	if v == 0 {
		return "0"
	}
	neg := v < 0
	if neg {
		v = -v
	}
	var buf [24]byte
	i := len(buf)
	for v > 0 {
		i--
		buf[i] = byte('0' + v%10)
		v /= 10
	}
	if neg {
		i--
		buf[i] = '-'
	}
	return string(buf[i:])
}

// NodeState is a node's reported readiness. Only NodeReady nodes receive
// offers and starts.
type NodeState uint8

// Node states as nodes report them (NSESS-21 not_ready covers all but ready).
const (
	NodeReady NodeState = iota
	NodeDraining
	NodeDrained
	NodeQuarantined
	NodeMaintenance
)

var nodeStateNames = [...]string{"ready", "draining", "drained", "quarantined", "maintenance"}

func (s NodeState) String() string {
	if int(s) < len(nodeStateNames) {
		return nodeStateNames[s]
	}
	return "unknown"
}

// OutcomeKind is what a relay reports for a claimed admission (PROTO-04).
type OutcomeKind uint8

// Outcome kinds. OutcomeNone is the zero value and never valid in an event.
const (
	OutcomeNone OutcomeKind = iota
	OutcomeJob
	OutcomeEmpty
	OutcomeError
	OutcomeReleased
)

var outcomeNames = [...]string{"none", "job", "empty", "error", "released"}

func (k OutcomeKind) String() string {
	if int(k) < len(outcomeNames) {
		return outcomeNames[k]
	}
	return "unknown"
}

// labelsSubset reports whether every label of want is in have (have sorted).
func labelsSubset(want, have []string) bool {
	for _, l := range want {
		if _, ok := slices.BinarySearch(have, l); !ok {
			return false
		}
	}
	return true
}

func sortedSet(ls []string) []string {
	out := slices.Clone(ls)
	slices.Sort(out)
	return slices.Compact(out)
}
