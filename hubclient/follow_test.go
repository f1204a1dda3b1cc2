package hubclient

import (
	"net/http"
	"testing"

	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/proto/client"
)

// A standby's 503 naming the leader sends the request to the leader at
// once and the next ones straight there; once the leader cannot be
// reached, requests go back to the configured URL (another instance, or
// a name resolving to every instance).
//
// spec: BS-12, BS-15
func TestFollowsLeader(t *testing.T) {
	standby, leader := newFakeHub(t), newFakeHub(t)
	leader.key, leader.pub = standby.key, standby.pub
	standby503 := reply{status: http.StatusServiceUnavailable,
		body: mustJSON(client.Error{Error: "standby", Code: client.CodeUnavailable, RetryAfterSecs: 1, Leader: leader.srv.URL})}
	standby.answer(client.RouteClaim, standby503)
	leader.answer(client.RouteClaim, reply{status: http.StatusNoContent}, reply{status: http.StatusNoContent})
	c, err := New(Config{HubURL: standby.srv.URL, CAPEM: append(append([]byte{}, standby.caPEM...), leader.caPEM...),
		Key: standby.key, Principal: principal, Log: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Claim(t.Context(), "a1"); err != nil {
		t.Fatalf("claim through the standby: %v", err)
	}
	if err := c.Claim(t.Context(), "a2"); err != nil {
		t.Fatalf("second claim: %v", err)
	}
	if n, m := len(standby.requests()), len(leader.requests()); n != 1 || m != 2 {
		t.Fatalf("standby saw %d requests, leader %d; want 1 and 2", n, m)
	}

	// The leader dies; the standby took over.
	leader.srv.Close()
	if err := c.Claim(t.Context(), "a3"); err == nil || !Retryable(err) {
		t.Fatalf("claim to the dead leader: %v, want a retryable transport error", err)
	}
	standby.answer(client.RouteClaim, reply{status: http.StatusNoContent})
	if err := c.Claim(t.Context(), "a3"); err != nil {
		t.Fatalf("claim after the failover: %v", err)
	}
	if n := len(standby.requests()); n != 2 {
		t.Fatalf("standby saw %d requests, want 2", n)
	}
}

// A client given several instances whose first is gone sends the retry
// of a failed request to the next one, and stays there while it
// answers; the standby there names the new leader, which is followed.
//
// spec: BS-12
func TestNextInstanceWhenUnreachable(t *testing.T) {
	first, second, leader := newFakeHub(t), newFakeHub(t), newFakeHub(t)
	second.key, second.pub = first.key, first.pub
	leader.key, leader.pub = first.key, first.pub
	first.answer(client.RouteClaim, reply{status: http.StatusNoContent})
	second.answer(client.RouteClaim, reply{status: http.StatusNoContent},
		reply{status: http.StatusServiceUnavailable,
			body: mustJSON(client.Error{Error: "standby", Code: client.CodeUnavailable, RetryAfterSecs: 1, Leader: leader.srv.URL})})
	leader.answer(client.RouteClaim, reply{status: http.StatusNoContent})
	ca := append(append(append([]byte{}, first.caPEM...), second.caPEM...), leader.caPEM...)
	c, err := New(Config{HubURL: first.srv.URL, Others: []string{second.srv.URL}, CAPEM: ca,
		Key: first.key, Principal: principal, Log: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Claim(t.Context(), "a1"); err != nil {
		t.Fatalf("claim at the first instance: %v", err)
	}
	first.srv.Close()
	if err := c.Claim(t.Context(), "a2"); err == nil || !Retryable(err) {
		t.Fatalf("claim to the dead first instance: %v, want a retryable transport error", err)
	}
	for _, a := range []string{"a2", "a3"} {
		if err := c.Claim(t.Context(), a); err != nil {
			t.Fatalf("claim %s after the first instance died: %v", a, err)
		}
	}
	if n, m := len(second.requests()), len(leader.requests()); n != 2 || m != 1 {
		t.Fatalf("second instance saw %d requests, the leader it named %d; want 2 and 1", n, m)
	}
}
