package hub

import (
	"cmp"
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/job"
	"github.com/vk-ci/vk/sched"
)

// This file is the one edge between proto/client (the client API's wire
// types) and sched's compact types. Wire IDs:
//
//	admission    "a<n>"            n = sched.AdmissionID (minted by the core)
//	reservation  "r<n>"            n = sched.ReservationID (same counter)
//	ticket       "t<epoch>-<n>"    epoch = random per hub start, n = sched.TicketID
//	job          16 hex digits     random; sched.JobID is a per-start counter
//
// The epoch in ticket IDs makes a ticket from before a restart read as
// unknown (410, API-23) instead of naming a new ticket.

func admissionWire(id sched.AdmissionID) string { return "a" + strconv.FormatUint(uint64(id), 10) }

func reservationWire(id sched.ReservationID) string {
	return "r" + strconv.FormatUint(uint64(id), 10)
}

// parsePrefixed parses "<prefix><decimal>", n > 0.
func parsePrefixed(s, prefix string) (uint64, bool) {
	rest, ok := strings.CutPrefix(s, prefix)
	if !ok || rest == "" || len(rest) > 20 || rest[0] == '0' {
		return 0, false
	}
	n, err := strconv.ParseUint(rest, 10, 64)
	return n, err == nil && n > 0
}

func parseAdmission(s string) (sched.AdmissionID, bool) {
	n, ok := parsePrefixed(s, "a")
	return sched.AdmissionID(n), ok
}

func parseReservation(s string) (sched.ReservationID, bool) {
	n, ok := parsePrefixed(s, "r")
	return sched.ReservationID(n), ok
}

func ticketWire(epoch string, id sched.TicketID) string {
	return "t" + epoch + "-" + strconv.FormatUint(uint64(id), 10)
}

// parseTicket returns the ticket's ID; sameEpoch is false for a well-formed
// ticket of another hub start (unknown: 410).
func parseTicket(s, epoch string) (id sched.TicketID, sameEpoch, ok bool) {
	rest, ok := strings.CutPrefix(s, "t")
	if !ok {
		return 0, false, false
	}
	ep, num, ok := strings.Cut(rest, "-")
	if !ok || ep == "" || len(ep) > 16 || !lowerHex(ep) {
		return 0, false, false
	}
	n, ok := parsePrefixed(num, "")
	if !ok {
		return 0, false, false
	}
	return sched.TicketID(n), ep == epoch, true
}

// validJobID reports whether s has the shape of a hub job ID.
func validJobID(s string) bool { return len(s) == 16 && lowerHex(s) }

// lowerHex reports whether s is only lower-case hex digits.
func lowerHex(s string) bool { return strings.Trim(s, "0123456789abcdef") == "" }

func envelopeToSched(e client.Envelope) sched.Resources {
	return sched.Resources{MemBytes: e.Mem.Bytes(), DiskBytes: e.Disk.Bytes(), CPUs: int64(e.CPUs)}
}

func envelopeFromSched(r sched.Resources) client.Envelope {
	return client.Envelope{Mem: client.Size(r.MemBytes), Disk: client.Size(r.DiskBytes), CPUs: int(r.CPUs)}
}

// placementToSched converts a placement; labels are sorted and
// deduplicated so equal placements compare equal.
func placementToSched(p client.Placement) sched.Placement {
	ls := slices.Clone(p.Labels)
	slices.Sort(ls)
	ls = slices.Compact(ls)
	if len(ls) == 0 {
		ls = nil
	}
	return sched.Placement{Pool: p.Pool, Labels: ls, Envelope: envelopeToSched(p.Envelope)}
}

func placementFromSched(p sched.Placement) client.Placement {
	var ls []string
	if len(p.Labels) > 0 {
		ls = slices.Clone(p.Labels)
	}
	return client.Placement{Pool: p.Pool, Labels: ls, Envelope: envelopeFromSched(p.Envelope)}
}

// samePlacement compares placements as sets of labels (API-31).
func samePlacement(a, b client.Placement) bool {
	x, y := placementToSched(a), placementToSched(b)
	return x.Key() == y.Key()
}

// placementKey is the canonical text kept in store records' Placement
// field: the placement's JSON with sorted labels.
func placementKey(p client.Placement) string {
	b, _ := json.Marshal(placementFromSched(placementToSched(p)))
	return string(b)
}

// parsePlacementKey reverses placementKey; ok false for a record written
// with something else (then the placement is unknown).
func parsePlacementKey(s string) (client.Placement, bool) {
	var p client.Placement
	if err := json.Unmarshal([]byte(s), &p); err != nil {
		return client.Placement{}, false
	}
	return p, true
}

// enumPair is one value of a wire enum W and the core's value S for it.
type enumPair[W, S comparable] struct {
	wire  W
	sched S
}

// enumTable pairs the known values of a wire enum with the core's, one
// row each; each value appears in at most one row per column (the tests
// read it backwards to check every core value has a wire name). What an
// unknown value maps to is not in the table: each converter names it,
// because it means something different per enum (see the callers).
type enumTable[W, S comparable] []enumPair[W, S]

// toSched returns w's core value, or unknown if w has no row.
func (t enumTable[W, S]) toSched(w W, unknown S) S {
	for _, p := range t {
		if p.wire == w {
			return p.sched
		}
	}
	return unknown
}

// outcomes are the outcome kinds a relay may report (PROTO-04).
var outcomes = enumTable[client.Outcome, sched.OutcomeKind]{
	{client.OutcomeJob, sched.OutcomeJob},
	{client.OutcomeEmpty, sched.OutcomeEmpty},
	{client.OutcomeError, sched.OutcomeError},
	{client.OutcomeReleased, sched.OutcomeReleased},
}

// outcomeToSched maps an outcome the hub does not know (a newer relay's,
// or "other") to sched.OutcomeNone, which the core refuses as no outcome
// (VerdictInvalid): a report the hub cannot read is not guessed at.
func outcomeToSched(o client.Outcome) sched.OutcomeKind {
	return outcomes.toSched(o, sched.OutcomeNone)
}

// grantFromSched converts a grant; nodeName maps the core's node ID to the
// node's principal ID.
func grantFromSched(g sched.Grant, nodeName string) client.ReservationGrant {
	return client.ReservationGrant{
		Admission:   admissionWire(g.Admission),
		Reservation: reservationWire(g.Reservation),
		Node:        nodeName,
		Envelope:    envelopeFromSched(g.Envelope),
		LeaseSecs:   g.LeaseSecs,
	}
}

// heartbeatToSched converts a relay heartbeat. runner maps a runner name
// to its ID (ok false: not in the inventory, skipped); admissions that do
// not parse are skipped (they cannot name an admission of this hub).
func heartbeatToSched(relay sched.RelayID, hb client.RelayHeartbeat, runner func(string) (sched.RunnerID, bool)) sched.RelayHeartbeat {
	out := sched.RelayHeartbeat{Relay: relay}
	for _, r := range hb.Runners {
		id, ok := runner(r.Name)
		if !ok {
			continue
		}
		b := sched.RunnerBeat{Runner: id}
		for _, a := range r.RequestAdmissions {
			if aid, ok := parseAdmission(a); ok {
				b.RequestAdmissions = append(b.RequestAdmissions, aid)
			}
		}
		for _, j := range r.JobAdmissions {
			if j.Admission == "" {
				b.UnadmittedJobs++
				continue
			}
			if aid, ok := parseAdmission(j.Admission); ok {
				b.JobAdmissions = append(b.JobAdmissions, aid)
			}
		}
		out.Runners = append(out.Runners, b)
	}
	slices.SortFunc(out.Runners, func(a, b sched.RunnerBeat) int { return cmp.Compare(a.Runner, b.Runner) })
	return out
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func projectKey(id int64) string { return strconv.FormatInt(id, 10) }

// specName reads the job name from a stored (redacted) spec.
func specName(b []byte) string {
	var s job.JobSpec
	if json.Unmarshal(b, &s) != nil || s.GitLabCI == nil {
		return ""
	}
	return s.GitLabCI.Job.Name
}

// builtImages lists the images of a spec (its own and its services') the
// node builds from the checkout, for image affinity (PLACE-14).
func builtImages(s job.JobSpec) []string {
	if s.GitLabCI == nil {
		return nil
	}
	var out []string
	add := func(name string) {
		if strings.HasPrefix(name, "dockerfile:") || strings.HasPrefix(name, "compose:") {
			out = append(out, name)
		}
	}
	if im := s.GitLabCI.Image; im != nil {
		add(im.Name)
	}
	for _, sv := range s.GitLabCI.Services {
		add(sv.Name)
	}
	return out
}
