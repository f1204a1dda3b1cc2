package loop

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/realhub"
	"github.com/vk-ci/vk/proto/client"
)

// forgetfulHub answers the first submission naming an admission 404 "no
// such admission", as a hub leader does that took over and forgot the
// job and its claimed admission before the submission (or its repeat)
// came.
type forgetfulHub struct {
	*realhub.Tap
	refused atomic.Int32
}

func (h *forgetfulHub) SubmitJob(ctx context.Context, sub client.JobSubmission) (client.JobView, error) {
	if sub.Admission != "" && h.refused.CompareAndSwap(0, 1) {
		// as the new leader, the hub holds neither the admission nor its
		// room: release it, or the job submitted again waits behind the
		// room the forgotten admission still holds on the test's node
		if err := h.Tap.Release(ctx, sub.Reservation); err != nil {
			return client.JobView{}, err
		}
		return client.JobView{}, &client.StatusError{Status: http.StatusNotFound,
			Body: client.Error{Code: client.CodeNotFound, Error: "no such admission"}}
	}
	return h.Tap.SubmitJob(ctx, sub)
}

// A submission answered 404 for its admission is submitted again without
// the admission and reservation (the hub holds neither), from the GitLab
// response the relay kept, and the job runs and succeeds instead of
// failing (runner_system_failure, found by the HA soak).
//
// spec: DECISIONS 16
func TestSubmitAgainWhenTheHubForgotTheAdmission(t *testing.T) {
	e := newEnv(t, envOptions{gitlab: gitlabfake.Options{}})
	fh := &forgetfulHub{Tap: e.hub}
	id := e.oneJobSucceeds(e.managerVia(fh, 0, 10))
	if n := fh.refused.Load(); n != 1 {
		t.Fatalf("the hub refused %d submissions, want 1", n)
	}
	if s := e.hub.Sub(id); s.Admission != "" || s.Reservation != "" {
		t.Errorf("the second submission named admission %q and reservation %q, want neither", s.Admission, s.Reservation)
	}
}
