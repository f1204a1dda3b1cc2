package hub

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/store"
)

// heldRunningSaves holds the first save of a running job record until
// release is closed, and closes entered when that save begins.
type heldRunningSaves struct {
	store.Store
	entered, release chan struct{}
	held             bool
}

func (s *heldRunningSaves) SaveJob(ctx context.Context, j store.Job) error {
	if j.State == "running" && !s.held { // the record writer saves one record at a time
		s.held = true
		close(s.entered)
		select {
		case <-s.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.Store.SaveJob(ctx, j)
}

// The hub logs "job running" once the node accepted the job and its
// running record is durable, the moment from which the relay's view shows
// it running: not while the write is under way, and then once, naming the
// job and the node.
func TestJobRunningLoggedOnceDurable(t *testing.T) {
	held := &heldRunningSaves{entered: make(chan struct{}), release: make(chan struct{})}
	h, v := acceptedOver(t, func(s store.Store) store.Store { held.Store = s; return held })
	select {
	case <-held.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the hub never saved the running record")
	}
	if strings.Contains(h.logs.String(), `"msg":"job running"`) {
		t.Fatalf("job running logged while its record's write is held; logs:\n%s", h.logs.String())
	}
	close(held.release)
	line := `"msg":"job running","component":"hub","job_id":"` + v.ID + `"`
	h.logs.waitFor(t, line, 10*time.Second)
	if n := strings.Count(h.logs.String(), `"msg":"job running"`); n != 1 {
		t.Fatalf("job running logged %d times, want once", n)
	}
	if !strings.Contains(h.logs.String(), line+`,"node_id":`) {
		t.Fatalf("job running does not name the node; logs:\n%s", h.logs.String())
	}
}
