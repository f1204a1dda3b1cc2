package hub

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

// slowJobWrites holds every job record write while its gate is closed, as
// a slow database commit does.
type slowJobWrites struct {
	store.Store
	mu   sync.Mutex
	gate chan struct{} // nil: writes go through
}

func (s *slowJobWrites) hold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gate = make(chan struct{})
}

func (s *slowJobWrites) let() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gate != nil {
		close(s.gate)
		s.gate = nil
	}
}

func (s *slowJobWrites) SaveJob(ctx context.Context, j store.Job) error {
	s.mu.Lock()
	g := s.gate
	s.mu.Unlock()
	if g != nil {
		<-g
	}
	return s.Store.SaveJob(ctx, j)
}

// heldReq reports whether the driver still holds a job (not settled).
type heldReq struct {
	id   string
	held bool
}

func (r *heldReq) run(d *Driver) { r.held = d.job(r.id) != nil }

// A settle drops the job from the driver's memory at once, while its
// finished record's write (queued before the settle's) may not be durable
// yet. A view read in between must not come from the store's older record
// (found by the HA soak's history check: revision 9 finished, then 8
// running): until the settled record is durable the view is the one in
// memory, final; after it, the store's, the same.
//
// spec: API-36, API-41
func TestSettlingViewNeverGoesBack(t *testing.T) {
	slow := &slowJobWrites{}
	h := newHarness(t)
	h.wrapStore = func(s store.Store) store.Store { slow.Store = s; return slow }
	h.restart()
	h.relayUp(1)
	h.nodeUp(dispatch.Held{})
	g := h.claimed()
	v := h.submitOn(g, 1001)
	expectFrame[dispatch.Start](h)
	h.nodeSay(&dispatch.JobUpdate{Job: v.ID, State: dispatch.JobAccepted})
	var running client.JobView
	h.want(http.StatusOK, &running, "GET", "/v1/jobs/"+v.ID+"?after="+strconv.FormatUint(v.Revision, 10)+"&wait=30", nil)

	exit := 0
	h.nodeSay(&dispatch.JobUpdate{Job: v.ID, State: dispatch.JobFinished})
	h.nodeSay(&dispatch.Result{Job: v.ID, Result: client.JobResult{ExitCode: &exit}})
	var fin client.JobView
	h.want(http.StatusOK, &fin, "GET", "/v1/jobs/"+v.ID+"?after="+strconv.FormatUint(running.Revision, 10)+"&wait=30", nil)
	if fin.State != client.JobFinished || fin.Revision <= running.Revision {
		t.Fatalf("after the result: %+v, want finished above revision %d", fin, running.Revision)
	}
	// A view is answered once its revision is durable (TestViewOnlyOnceDurable),
	// so the finished record is; the settle's write is the one held.
	slow.hold()
	defer slow.let()
	settled := make(chan int, 1)
	go func() {
		code, _, _ := h.call("POST", "/v1/jobs/"+v.ID+"/settle", nil)
		settled <- code
	}()
	deadline := time.Now().Add(10 * time.Second)
	for r := (&heldReq{id: v.ID, held: true}); r.held; {
		if time.Now().After(deadline) {
			t.Fatal("the settle never dropped the job from the driver")
		}
		if err := h.srv.Driver().ask(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
	var mid client.JobView
	h.want(http.StatusOK, &mid, "GET", "/v1/jobs/"+v.ID, nil)
	if mid.State != client.JobFinished || mid.Revision != fin.Revision {
		t.Fatalf("view during the settle = revision %d %s, want %d finished (a view never goes back)", mid.Revision, mid.State, fin.Revision)
	}
	select {
	case code := <-settled:
		t.Fatalf("settle answered %d before its record was durable", code)
	default:
	}
	slow.let()
	if code := <-settled; code != http.StatusNoContent {
		t.Fatalf("settle = %d, want 204", code)
	}
	var after client.JobView
	h.want(http.StatusOK, &after, "GET", "/v1/jobs/"+v.ID, nil)
	if after.State != client.JobFinished || after.Revision != fin.Revision {
		t.Fatalf("view after the settle = revision %d %s, want %d finished", after.Revision, after.State, fin.Revision)
	}
}
