package hub

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

// answerWatch is the hub's real store, looking at it each time a job
// record or a request_id answer was written: a hub that died at that
// moment restarts with what the store then holds. torn lists the moments
// it held a job without its answer (a retry then finds no answer and
// makes a second job) or an answer without its job.
type answerWatch struct {
	store.Store
	mu     sync.Mutex
	writes int      // job and answer writes seen; guarded by mu
	torn   []string // guarded by mu
}

func (s *answerWatch) CreateJob(ctx context.Context, j store.Job) error {
	err := s.Store.CreateJob(ctx, j)
	s.look(ctx, err, j.ID, j.Principal, j.RequestID)
	return err
}

func (s *answerWatch) CreateJobAnswered(ctx context.Context, j store.Job, a store.Answer) error {
	err := s.Store.CreateJobAnswered(ctx, j, a)
	s.look(ctx, err, j.ID, a.Principal, a.RequestID)
	return err
}

func (s *answerWatch) PutAnswer(ctx context.Context, a store.Answer) error {
	err := s.Store.PutAnswer(ctx, a)
	if a.Job != "" {
		s.look(ctx, err, a.Job, a.Principal, a.RequestID)
	}
	return err
}

// look reads whether the store holds the job and its answer after a
// write that succeeded.
func (s *answerWatch) look(ctx context.Context, err error, job, principal, requestID string) {
	if err != nil {
		return
	}
	_, jerr := s.Store.GetJob(ctx, job)
	_, aerr := s.Store.GetAnswer(ctx, principal, requestID, testStart)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	if hasJob, hasAnswer := jerr == nil, aerr == nil; hasJob != hasAnswer {
		s.torn = append(s.torn, fmt.Sprintf("job %s stored %v, its answer %v (%v, %v)", job, hasJob, hasAnswer, jerr, aerr))
	}
}

// A submission's job record and its request_id answer are one write: at
// no moment does the store hold the job without its answer, so a hub
// that dies right after storing the job still replays that job to the
// relay's retry, rather than making a second one (before, the answer was
// a second commit after the job's). The 201 is the stored answer byte
// for byte, so the retry reads exactly what the first try did.
//
// spec: API-42, API-43
func TestSubmitStoresJobWithItsAnswer(t *testing.T) {
	h := newHarness(t)
	watch := &answerWatch{}
	h.wrapStore = func(st store.Store) store.Store { watch.Store = st; return watch }
	h.restart()
	h.relayUp(1)
	h.nodeUp(dispatch.Held{})
	g := h.claimed()
	h.want(http.StatusNoContent, nil, "POST", "/v1/reservations/"+g.Admission+"/outcome", client.OutcomeRequest{Admission: g.Admission, Outcome: client.OutcomeJob})
	s := submission(g, 31)
	code, first, _ := h.call("POST", "/v1/jobs", s)
	if code != http.StatusCreated {
		t.Fatalf("submit: %d %s", code, first)
	}
	expectFrame[dispatch.Start](h)
	watch.mu.Lock()
	writes, torn := watch.writes, watch.torn
	watch.mu.Unlock()
	if writes == 0 {
		t.Fatal("no job or answer write seen: the watch is not the hub's store")
	}
	if len(torn) > 0 {
		t.Fatalf("the store held a job and its answer apart: %v", torn)
	}
	code, again, _ := h.call("POST", "/v1/jobs", s)
	if code != http.StatusCreated || !bytes.Equal(again, first) {
		t.Fatalf("retry answered %d %q, want the first answer %q", code, again, first)
	}
	h.noFrame()
}
