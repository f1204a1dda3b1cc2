// Package schedtest drives a [sched.Core] for tests and the simulator: a
// Harness that records every step, builders for common events, invariant
// checks, and a runner for scripted scenarios (testdata/*.txt) with
// golden transcripts.
package schedtest

import (
	"fmt"
	"strings"
	"time"

	"github.com/vk-ci/vk/sched"
)

// Start is the fixed UTC time every Harness begins at.
var Start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Record is one step as the Harness saw it.
type Record struct {
	At      time.Time
	Event   sched.Event
	Actions []sched.Action
}

// Harness feeds a Core events at a virtual time, records every step, and
// tracks facts about the action history that no single state shows: a
// ticket granted at most once, a job never started while a previous start
// is unresolved. The zero value is not usable; call [New].
type Harness struct {
	Core *sched.Core
	Now  time.Time
	Log  []Record
	// Check, when true, runs [Invariants] after every step and records
	// failures in Failures.
	Check    bool
	Failures []string

	granted  map[sched.TicketID]bool
	starting map[sched.JobID]sched.NodeID // start sent, not refused
}

// New returns a Harness at [Start] around a fresh Core.
func New(p sched.Policy, seed uint64) *Harness {
	return &Harness{
		Core:     sched.New(p, seed),
		Now:      Start,
		granted:  map[sched.TicketID]bool{},
		starting: map[sched.JobID]sched.NodeID{},
	}
}

// Step feeds ev at h.Now and returns (a copy of) the actions.
func (h *Harness) Step(ev sched.Event) []sched.Action {
	if r, ok := ev.(sched.JobStartReplied); ok && !r.Accepted {
		if h.starting[r.Job] == r.Node {
			delete(h.starting, r.Job)
		}
	}
	if r, ok := ev.(sched.NodeReport); ok && r.Held != nil {
		// a held list resolves every start to this node it does not name
		names := map[sched.JobID]bool{}
		for _, j := range r.Held.Jobs {
			names[j] = true
		}
		for j, n := range h.starting {
			if n == r.Node && !names[j] {
				delete(h.starting, j)
			}
		}
	}
	acts := append([]sched.Action(nil), h.Core.Step(h.Now, ev)...)
	placed := map[sched.NodeID]bool{}
	for _, a := range acts {
		switch a := a.(type) {
		case sched.Offer:
			placed[a.Node] = true
		case sched.Grant:
			if h.granted[a.Ticket] {
				h.fail("ticket %d granted twice", a.Ticket)
			}
			h.granted[a.Ticket] = true
		case sched.Start:
			if n, ok := h.starting[a.Job]; ok {
				h.fail("job %d started on node %d while its start on node %d is unresolved", a.Job, a.Node, n)
			}
			h.starting[a.Job] = a.Node
			if a.Reservation == 0 {
				placed[a.Node] = true
			}
		case sched.EndJob:
			delete(h.starting, a.Job)
		}
	}
	h.Log = append(h.Log, Record{At: h.Now, Event: ev, Actions: acts})
	if h.Check {
		h.checkPlaced(placed)
		for _, f := range Invariants(h.Core) {
			h.fail("after %T at +%s: %s", ev, h.Now.Sub(Start), f)
		}
	}
	return acts
}

// Advance moves time forward by d and steps a Tick.
func (h *Harness) Advance(d time.Duration) []sched.Action {
	h.Now = h.Now.Add(d)
	return h.Step(sched.Tick{})
}

func (h *Harness) fail(f string, a ...any) { h.Failures = append(h.Failures, fmt.Sprintf(f, a...)) }

// Transcript renders the whole log, one line per action, each prefixed by
// the step's offset from Start and its event type.
func (h *Harness) Transcript() string {
	var b strings.Builder
	for _, r := range h.Log {
		for _, a := range r.Actions {
			fmt.Fprintf(&b, "+%s %T %s\n", r.At.Sub(Start), r.Event, a)
		}
	}
	return b.String()
}

// Invariants checks the Core's state: its own bookkeeping recounted from
// scratch, and what it noticed while deciding ([sched.Core.CheckInvariants]).
// It returns one line per violation.
func Invariants(c *sched.Core) []string { return c.CheckInvariants() }

// checkPlaced fails when a node that just received an offer or a start is
// over its memory, disk or cap. (A node may be over them otherwise: a lowered
// ceiling never stops running work, PLACE-07.)
func (h *Harness) checkPlaced(nodes map[sched.NodeID]bool) {
	if len(nodes) == 0 {
		return
	}
	for _, n := range h.Core.Nodes() {
		if !nodes[n.ID] {
			continue
		}
		if n.Used.MemBytes > n.Capacity.MemBytes || n.Used.DiskBytes > n.Capacity.DiskBytes {
			h.fail("node %d over memory or disk after a placement: %+v of %+v", n.ID, n.Used, n.Capacity)
		}
		if n.Cap > 0 && n.Placed > n.Cap {
			h.fail("node %d over cap after a placement: %d of %d", n.ID, n.Placed, n.Cap)
		}
	}
}
