package testfleet_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/vk-ci/vk/hubclient"
	"github.com/vk-ci/vk/internal/testfleet"
	"github.com/vk-ci/vk/proto/client"
)

// jobSeen is what one client-API read of a hub job's view returned.
type jobSeen struct {
	gone bool // 404: the hub does not know the job (forgotten after a takeover)
	rank int  // queued 0, running 1, finished 2; -1 before any read
	rev  uint64
}

func rankOf(s client.JobState) int {
	switch s {
	case client.JobRunning:
		return 1
	case client.JobFinished:
		return 2
	}
	return 0
}

// jobViewModel is the client API's job view as one linearizable object
// per job (GET /v1/jobs/{id}): its revision never goes back, one
// revision is one state, the state moves only forward (queued, running,
// finished), and a job is forgotten (404) only before it ran, for good.
// A deposed leader answering from a stale picture, or a new leader
// restoring an older revision than one a client saw, breaks it.
var jobViewModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range h {
			id := op.Input.(string)
			if by[id] == nil {
				keys = append(keys, id)
			}
			by[id] = append(by[id], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() any { return jobSeen{rank: -1} },
	Step: func(state, _, output any) (bool, any) {
		s, o := state.(jobSeen), output.(jobSeen)
		switch {
		case s.gone:
			return o.gone, s
		case o.gone:
			return s.rank <= 0, o
		case o.rev < s.rev, o.rank < s.rank, o.rev == s.rev && o.rank != s.rank:
			return false, s
		}
		return true, o
	},
	DescribeOperation: func(in, out any) string {
		o := out.(jobSeen)
		if o.gone {
			return fmt.Sprintf("get %s -> 404", in)
		}
		return fmt.Sprintf("get %s -> rank %d rev %d", in, o.rank, o.rev)
	},
}

// historyRecorder reads every job's view through the relay's own
// enrolment (its hub link follows the leader) from a few concurrent
// readers, and keeps each answered read as an operation.
type historyRecorder struct {
	hc  *hubclient.Client
	f   *testfleet.Fleet
	t0  time.Time
	mu  sync.Mutex
	ops []porcupine.Operation // guarded by mu
}

func newHistoryRecorder(t *testing.T, f *testfleet.Fleet, tn *testfleet.Tenant) *historyRecorder {
	e, err := hubclient.LoadEnrolment(tn.Relay.Dir)
	if err != nil {
		t.Fatal(err)
	}
	hc, err := hubclient.New(hubclient.Config{HubURL: e.HubURL, CAPEM: e.CAPEM, Key: e.Key, Principal: e.ID, Timeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return &historyRecorder{hc: hc, f: f, t0: time.Now()}
}

// jobIDs lists the hub's job IDs from whichever instance's store answers
// (one database).
func (r *historyRecorder) jobIDs(ctx context.Context) []string {
	for _, h := range []*testfleet.Hub{r.f.Hub(), r.f.Standby()} {
		js, err := h.Jobs(ctx)
		if err != nil {
			continue
		}
		ids := make([]string, 0, len(js))
		for _, j := range js {
			ids = append(ids, j.ID)
		}
		return ids
	}
	return nil
}

// run reads until ctx ends, with readers concurrent readers.
func (r *historyRecorder) run(ctx context.Context, readers int) {
	var wg sync.WaitGroup
	for c := range readers {
		wg.Go(func() {
			for ctx.Err() == nil {
				for _, id := range r.jobIDs(ctx) {
					r.read(ctx, c, id)
				}
				pause(50 * time.Millisecond)
			}
		})
	}
	wg.Wait()
}

func (r *historyRecorder) read(ctx context.Context, clientID int, id string) {
	call := time.Since(r.t0).Nanoseconds()
	v, err := r.hc.GetJob(ctx, id, 0, 0)
	ret := time.Since(r.t0).Nanoseconds()
	var out jobSeen
	var se *client.StatusError
	switch {
	case err == nil:
		out = jobSeen{rank: rankOf(v.State), rev: v.Revision}
	case errors.As(err, &se) && se.Status == http.StatusNotFound:
		out = jobSeen{gone: true}
	default:
		return // no answer (a hub down, a standby's 503): the read did nothing
	}
	r.mu.Lock()
	r.ops = append(r.ops, porcupine.Operation{ClientId: clientID, Input: id, Call: call, Output: out, Return: ret})
	r.mu.Unlock()
}

// check runs porcupine over the history; a checker timeout is a failure.
func (r *historyRecorder) check(t *testing.T) {
	r.mu.Lock()
	ops := r.ops
	r.mu.Unlock()
	began := time.Now()
	res := porcupine.CheckOperationsTimeout(jobViewModel, ops, time.Minute)
	t.Logf("client-API history: %d reads checked in %v: %s", len(ops), time.Since(began).Round(time.Millisecond), res)
	switch res {
	case porcupine.Ok:
	case porcupine.Unknown:
		t.Error("the linearizability check timed out: that counts as a failure")
	default:
		t.Error("the client-API history is not linearizable against the job view model")
	}
}

// The model accepts a job's views moving forward, concurrent reads in
// either order and a forgotten queued job, and refuses a revision going
// back, a state going back, and a forgotten job coming back.
func TestJobViewModel(t *testing.T) {
	op := func(c int, call, ret int64, s jobSeen) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: "j", Call: call, Return: ret, Output: s}
	}
	q1, r2, f3 := jobSeen{rank: 0, rev: 1}, jobSeen{rank: 1, rev: 2}, jobSeen{rank: 2, rev: 3}
	for _, tc := range []struct {
		name string
		ops  []porcupine.Operation
		want porcupine.CheckResult
	}{
		{"forward", []porcupine.Operation{op(0, 0, 1, q1), op(0, 2, 3, r2), op(0, 4, 5, f3)}, porcupine.Ok},
		{"concurrent reads overlap", []porcupine.Operation{op(0, 0, 10, r2), op(1, 1, 2, q1)}, porcupine.Ok},
		{"forgotten while queued", []porcupine.Operation{op(0, 0, 1, q1), op(0, 2, 3, jobSeen{gone: true})}, porcupine.Ok},
		{"revision back", []porcupine.Operation{op(0, 0, 1, r2), op(1, 2, 3, jobSeen{rank: 1, rev: 1})}, porcupine.Illegal},
		{"state back", []porcupine.Operation{op(0, 0, 1, r2), op(1, 2, 3, jobSeen{rank: 0, rev: 4})}, porcupine.Illegal},
		{"forgotten comes back", []porcupine.Operation{op(0, 0, 1, jobSeen{gone: true}), op(0, 2, 3, q1)}, porcupine.Illegal},
		{"forgotten after it ran", []porcupine.Operation{op(0, 0, 1, r2), op(0, 2, 3, jobSeen{gone: true})}, porcupine.Illegal},
	} {
		if got := porcupine.CheckOperationsTimeout(jobViewModel, tc.ops, 10*time.Second); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}
