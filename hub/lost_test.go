package hub

import (
	"net/http"
	"testing"
	"time"

	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

// a node whose job the hub ended lost comes back
// on a resumed session (no held, NSESS-24) still running it: the job's
// next output is answered with an immediate cancel, before and after the
// relay settled the job.
//
// spec: FAIL-16, FAIL-17
func TestResumedNodeJobEndedLostIsCancelled(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	d := h.srv.Driver()
	h.relayUp(1)
	h.nodeUp(dispatch.Held{})
	v := h.submitOn(h.claimed(), 81)
	expectFrame[dispatch.Start](h)
	h.nodeSay(&dispatch.JobUpdate{Job: v.ID, State: dispatch.JobAccepted})
	if err := d.NodeDisconnected(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	h.advance(time.Duration(h.cfg.Sessions.JobLostAfterSecs+1) * time.Second)
	var got client.JobView
	h.want(http.StatusOK, &got, "GET", "/v1/jobs/"+v.ID, nil)
	if got.Result == nil || got.Result.Failure != client.FailureLost {
		t.Fatalf("job after job_lost_after = %+v, want finished lost", got)
	}
	if err := d.NodeConnected(ctx, "n1", h.node, true); err != nil {
		t.Fatal(err)
	}
	for len(h.node.frames) > 0 {
		<-h.node.frames
	}
	cancelled := func(offset int64) {
		t.Helper()
		h.nodeSay(&dispatch.Output{Job: v.ID, Offset: offset, Data: []byte("x")})
		if c := expectFrame[dispatch.Cancel](h); c.Job != v.ID || c.Mode != client.CancelImmediate {
			t.Fatalf("cancel = %+v, want an immediate cancel of %s", c, v.ID)
		}
		for len(h.node.frames) > 0 {
			<-h.node.frames // the output's ack, while the record is kept
		}
	}
	cancelled(0)
	h.want(http.StatusNoContent, nil, "POST", "/v1/jobs/"+v.ID+"/settle", nil)
	cancelled(1)
}
