package hub

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

// flakyJobSaves fails every save of a finished job record while failing
// is set (as saves do while PostgreSQL restarts) and notes, per job, the
// newest revision the store has made durable.
type flakyJobSaves struct {
	store.Store
	mu      sync.Mutex
	failing bool
	failed  chan struct{} // closed once a save failed
	durable map[string]uint64
}

func (s *flakyJobSaves) SaveJob(ctx context.Context, j store.Job) error {
	s.mu.Lock()
	fail := s.failing && j.State == store.JobFinished
	if fail && s.failed != nil {
		close(s.failed)
		s.failed = nil
	}
	s.mu.Unlock()
	if fail {
		return errors.New("injected: the database is restarting")
	}
	if err := s.Store.SaveJob(ctx, j); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.durable[j.ID] = max(s.durable[j.ID], j.Revision)
	return nil
}

func (s *flakyJobSaves) setFailing(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failing = on
}

func (s *flakyJobSaves) durableRev(id string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.durable[id]
}

// acceptedOver starts a hub over its store wrapped by wrap, with a relay
// and a node, submits a job on a claimed reservation and has the node
// accept it: the job's view then goes running once the store holds it.
func acceptedOver(t *testing.T, wrap func(store.Store) store.Store) (*harness, client.JobView) {
	t.Helper()
	h := newHarness(t)
	h.wrapStore = wrap
	h.restart()
	h.relayUp(1)
	h.nodeUp(dispatch.Held{})
	v := h.submitOn(h.claimed(), 1002)
	expectFrame[dispatch.Start](h)
	h.nodeSay(&dispatch.JobUpdate{Job: v.ID, State: dispatch.JobAccepted})
	return h, v
}

// A job's view is answered only once the store holds its revision. The
// driver moves a job on in memory and writes the record behind it; a
// view answered from memory before that write was durable could show a
// state no later view agrees with: the leader killed, or the write
// failed, the store (and so a new leader, or this hub restarted) still
// has the older revision, and the client sees finished, then running.
// Here the finished record's write fails: views go on showing running,
// the store's, and a long poll past running waits; once the node's held
// has the result written again (and recorded answered), the long poll
// answers finished, a revision the store holds.
//
// spec: API-36, BS-16, DECISIONS 16
func TestViewOnlyOnceDurable(t *testing.T) {
	flaky := &flakyJobSaves{failed: make(chan struct{}), durable: map[string]uint64{}}
	h, v := acceptedOver(t, func(s store.Store) store.Store { flaky.Store = s; return flaky })
	var running client.JobView
	h.want(http.StatusOK, &running, "GET", "/v1/jobs/"+v.ID+"?after="+strconv.FormatUint(v.Revision, 10)+"&wait=30", nil)
	if running.State != client.JobRunning || running.Revision > flaky.durableRev(v.ID) {
		t.Fatalf("view = revision %d %s with revision %d durable, want running, durable", running.Revision, running.State, flaky.durableRev(v.ID))
	}

	failed := flaky.failed
	flaky.setFailing(true)
	exit := 0
	h.nodeSay(&dispatch.JobUpdate{Job: v.ID, State: dispatch.JobFinished})
	h.nodeSay(&dispatch.Result{Job: v.ID, Result: client.JobResult{ExitCode: &exit}})
	select {
	case <-failed:
	case <-time.After(10 * time.Second):
		t.Fatal("the hub never saved the finished record")
	}
	var now client.JobView
	h.want(http.StatusOK, &now, "GET", "/v1/jobs/"+v.ID, nil)
	if now.State != client.JobRunning || now.Revision != running.Revision {
		t.Fatalf("view after the finished record's write failed = revision %d %s, want the store's: %d running",
			now.Revision, now.State, running.Revision)
	}

	base := h.clk.Pending()
	got := make(chan client.JobView, 1)
	go func() {
		var fin client.JobView
		h.want(http.StatusOK, &fin, "GET", "/v1/jobs/"+v.ID+"?after="+strconv.FormatUint(running.Revision, 10)+"&wait=30", nil)
		got <- fin
	}()
	waitPending(t, h, base+1) // the long poll looks again in a second
	select {
	case fin := <-got:
		t.Fatalf("long poll answered revision %d %s while the store holds %d", fin.Revision, fin.State, flaky.durableRev(v.ID))
	default:
	}

	flaky.setFailing(false)
	h.nodeSay(&dispatch.Held{Jobs: []dispatch.HeldJob{{Job: v.ID}}})
	for {
		if m, ok := expectFrame[dispatch.Message](h).(dispatch.Recorded); ok {
			if m.Job != v.ID {
				t.Fatalf("recorded %s, want %s", m.Job, v.ID)
			}
			break
		}
	}
	h.advance(time.Second)
	select {
	case fin := <-got:
		if fin.State != client.JobFinished || fin.Revision <= running.Revision || fin.Revision > flaky.durableRev(v.ID) {
			t.Fatalf("long poll = revision %d %s with %d durable, want finished past %d, durable",
				fin.Revision, fin.State, flaky.durableRev(v.ID), running.Revision)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the long poll never answered once the finished record was durable")
	}
}
