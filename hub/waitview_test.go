package hub

import (
	"net/http"
	"testing"

	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/proto/client"
)

// A queued job's view says why it waits, where it stands among the
// requests for the same room and that its wait cannot be estimated yet
// (no job ran); the operators' queue gives the same numbers for each
// entry, and the view drops the wait once the job is no longer queued.
//
// spec: ARB-37
func TestQueuedJobSaysWhyWithNumbers(t *testing.T) {
	h := newHarness(t)
	h.relayUp(1)
	var views []client.JobView
	for i := range 3 {
		s := client.JobSubmission{Runner: "r1", RequestID: client.NewRequestID(), Placement: testPlacement, PlaceWithinSecs: 300, Spec: testSpec(int64(40 + i))}
		var v client.JobView
		h.want(http.StatusCreated, &v, "POST", "/v1/jobs", s)
		views = append(views, v)
	}
	var v client.JobView
	h.want(http.StatusOK, &v, "GET", "/v1/jobs/"+views[2].ID, nil)
	w := v.Wait
	if v.State != client.JobQueued || w == nil || w.Reason == "" || w.Class == "" || w.Ahead != 2 || w.Waiting != 3 || w.EstimatedSecs != nil {
		t.Fatalf("third queued job: %+v wait %+v, want a reason, class, 2 ahead of 3, no estimate", v, w)
	}
	q, err := h.srv.Driver().Queue(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, e := range q {
		if e.Kind != admin.WaitJob {
			continue
		}
		seen++
		if e.Competing != 3 || e.Class == "" || e.EstimatedSecs != nil {
			t.Errorf("queue entry %+v, want 3 competing, a class, no estimate", e)
		}
		if e.ID == views[0].ID && e.Ahead != 0 || e.ID == views[2].ID && e.Ahead != 2 {
			t.Errorf("queue entry %s: %d ahead", e.ID, e.Ahead)
		}
	}
	if seen != 3 {
		t.Errorf("queue = %+v, want the three jobs", q)
	}
	var c client.JobView
	h.want(http.StatusAccepted, &c, "POST", "/v1/jobs/"+views[0].ID+"/cancel", client.CancelRequest{Mode: client.CancelGraceful})
	if c.Wait != nil {
		t.Errorf("cancelled job still waits: %+v", c.Wait)
	}
	h.want(http.StatusOK, &v, "GET", "/v1/jobs/"+views[2].ID, nil)
	if v.Wait == nil || v.Wait.Ahead != 1 || v.Wait.Waiting != 2 {
		t.Errorf("after one left: wait %+v, want 1 ahead of 2", v.Wait)
	}
}

// The size label of vk_hub_wait_seconds is bounded: vCPUs rounded up to a
// power of two, everything past 64 one value.
func TestSizeClass(t *testing.T) {
	for _, c := range []struct {
		cpus int
		want string
	}{{0, "1"}, {1, "1"}, {2, "2"}, {3, "4"}, {8, "8"}, {9, "16"}, {64, "64"}, {65, "over64"}, {1000, "over64"}} {
		if got := sizeClass(c.cpus); got != c.want {
			t.Errorf("sizeClass(%d) = %q, want %q", c.cpus, got, c.want)
		}
	}
}
