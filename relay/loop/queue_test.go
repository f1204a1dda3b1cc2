package loop

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/realhub"
	"github.com/vk-ci/vk/proto/client"
)

// oldHub is a hub that predates gitlab_queue: it decodes submissions
// strictly into a body without the field, as such a hub's API does.
type oldHub struct {
	*realhub.Tap
	refused atomic.Int32
}

func (h *oldHub) SubmitJob(ctx context.Context, sub client.JobSubmission) (client.JobView, error) {
	b, err := json.Marshal(sub)
	if err != nil {
		return client.JobView{}, err
	}
	type before struct {
		Runner, Admission, RequestID, Reservation string
		Placement                                 client.Placement
		PlaceWithinSecs                           int
		Spec                                      json.RawMessage
	}
	dec := json.NewDecoder(strings.NewReader(strings.NewReplacer(`"request_id"`, `"RequestID"`,
		`"place_within_secs"`, `"PlaceWithinSecs"`).Replace(string(b))))
	dec.DisallowUnknownFields()
	var v before
	if err := dec.Decode(&v); err != nil {
		h.refused.Add(1)
		return client.JobView{}, &client.StatusError{Status: 400, Body: client.Error{Code: client.CodeInvalid,
			Error: "unparseable request body: " + err.Error()}}
	}
	return h.Tap.SubmitJob(ctx, sub)
}

// A hub older than the gitlab_queue field refuses it as unknown; the relay
// submits the job again without it, and the job runs.
func TestSubmitWithoutQueueToAnOldHub(t *testing.T) {
	e := newEnv(t, envOptions{gitlab: gitlabfake.Options{}})
	old := &oldHub{Tap: e.hub}
	id := e.oneJobSucceeds(e.managerVia(old, 0, 10))
	if n := old.refused.Load(); n != 1 {
		t.Errorf("the old hub refused %d submissions, want 1 (the one with gitlab_queue)", n)
	}
	if q := e.hub.Sub(id).Queue; q != nil {
		t.Errorf("the old hub took a submission with gitlab_queue %+v", q)
	}
}
