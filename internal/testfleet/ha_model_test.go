package testfleet_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// The client API as porcupine checks it: every object the relay (and the
// soak's readers) name is one linearizable register with a small state
// machine, keyed "job:<id>", "tk:<ticket>", "res:<reservation>" or
// "adm:<admission>". An operation is recorded only when the hub answered
// it (an answer that never came, a standby's 503 or a transport error is
// left out: it may or may not have taken effect, and leaving it out only
// removes constraints).

// Operation kinds (apiIn.Op).
const (
	opView    = "view"    // GET job, POST jobs (submit), POST cancel: a job view
	opSettle  = "settle"  // POST settle
	opOutput  = "output"  // GET output (200, or 416 with the length)
	opTicket  = "ticket"  // POST reservations answered 202 with this ticket
	opPoll    = "poll"    // GET ticket
	opCancelT = "cancelt" // DELETE ticket
	opGrant   = "grant"   // a grant naming this reservation or admission
	opClaim   = "claim"   // POST claim (admission)
	opRenew   = "renew"   // POST renew (reservation)
	opRelease = "release" // DELETE reservation
)

// Answers (apiOut.Err).
const (
	ansOK       = ""
	ansGone     = "gone"     // 404, or 410
	ansConflict = "conflict" // 409
)

type apiIn struct {
	Op, Key string
}

type apiOut struct {
	Err      string
	Rank     int    // a view's state: queued 0, running 1, finished 2
	Rev      uint64 // a view's revision
	Len      int64  // an output read's vk-output-length
	Complete bool   // an output read's vk-output-complete
	Data     bool   // an output read returned bytes
	Res      string // a ticket poll's grant ("" while it waits)
}

// Phases of a ticket, reservation or admission (apiState.Phase).
const (
	phNew     = iota // never seen
	phWaiting        // a ticket queued
	phGranted        // granted (ticket, reservation, admission)
	phClaimed        // an admission claimed
	phEnded          // gone, released, cancelled: for good, IDs are never reused
)

// apiState is one object's state; comparable, as porcupine needs.
type apiState struct {
	// Jobs.
	Gone    bool   // forgotten (404) before it ran, for good
	Rank    int    // -1 before any view
	Rev     uint64 // newest revision seen
	Settled bool   // a settle was answered 204
	OutLen  int64  // longest output length read
	OutDone bool   // output read complete at OutLen
	// Tickets, reservations, admissions.
	Phase int
	Res   string // the reservation a ticket was granted
}

var apiModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range h {
			k := op.Input.(apiIn).Key
			if by[k] == nil {
				keys = append(keys, k)
			}
			by[k] = append(by[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() any { return apiState{Rank: -1} },
	Step: func(state, input, output any) (bool, any) {
		s, in, o := state.(apiState), input.(apiIn), output.(apiOut)
		if strings.HasPrefix(in.Key, "job:") {
			return stepJob(s, in.Op, o)
		}
		return stepGrant(s, in.Op, o)
	},
	DescribeOperation: func(in, out any) string {
		i, o := in.(apiIn), out.(apiOut)
		return fmt.Sprintf("%s %s -> %+v", i.Op, i.Key, o)
	},
}

// stepJob is a job's register: its view moves only forward (a revision
// never goes back, one revision is one state, the state never goes
// back); it is forgotten only before it ran, and for good; a settle is
// accepted only once it finished (409 before), and its output is gone
// after; the output's length never shrinks and is fixed once read
// complete.
func stepJob(s apiState, op string, o apiOut) (bool, apiState) {
	if o.Err == ansGone {
		switch {
		case s.Gone:
			return true, s
		case op == opOutput && s.Settled:
			return true, s // dropped at settle
		case s.Rank > 0:
			return false, s // it ran: its record stays
		}
		s.Gone = true
		return true, s
	}
	if s.Gone {
		return false, s
	}
	switch op {
	case opView:
		switch {
		case o.Rev < s.Rev, o.Rank < s.Rank, o.Rev == s.Rev && o.Rank != s.Rank, s.Settled && o.Rank != 2:
			return false, s
		}
		s.Rank, s.Rev = o.Rank, o.Rev
	case opSettle:
		if o.Err == ansConflict {
			return !s.Settled && s.Rank < 2, s
		}
		if s.Rank >= 0 && s.Rank < 2 {
			return false, s
		}
		s.Rank, s.Settled = 2, true
	case opOutput:
		switch {
		case s.Settled && o.Data, o.Len < s.OutLen, s.OutDone && o.Len != s.OutLen:
			return false, s
		}
		s.OutLen, s.OutDone = o.Len, s.OutDone || o.Complete
	}
	return true, s
}

// stepGrant is a ticket's, reservation's or admission's register: a
// ticket waits until granted one reservation, which it keeps; a
// reservation or admission is granted, an admission claimed, and once
// either has ended (gone, released, cancelled) it never comes back: an
// ID is never handed out again.
func stepGrant(s apiState, op string, o apiOut) (bool, apiState) {
	if o.Err == ansGone {
		s.Phase = phEnded
		return true, s
	}
	switch op {
	case opTicket:
		if s.Phase != phNew && s.Phase != phWaiting {
			return false, s
		}
		s.Phase = phWaiting
	case opPoll:
		switch {
		case o.Res == "" && s.Phase != phNew && s.Phase != phWaiting:
			return false, s
		case o.Res == "":
			s.Phase = phWaiting
		case s.Phase == phGranted && s.Res != o.Res, s.Phase == phEnded:
			return false, s
		default:
			s.Phase, s.Res = phGranted, o.Res
		}
	case opCancelT:
		if o.Err == ansConflict {
			return s.Phase != phEnded, s
		}
		s.Phase = phEnded
	case opGrant:
		if s.Phase == phEnded {
			return false, s
		}
		s.Phase = max(s.Phase, phGranted)
	case opClaim, opRenew:
		if s.Phase == phEnded {
			return false, s
		}
		if op == opClaim {
			s.Phase = phClaimed
		}
	case opRelease:
		s.Phase = phEnded
	}
	return true, s
}

// The model accepts histories a correct hub can give, concurrent
// operations in either order among them, and refuses each kind of wrong
// history a failover could cause: a view or output going back, a
// forgotten job coming back or forgotten after it ran, a settle before
// the job finished or output after it, a ticket granted two
// reservations or waiting again after its grant, an ended reservation
// or admission granted, claimed or renewed again.
//
// spec: BS-12, BS-16
func TestAPIModel(t *testing.T) {
	type op struct {
		c         int
		call, ret int64
		op, key   string
		out       apiOut
	}
	q1, r2, f3 := apiOut{Rank: 0, Rev: 1}, apiOut{Rank: 1, Rev: 2}, apiOut{Rank: 2, Rev: 3}
	gone, conflict := apiOut{Err: ansGone}, apiOut{Err: ansConflict}
	seq := func(ops ...op) []op {
		for i := range ops {
			if ops[i].call == 0 && ops[i].ret == 0 {
				ops[i].call, ops[i].ret = int64(2*i), int64(2*i+1)
			}
		}
		return ops
	}
	j := "job:1"
	v := func(o apiOut) op { return op{op: opView, key: j, out: o} }
	on := func(kind, key string, o apiOut) op { return op{op: kind, key: key, out: o} }
	for _, tc := range []struct {
		name string
		ops  []op
		want porcupine.CheckResult
	}{
		{"job forward, settled", seq(v(q1), v(r2), on(opOutput, j, apiOut{Len: 10, Data: true}), v(f3),
			on(opOutput, j, apiOut{Len: 12, Complete: true, Data: true}), on(opSettle, j, apiOut{}), on(opOutput, j, gone)), porcupine.Ok},
		{"concurrent reads overlap", []op{{0, 0, 10, opView, j, r2}, {1, 1, 2, opView, j, q1}}, porcupine.Ok},
		{"forgotten while queued", seq(v(q1), v(gone), on(opSettle, j, gone)), porcupine.Ok},
		{"settle 409 then 204", seq(v(r2), on(opSettle, j, conflict), v(f3), on(opSettle, j, apiOut{})), porcupine.Ok},
		{"revision back", seq(v(r2), v(apiOut{Rank: 1, Rev: 1})), porcupine.Illegal},
		{"state back", seq(v(r2), v(apiOut{Rank: 0, Rev: 4})), porcupine.Illegal},
		{"one revision two states", seq(v(r2), v(apiOut{Rank: 2, Rev: 2})), porcupine.Illegal},
		{"forgotten comes back", seq(v(gone), v(q1)), porcupine.Illegal},
		{"forgotten after it ran", seq(v(r2), v(gone)), porcupine.Illegal},
		{"settled before it finished", seq(v(r2), on(opSettle, j, apiOut{})), porcupine.Illegal},
		{"409 after it finished", seq(v(f3), on(opSettle, j, conflict)), porcupine.Illegal},
		{"output after settle", seq(v(f3), on(opSettle, j, apiOut{}), on(opOutput, j, apiOut{Len: 5, Data: true})), porcupine.Illegal},
		{"output shrinks", seq(on(opOutput, j, apiOut{Len: 10, Data: true}), on(opOutput, j, apiOut{Len: 8, Data: true})), porcupine.Illegal},
		{"complete output grows", seq(on(opOutput, j, apiOut{Len: 10, Complete: true}), on(opOutput, j, apiOut{Len: 11})), porcupine.Illegal},

		{"ticket waits, granted, polled again", seq(on(opTicket, "tk:a", apiOut{}), on(opPoll, "tk:a", apiOut{}),
			on(opPoll, "tk:a", apiOut{Res: "r1"}), on(opPoll, "tk:a", apiOut{Res: "r1"}), on(opPoll, "tk:a", gone)), porcupine.Ok},
		{"ticket lost at a failover", seq(on(opTicket, "tk:a", apiOut{}), on(opPoll, "tk:a", gone), on(opCancelT, "tk:a", apiOut{})), porcupine.Ok},
		{"ticket granted two reservations", seq(on(opPoll, "tk:a", apiOut{Res: "r1"}), on(opPoll, "tk:a", apiOut{Res: "r2"})), porcupine.Illegal},
		{"ticket waits after its grant", seq(on(opPoll, "tk:a", apiOut{Res: "r1"}), on(opPoll, "tk:a", apiOut{})), porcupine.Illegal},
		{"ticket back after it ended", seq(on(opTicket, "tk:a", apiOut{}), on(opCancelT, "tk:a", apiOut{}), on(opPoll, "tk:a", apiOut{})), porcupine.Illegal},
		{"reservation granted, renewed, released", seq(on(opGrant, "res:r", apiOut{}), on(opRenew, "res:r", apiOut{}),
			on(opRelease, "res:r", apiOut{}), on(opRenew, "res:r", gone), on(opRelease, "res:r", apiOut{})), porcupine.Ok},
		{"admission claimed twice", seq(on(opGrant, "adm:a", apiOut{}), on(opClaim, "adm:a", apiOut{}), on(opClaim, "adm:a", apiOut{})), porcupine.Ok},
		{"renewed after release", seq(on(opGrant, "res:r", apiOut{}), on(opRelease, "res:r", apiOut{}), on(opRenew, "res:r", apiOut{})), porcupine.Illegal},
		{"reservation ID handed out again", seq(on(opGrant, "res:r", apiOut{}), on(opRenew, "res:r", gone), on(opGrant, "res:r", apiOut{})), porcupine.Illegal},
		{"claimed after it was gone", seq(on(opGrant, "adm:a", apiOut{}), on(opClaim, "adm:a", gone), on(opClaim, "adm:a", apiOut{})), porcupine.Illegal},
	} {
		var h []porcupine.Operation
		for _, o := range tc.ops {
			h = append(h, porcupine.Operation{ClientId: o.c, Input: apiIn{Op: o.op, Key: o.key}, Call: o.call, Return: o.ret, Output: o.out})
		}
		if got := porcupine.CheckOperationsTimeout(apiModel, h, 10*time.Second); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// A submission whose first try's answer was lost (its instance killed
// after making the job) and whose retry read the replayed first answer
// (API-43: the job as it was made, starting, revision 2) after a reader
// had seen the job running: the recorder files the retry's answer as one
// operation from the first try on, which the model accepts, where filed
// from the retry alone it reads as the job going back. Run 21 of the
// fault campaign (7 Dec 2026) was refused for exactly this.
func TestReplayedSubmissionIsOneOperation(t *testing.T) {
	made, running := apiOut{Rank: 0, Rev: 2}, apiOut{Rank: 1, Rev: 6}
	for _, tc := range []struct {
		name    string
		byFirst bool // the retry's call time is the first try's
		want    porcupine.CheckResult
	}{
		{"from the first try", true, porcupine.Ok},
		{"from the retry alone", false, porcupine.Illegal},
	} {
		r := newHistoryRecorder()
		first := r.submitted("req-1", 10) // the first try; its answer lost
		if first != 10 {
			t.Fatalf("first try filed at %d, want 10", first)
		}
		reader := porcupine.Operation{ClientId: 1, Input: apiIn{Op: opView, Key: "job:j"}, Call: 20, Return: 21, Output: running}
		retryCall := r.submitted("req-1", 30)
		if !tc.byFirst {
			retryCall = 30
		} else if retryCall != 10 {
			t.Fatalf("%s: retry filed at %d, want the first try's 10", tc.name, retryCall)
		}
		if other := r.submitted("req-2", 40); other != 40 {
			t.Fatalf("another submission filed at %d, want its own 40", other)
		}
		retry := porcupine.Operation{ClientId: 0, Input: apiIn{Op: opView, Key: "job:j"}, Call: retryCall, Return: 31, Output: made}
		if got := porcupine.CheckOperationsTimeout(apiModel, []porcupine.Operation{reader, retry}, 10*time.Second); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}
