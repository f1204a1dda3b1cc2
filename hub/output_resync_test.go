package hub

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/vk-ci/vk/hub/output"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

// failFirstAppend is an output store whose first Append fails (as one
// does while PostgreSQL restarts) without storing anything.
type failFirstAppend struct {
	output.Store
	failed atomic.Bool
}

func (f *failFirstAppend) Append(ctx context.Context, job string, offset int64, data []byte) (int64, error) {
	if f.failed.CompareAndSwap(false, true) {
		return 0, errors.New("injected: the output store is unreachable")
	}
	return f.Store.Append(ctx, job, offset, data)
}

// An output chunk the hub fails to store is not acked, and the hub ends
// the node's session: the node resends output only from the hub's ack on
// a new session (after its held), so a chunk dropped with the session
// left up would never come again and the job would wait for its output
// for ever (found by the HA soak). On the node's new session the hub acks
// the stored offset (0), the node resends, and the job's output is whole
// and complete.
//
// spec: NODE-11, NODE-12, NSESS-08, NSESS-24
func TestOutputNotStoredIsResent(t *testing.T) {
	fail := &failFirstAppend{}
	r := startStoreFailRun(t, func(o output.Store) output.Store { fail.Store = o; return fail }, 77)
	h, nd, v := r.h, r.nd, r.job
	nd.node(dispatch.Output{Job: v.ID, Offset: 0, Data: []byte("hello ")})
	if e := nextOf[dispatch.ErrorFrame](t, nd); e.Code != dispatch.ErrorOther {
		t.Fatalf("session ended with %+v, want code other", e)
	}
	nd.c.CloseNow() // as the node does after an error frame

	nd = r.session(t, false, dispatch.Held{Jobs: []dispatch.HeldJob{{Job: v.ID}}})
	if ack := nextOf[dispatch.OutputAck](t, nd); ack.Job != v.ID || ack.Offset != 0 {
		t.Fatalf("ack after the new session's held = %+v, want %s at 0", ack, v.ID)
	}
	nd.node(dispatch.Output{Job: v.ID, Offset: 0, Data: []byte("hello ")})
	nd.node(dispatch.Output{Job: v.ID, Offset: 6, Data: []byte("world\n")})
	for _, want := range []int64{6, 12} {
		if ack := nextOf[dispatch.OutputAck](t, nd); ack.Offset != want {
			t.Fatalf("ack = %+v, want offset %d", ack, want)
		}
	}
	exit := 0
	nd.node(dispatch.JobUpdate{Job: v.ID, State: dispatch.JobFinished})
	nd.node(dispatch.Result{Job: v.ID, Result: client.JobResult{ExitCode: &exit, OutputLen: 12}})
	if rec := nextOf[dispatch.Recorded](t, nd); rec.Job != v.ID {
		t.Fatalf("recorded = %+v", rec)
	}
	code, body, hdr := h.call("GET", "/v1/jobs/"+v.ID+"/output?offset=0", nil)
	if code != http.StatusOK || string(body) != "hello world\n" || hdr.Get(client.HeaderOutputComplete) != "true" {
		t.Fatalf("output = %d %q complete=%s, want the whole output, complete", code, body, hdr.Get(client.HeaderOutputComplete))
	}
}
