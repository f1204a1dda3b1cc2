// Package wtrace is the hub's workload trace (BS-18): the facts a
// simulation needs to replay what the fleet did, recorded as the hub runs,
// kept bounded on disk and exported for `vk-sim replay` and
// `vk-hub capacity-policy set --dry-run` (docs/replay.md).
//
// # Format
//
// A trace is JSON lines. The first line is a [Header] (`{"vktrace":1,…}`);
// every later line is one [Record] with its time in Unix milliseconds and
// its kind. Records carry the core's numeric IDs (runners, tenants, nodes,
// tickets, admissions, jobs) and names only where an operator wrote them
// (tenant names) or a job's project path and name: never a job spec,
// variable, token or key. A reader skips kinds it does not know, so newer
// hubs may add kinds within one version; a change of meaning bumps
// [Version].
//
// Kinds, and the fields each sets:
//   - policy: Policy, the capacity policy in force from T on.
//   - runner: Runner, Tenant, Pool, Labels, CPUs, Mem, Disk (bytes), Conc
//     (request_concurrency), Prod (production): a runner as its relay's
//     inventory said it.
//   - node: Node, CPUs, Mem, Disk, Pool (its first pool), Conc
//     (max_concurrency), State (ready, draining, …): a node's report.
//   - node_gone: Node, Reason (unreachable or lost).
//   - demand: Ticket, Runner: a runner queued a reservation request.
//   - grant: Ticket, Adm, Node: the request got room.
//   - ask: Adm: the relay claimed the grant and asked GitLab.
//   - answer: Adm, OK (GitLab answered a job; false: empty).
//   - submit: Job, Runner, Adm, Name (project path/job name).
//   - start: Job, Node: the node started the job.
//   - end: Job, Wall (ms), Reason (finished, or the failure: lost,
//     no_capacity, cancelled).
//   - queue: Job, Runner, Queued (ms), Pending: what GitLab's job response
//     said about its queue when it handed the job out, as the relay
//     submitted it — how long the job had been pending
//     (time_in_queue_seconds) and how many pending jobs the runner could
//     take then, this one included (queue_size). It follows the job's
//     submit record; a job without one (an older relay or hub, an API
//     client's job) has no queue record. GitLab's empty answer (204)
//     carries no queue figures, so nothing like it is recorded for those.
//   - drop: N records the recorder dropped since the last drop record
//     because its buffer was full.
//
// # Versions
//
// Version 1 gained the queue kind after its first release: a reader that
// predates it skips the kind and replays with estimated arrivals, as it
// did. A record whose meaning changes bumps [Version], and a reader
// refuses a version it does not know with an error naming both.
package wtrace

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/vk-ci/vk/sched"
)

// Version is the trace format's version, the header's "vktrace".
const Version = 1

// Kind names a record's kind.
type Kind string

// The record kinds (see the package documentation).
const (
	KindPolicy   Kind = "policy"
	KindRunner   Kind = "runner"
	KindNode     Kind = "node"
	KindNodeGone Kind = "node_gone"
	KindDemand   Kind = "demand"
	KindGrant    Kind = "grant"
	KindAsk      Kind = "ask"
	KindAnswer   Kind = "answer"
	KindSubmit   Kind = "submit"
	KindStart    Kind = "start"
	KindEnd      Kind = "end"
	KindDrop     Kind = "drop"
	KindQueue    Kind = "queue"
)

// Header is a trace's first line.
type Header struct {
	Version int    `json:"vktrace"`
	Start   int64  `json:"start"`          // Unix ms of the first record
	Source  string `json:"src,omitempty"`  // "hub", "vk-sim", …
	Note    string `json:"note,omitempty"` // free text
}

// Record is one line of a trace after the header. Which fields a kind sets
// is listed in the package documentation; the others are zero.
type Record struct {
	T      int64    `json:"t"` // Unix milliseconds
	K      Kind     `json:"k"`
	Ticket uint64   `json:"tk,omitempty"`
	Adm    uint64   `json:"adm,omitempty"`
	Runner uint64   `json:"rn,omitempty"`
	Tenant uint64   `json:"tn,omitempty"`
	Node   uint64   `json:"nd,omitempty"`
	Job    uint64   `json:"job,omitempty"`
	Name   string   `json:"name,omitempty"`
	OK     bool     `json:"ok,omitempty"`
	Prod   bool     `json:"prod,omitempty"`
	Reason string   `json:"why,omitempty"`
	Wall   int64    `json:"wall,omitempty"` // ms
	CPUs   int64    `json:"cpus,omitempty"`
	Mem    int64    `json:"mem,omitempty"`  // bytes
	Disk   int64    `json:"disk,omitempty"` // bytes
	Pool   string   `json:"pool,omitempty"`
	Labels []string `json:"labels,omitempty"`
	Conc   int      `json:"conc,omitempty"`
	State  string   `json:"state,omitempty"`
	N      int64    `json:"n,omitempty"`
	// Queued and Pending are a queue record's time in GitLab's queue (ms)
	// and queue size.
	Queued  int64   `json:"queued,omitempty"`
	Pending int64   `json:"pending,omitempty"`
	Policy  *Policy `json:"policy,omitempty"`
}

// Time is the record's time.
func (r *Record) Time() time.Time { return time.UnixMilli(r.T).UTC() }

// Policy is the part of the capacity policy a replay applies: tenants'
// weights and caps, headroom and the arbitration knobs, in the core's
// terms (zero: the core's default). Project lists and placement rules are
// left out.
type Policy struct {
	Tenants              []Tenant   `json:"tenants,omitempty"`
	Production           []uint64   `json:"production,omitempty"` // runner IDs
	Headroom             []Headroom `json:"headroom,omitempty"`
	BusySecs             int        `json:"busy_secs,omitempty"`
	ProbeLimit           int        `json:"probe_limit,omitempty"`
	BackoffInitialSecs   int        `json:"backoff_initial_secs,omitempty"`
	BackoffMaxSecs       int        `json:"backoff_max_secs,omitempty"`
	ProductionProbeBurst int        `json:"production_probe_burst,omitempty"`
	LeaseSecs            int        `json:"lease_secs,omitempty"`
	ClaimRenewals        int        `json:"claim_renewals,omitempty"`
	PackAboveUtilization float64    `json:"pack_above_utilization,omitempty"`
	DrainsPerPool        int        `json:"drains_per_pool,omitempty"`
	WideFraction         float64    `json:"wide_fraction,omitempty"`
	DrainMaxHoldSecs     int        `json:"drain_max_hold_secs,omitempty"`
	// FairDrainMaxWaitSecs bounds fairness drains as the capacity policy's
	// fair_drain_max_wait_secs does: 0 the core's default, -1 none.
	FairDrainMaxWaitSecs int `json:"fair_drain_max_wait_secs,omitempty"`
}

// Tenant is one tenant of a [Policy].
type Tenant struct {
	ID     uint64 `json:"id"`
	Name   string `json:"name,omitempty"`
	Weight int    `json:"weight,omitempty"`
	Cap    int    `json:"cap,omitempty"`
}

// Headroom is one headroom entry of a [Policy].
type Headroom struct {
	Slots  int      `json:"slots"`
	Pool   string   `json:"pool,omitempty"`
	Labels []string `json:"labels,omitempty"`
	CPUs   int64    `json:"cpus,omitempty"`
	Mem    int64    `json:"mem,omitempty"`
	Disk   int64    `json:"disk,omitempty"`
}

// PolicyOf is p in trace terms; name gives tenant names (nil: none).
func PolicyOf(p sched.Policy, name func(sched.TenantID) string) *Policy {
	out := &Policy{BusySecs: p.BusySecs, ProbeLimit: p.ProbeLimit, BackoffInitialSecs: p.BackoffInitialSecs,
		BackoffMaxSecs: p.BackoffMaxSecs, ProductionProbeBurst: p.ProductionProbeBurst, LeaseSecs: p.LeaseSecs,
		ClaimRenewals: p.ClaimRenewals, PackAboveUtilization: p.PackAboveUtilization, DrainsPerPool: p.DrainsPerPool,
		WideFraction: p.WideFraction, DrainMaxHoldSecs: int(p.DrainMaxHold / time.Second),
		FairDrainMaxWaitSecs: int(p.FairDrainMaxWait / time.Second)}
	for id, t := range p.Tenants {
		tn := Tenant{ID: uint64(id), Weight: t.Weight, Cap: t.Cap}
		if name != nil {
			tn.Name = name(id)
		}
		out.Tenants = append(out.Tenants, tn)
	}
	slices.SortFunc(out.Tenants, func(a, b Tenant) int { return cmp.Compare(a.ID, b.ID) })
	for id, on := range p.ProductionRunners {
		if on {
			out.Production = append(out.Production, uint64(id))
		}
	}
	slices.Sort(out.Production)
	for _, h := range p.Headroom {
		out.Headroom = append(out.Headroom, Headroom{Slots: h.Slots, Pool: h.Placement.Pool, Labels: h.Placement.Labels,
			CPUs: h.Placement.Envelope.CPUs, Mem: h.Placement.Envelope.MemBytes, Disk: h.Placement.Envelope.DiskBytes})
	}
	return out
}

// Sched is p for the core: its tenants, production runners, headroom and
// knobs; the limits a trace does not carry keep the core's defaults.
func (p *Policy) Sched() sched.Policy {
	out := sched.Policy{Tenants: map[sched.TenantID]sched.TenantPolicy{}, ProductionRunners: map[sched.RunnerID]bool{},
		BusySecs: p.BusySecs, ProbeLimit: p.ProbeLimit, BackoffInitialSecs: p.BackoffInitialSecs,
		BackoffMaxSecs: p.BackoffMaxSecs, ProductionProbeBurst: p.ProductionProbeBurst, LeaseSecs: p.LeaseSecs,
		ClaimRenewals: p.ClaimRenewals, PackAboveUtilization: p.PackAboveUtilization, DrainsPerPool: p.DrainsPerPool,
		WideFraction: p.WideFraction, DrainMaxHold: time.Duration(p.DrainMaxHoldSecs) * time.Second,
		FairDrainMaxWait: time.Duration(p.FairDrainMaxWaitSecs) * time.Second}
	for _, t := range p.Tenants {
		out.Tenants[sched.TenantID(t.ID)] = sched.TenantPolicy{Weight: t.Weight, Cap: t.Cap}
	}
	for _, r := range p.Production {
		out.ProductionRunners[sched.RunnerID(r)] = true
	}
	for _, h := range p.Headroom {
		out.Headroom = append(out.Headroom, sched.HeadroomEntry{Slots: h.Slots, Placement: sched.Placement{Pool: h.Pool,
			Labels: h.Labels, Envelope: sched.Resources{CPUs: h.CPUs, MemBytes: h.Mem, DiskBytes: h.Disk}}})
	}
	return out
}

// TenantByName returns the tenant named name, if any.
func (p *Policy) TenantByName(name string) (Tenant, bool) {
	for _, t := range p.Tenants {
		if t.Name == name {
			return t, true
		}
	}
	return Tenant{}, false
}

// ErrTrace is wrapped by every error a [Reader] returns for malformed input.
var ErrTrace = errors.New("wtrace: bad trace")

// Limits of the decoder: a line longer than MaxLine is an error, and so is
// a policy with more than MaxTenants tenants or headroom entries.
const (
	MaxLine    = 1 << 20
	MaxTenants = 4096
)

// Reader decodes a trace: the header, then records one at a time.
type Reader struct {
	sc     *bufio.Scanner
	Header Header
	line   int
}

// NewReader reads and checks the header of a trace from r. A version
// other than [Version] is an error.
func NewReader(r io.Reader) (*Reader, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLine)
	rd := &Reader{sc: sc}
	if !sc.Scan() {
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("%w: header: %v", ErrTrace, err)
		}
		return nil, fmt.Errorf("%w: empty", ErrTrace)
	}
	rd.line = 1
	if err := json.Unmarshal(sc.Bytes(), &rd.Header); err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrTrace, err)
	}
	if rd.Header.Version != Version {
		return nil, fmt.Errorf("%w: version %d, this reader knows %d", ErrTrace, rd.Header.Version, Version)
	}
	return rd, nil
}

// Next returns the next record, or io.EOF after the last. A final line
// cut short (a trace read while the hub appends to it) ends the trace
// without an error; any other malformed line is an error naming it.
func (rd *Reader) Next() (Record, error) {
	for rd.sc.Scan() {
		rd.line++
		b := rd.sc.Bytes()
		if len(b) == 0 {
			continue
		}
		var rec Record
		if err := json.Unmarshal(b, &rec); err != nil {
			if !rd.sc.Scan() && rd.sc.Err() == nil {
				return Record{}, io.EOF // a torn last line
			}
			return Record{}, fmt.Errorf("%w: line %d: %v", ErrTrace, rd.line, err)
		}
		if err := rec.check(); err != nil {
			return Record{}, fmt.Errorf("%w: line %d: %v", ErrTrace, rd.line, err)
		}
		return rec, nil
	}
	if err := rd.sc.Err(); err != nil {
		return Record{}, fmt.Errorf("%w: line %d: %v", ErrTrace, rd.line+1, err)
	}
	return Record{}, io.EOF
}

// check refuses values a replay could not use.
func (r *Record) check() error {
	if r.T < 0 || r.T > 1<<53 {
		return fmt.Errorf("time %d out of range", r.T)
	}
	if r.CPUs < 0 || r.Mem < 0 || r.Disk < 0 || r.Wall < 0 || r.Conc < 0 || r.N < 0 || r.Queued < 0 || r.Pending < 0 {
		return errors.New("negative amount")
	}
	if r.Wall > int64(1000*time.Hour/time.Millisecond) || r.Queued > int64(1000*time.Hour/time.Millisecond) {
		return errors.New("wall or queue time over 1000h")
	}
	if p := r.Policy; p != nil {
		if len(p.Tenants) > MaxTenants || len(p.Headroom) > MaxTenants || len(p.Production) > MaxTenants*64 {
			return errors.New("policy too large")
		}
		for _, t := range p.Tenants {
			if t.Weight < 0 || t.Cap < 0 {
				return errors.New("negative weight or cap")
			}
		}
	}
	return nil
}

// ReadAll decodes a whole trace.
func ReadAll(r io.Reader) (Header, []Record, error) {
	rd, err := NewReader(r)
	if err != nil {
		return Header{}, nil, err
	}
	var out []Record
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			return rd.Header, out, nil
		}
		if err != nil {
			return rd.Header, out, err
		}
		out = append(out, rec)
	}
}

// Writer encodes a trace to an io.Writer: the header first, then records.
type Writer struct {
	w   *bufio.Writer
	cw  *countWriter
	enc *json.Encoder
}

// NewWriter writes h (its version set to [Version]) to w.
func NewWriter(w io.Writer, h Header) (*Writer, error) {
	h.Version = Version
	cw := &countWriter{w: w}
	bw := bufio.NewWriterSize(cw, 32<<10)
	tw := &Writer{w: bw, cw: cw, enc: json.NewEncoder(bw)}
	tw.enc.SetEscapeHTML(false)
	if err := tw.enc.Encode(h); err != nil {
		return nil, err
	}
	return tw, nil
}

// Write encodes one record.
func (tw *Writer) Write(r *Record) error { return tw.enc.Encode(r) }

// Size is the bytes written so far, buffered ones included.
func (tw *Writer) Size() int64 { return tw.cw.n + int64(tw.w.Buffered()) }

// Flush writes buffered records to the underlying writer.
func (tw *Writer) Flush() error { return tw.w.Flush() }

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}
