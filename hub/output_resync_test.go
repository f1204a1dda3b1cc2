package hub

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/vk-ci/vk/hub/output"
	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
	"github.com/vk-ci/vk/reqsign"
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
	h := newHarness(t)
	fail := &failFirstAppend{}
	h.wrapOutput = func(o output.Store) output.Store { fail.Store = o; return fail }
	h.restart()
	key, err := reqsign.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	nodeSession := func(enrol bool, held dispatch.Held) *wsPeer {
		nd := dialPeer(t, h, "/v1/node/session", "n9", key, store.KindNode, enrol)
		nd.node(dispatch.Hello{Versions: dispatch.NodeVersions, Node: "n9"})
		if w, ok := nd.nodeRead().(*dispatch.Welcome); !ok || w.Resumed {
			t.Fatalf("node welcome = %#v, want a new session", w)
		}
		nd.node(haReport)
		nd.node(held)
		return nd
	}
	nd := nodeSession(true, dispatch.Held{})
	h.relayUp(1)
	tk := h.reserve()
	off := nextOf[dispatch.Offer](t, nd)
	nd.node(dispatch.OfferReply{Reservation: off.Reservation, Reply: dispatch.ReplyAccepted, LeaseSecs: 90})
	var g client.ReservationGrant
	h.want(http.StatusCreated, &g, "GET", "/v1/reservations/tickets/"+tk+"?wait=30", nil)
	h.want(http.StatusNoContent, nil, "POST", "/v1/reservations/"+g.Admission+"/claim", nil)
	v := h.submitOn(g, 77)
	if st := nextOf[dispatch.Start](t, nd); st.Job != v.ID {
		t.Fatalf("start for %s, want %s", st.Job, v.ID)
	}
	nd.node(dispatch.JobUpdate{Job: v.ID, State: dispatch.JobAccepted})
	nd.node(dispatch.Output{Job: v.ID, Offset: 0, Data: []byte("hello ")})
	if e := nextOf[dispatch.ErrorFrame](t, nd); e.Code != dispatch.ErrorOther {
		t.Fatalf("session ended with %+v, want code other", e)
	}
	nd.c.CloseNow() // as the node does after an error frame

	nd = nodeSession(false, dispatch.Held{Jobs: []dispatch.HeldJob{{Job: v.ID}}})
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
