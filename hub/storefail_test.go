package hub

import (
	"crypto/ed25519"
	"net/http"
	"testing"

	"github.com/vk-ci/vk/hub/output"
	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
	"github.com/vk-ci/vk/reqsign"
)

// storeFailRun is the stage the tests of a held arriving after a failed
// store write share: a hub whose output store is wrapped (to fail one
// write, as while PostgreSQL restarts), node n9 on its first session, and
// a job granted, claimed, submitted, started on n9 and accepted by it.
type storeFailRun struct {
	h   *harness
	key ed25519.PrivateKey // n9's
	nd  *wsPeer            // n9's first session
	job client.JobView
}

// startStoreFailRun restarts a new harness with its output store wrapped
// by wrap and runs the job of gitlabJob to accepted on n9.
func startStoreFailRun(t *testing.T, wrap func(output.Store) output.Store, gitlabJob int64) *storeFailRun {
	t.Helper()
	h := newHarness(t)
	h.wrapOutput = wrap
	h.restart()
	key, err := reqsign.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	r := &storeFailRun{h: h, key: key}
	r.nd = r.session(t, true, dispatch.Held{})
	h.relayUp(1)
	tk := h.reserve()
	off := nextOf[dispatch.Offer](t, r.nd)
	r.nd.node(dispatch.OfferReply{Reservation: off.Reservation, Reply: dispatch.ReplyAccepted, LeaseSecs: 90})
	var g client.ReservationGrant
	h.want(http.StatusCreated, &g, "GET", "/v1/reservations/tickets/"+tk+"?wait=30", nil)
	h.want(http.StatusNoContent, nil, "POST", "/v1/reservations/"+g.Admission+"/claim", nil)
	r.job = h.submitOn(g, gitlabJob)
	startAccepted(t, r.nd, r.job.ID)
	return r
}

// session opens a new session of n9 (enrolling its key first when enrol):
// hello, a new session's welcome, then its report and held.
func (r *storeFailRun) session(t *testing.T, enrol bool, held dispatch.Held) *wsPeer {
	t.Helper()
	nd := dialPeer(t, r.h, "/v1/node/session", "n9", r.key, store.KindNode, enrol)
	nd.node(dispatch.Hello{Versions: dispatch.NodeVersions, Node: "n9"})
	if w, ok := nd.nodeRead().(*dispatch.Welcome); !ok || w.Resumed {
		t.Fatalf("node welcome = %#v, want a new session", w)
	}
	nd.node(haReport)
	nd.node(held)
	return nd
}

// startAccepted reads the start of job id on nd and accepts it.
func startAccepted(t *testing.T, nd *wsPeer, id string) {
	t.Helper()
	if st := nextOf[dispatch.Start](t, nd); st.Job != id {
		t.Fatalf("start for %s, want %s", st.Job, id)
	}
	nd.node(dispatch.JobUpdate{Job: id, State: dispatch.JobAccepted})
}

// runToEnd plays nd running job id to a successful end: out as one chunk
// from offset 0, acked whole, then finished and a result of exit 0 with
// out's length.
func runToEnd(t *testing.T, nd *wsPeer, id, out string) {
	t.Helper()
	nd.node(dispatch.Output{Job: id, Offset: 0, Data: []byte(out)})
	if ack := nextOf[dispatch.OutputAck](t, nd); ack.Offset != int64(len(out)) {
		t.Fatalf("ack = %+v, want offset %d", ack, len(out))
	}
	exit := 0
	nd.node(dispatch.JobUpdate{Job: id, State: dispatch.JobFinished})
	nd.node(dispatch.Result{Job: id, Result: client.JobResult{ExitCode: &exit, OutputLen: int64(len(out))}})
}
