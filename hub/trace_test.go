package hub

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/vk-ci/vk/hub/wtrace"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

// A job through the real hub leaves its facts in the workload trace —
// demand, grant, GitLab's answer, submission, start, end, the node and
// the runner, what GitLab said about its queue — and nothing of its spec: no token, variable or credential.
// spec: BS-18
func TestTraceRecordsJobWithoutSecrets(t *testing.T) {
	h := newHarness(t)
	h.relayUp(1)
	h.nodeUp(dispatch.Held{})
	g := h.claimed()
	h.want(http.StatusNoContent, nil, "POST", "/v1/reservations/"+g.Admission+"/outcome", client.OutcomeRequest{Admission: g.Admission, Outcome: client.OutcomeJob})
	var v client.JobView
	h.want(http.StatusCreated, &v, "POST", "/v1/jobs", client.JobSubmission{Runner: "r1", Admission: g.Admission, Reservation: g.Reservation,
		RequestID: client.NewRequestID(), Placement: testPlacement, PlaceWithinSecs: 300, Spec: testSpec(1001),
		Queue: &client.GitLabQueue{TimeInQueueSecs: 12.5, Size: 40, Depth: 3}})
	expectFrame[dispatch.Start](h)
	h.nodeSay(&dispatch.JobUpdate{Job: v.ID, State: dispatch.JobAccepted})
	h.nodeSay(&dispatch.JobUpdate{Job: v.ID, State: dispatch.JobFinished})
	exit := 0
	h.nodeSay(&dispatch.Result{Job: v.ID, Result: client.JobResult{ExitCode: &exit, Usage: &client.Usage{WallMS: 1234}}})
	expectFrame[dispatch.Recorded](h)
	h.want(http.StatusNoContent, nil, "POST", "/v1/jobs/"+v.ID+"/settle", nil)
	if err := h.srv.Shutdown(context.Background()); err != nil { // the driver closes the trace
		t.Fatal(err)
	}
	list, err := wtrace.List(wtrace.Config{}.WithDefaults(h.dir).Dir)
	if err != nil || len(list) == 0 {
		t.Fatalf("no trace files: %v", err)
	}
	seen := map[wtrace.Kind]int{}
	for _, f := range list {
		b, err := os.ReadFile(f.Path)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(canary)) {
			t.Fatalf("the trace holds a secret of the spec:\n%s", b)
		}
		_, recs, err := wtrace.ReadAll(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			seen[r.K]++
			if r.K == wtrace.KindEnd && (r.Wall != 1234 || r.Reason != "finished") {
				t.Errorf("end record %+v, want wall 1234 finished", r)
			}
			if r.K == wtrace.KindQueue && (r.Queued != 12500 || r.Pending != 40 || r.Job == 0 || r.Runner == 0) {
				t.Errorf("queue record %+v, want 12.5 s in queue, 40 pending, the job and its runner", r)
			}
			if r.K == wtrace.KindAnswer && !r.OK {
				t.Errorf("answer %+v, want a job", r)
			}
		}
	}
	var missing []string
	for _, k := range []wtrace.Kind{wtrace.KindPolicy, wtrace.KindRunner, wtrace.KindNode, wtrace.KindDemand, wtrace.KindGrant,
		wtrace.KindAsk, wtrace.KindAnswer, wtrace.KindSubmit, wtrace.KindQueue, wtrace.KindStart, wtrace.KindEnd} {
		if seen[k] == 0 {
			missing = append(missing, string(k))
		}
	}
	if len(missing) > 0 {
		t.Fatalf("trace lacks %s (has %v)", strings.Join(missing, ", "), seen)
	}
}
