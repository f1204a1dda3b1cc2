package loop

import (
	"context"
	"testing"

	"github.com/vk-ci/vk/relay/gitlab"
)

// With Workhorse's long polling, at most one request of a runner is out
// that GitLab may hold: after a 204 the other loops wait (holding no
// reservation) until that request comes back; after a job, or from a
// GitLab that does not long-poll, every loop asks freely.
//
// spec: ARB-02, ARB-20
func TestOneLongPollPerRunner(t *testing.T) {
	held := gitlab.RequestOutcome{Kind: gitlab.RequestNoJob, Status: 204, LongPolling: true, LastUpdate: "v1"}
	woke := gitlab.RequestOutcome{Kind: gitlab.RequestNoJob, Status: 204, LongPolling: true, WorkhorseAnswered: true}
	job := gitlab.RequestOutcome{Kind: gitlab.RequestJobReceived, Status: 201, LongPolling: true}
	plain := gitlab.RequestOutcome{Kind: gitlab.RequestNoJob, Status: 204, LastUpdate: "v1"}

	r := &runnerState{}
	// before any answer: nothing is known, every loop may ask
	for range 3 {
		if poll, ok := r.startRequest(); poll || !ok {
			t.Fatalf("first round: poll %v ok %v, want a plain request", poll, ok)
		}
	}
	r.endRequest(false, held) // a 204 from a long-polling GitLab
	poll, ok := r.startRequest()
	if !poll || !ok {
		t.Fatalf("after a 204: poll %v ok %v, want this request to be the long poll", poll, ok)
	}
	if p2, ok2 := r.startRequest(); p2 || ok2 {
		t.Fatalf("a second long poll was let out (poll %v ok %v)", p2, ok2)
	}
	// awaitPoller on an ended context tells waiting (its error) from
	// going on (nil) without timing
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.awaitPoller(ended); err == nil {
		t.Fatal("a loop went on while the runner's long poll was out")
	}
	r.endRequest(poll, woke) // Workhorse: the queue changed
	if err := r.awaitPoller(ended); err != nil {
		t.Fatalf("the long poll came back, yet a loop still waits: %v", err)
	}
	if noJobOutcome(woke) != "released" || noJobOutcome(held) != "empty" {
		t.Errorf("outcomes: woken %q, Rails' 204 %q; want released and empty", noJobOutcome(woke), noJobOutcome(held))
	}
	// after a job the loops ask freely again
	poll, _ = r.startRequest()
	r.endRequest(poll, job)
	for range 3 {
		if poll, ok := r.startRequest(); poll || !ok {
			t.Fatalf("after a job: poll %v ok %v, want a plain request", poll, ok)
		}
	}
	// a GitLab that does not long-poll holds nothing
	r.endRequest(false, plain)
	for range 3 {
		if poll, ok := r.startRequest(); poll || !ok {
			t.Fatalf("without long polling: poll %v ok %v, want a plain request", poll, ok)
		}
	}
}
