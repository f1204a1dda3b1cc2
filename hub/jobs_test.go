package hub

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
	"github.com/vk-ci/vk/proto/job"
)

func submission(g client.ReservationGrant, gitlabJob int64) client.JobSubmission {
	return client.JobSubmission{Runner: "r1", Admission: g.Admission, Reservation: g.Reservation,
		RequestID: client.NewRequestID(), Placement: testPlacement, PlaceWithinSecs: 300, Spec: testSpec(gitlabJob)}
}

// spec: API-31, API-32, API-33, API-34, API-35, API-46, API-50, API-51, API-53
func TestSubmitRefusals(t *testing.T) {
	h := newHarness(t)
	h.relayUp(1)
	h.nodeUp(dispatch.Held{})
	o := h.other("relay-2")

	outcome := func(g client.ReservationGrant, k client.Outcome) client.OutcomeRequest {
		return client.OutcomeRequest{Admission: g.Admission, Outcome: k}
	}
	big := testSpec(1)
	big.GitLabCI.Steps[0].Script = []string{strings.Repeat("x", job.MaxSpecBytes)}
	noProject := testSpec(1)
	noProject.GitLabCI.Job.ProjectID = 0
	otherPlacement := testPlacement
	otherPlacement.Envelope.CPUs = 4

	for _, tc := range []struct {
		name   string
		edit   func(*client.JobSubmission)
		status int
		code   client.Code
	}{
		{"too large", func(s *client.JobSubmission) { s.Spec = big }, http.StatusRequestEntityTooLarge, client.CodeTooLarge},               // API-35
		{"no project", func(s *client.JobSubmission) { s.Spec = noProject }, http.StatusBadRequest, client.CodeInvalid},                    // API-46
		{"other placement", func(s *client.JobSubmission) { s.Placement = otherPlacement }, http.StatusForbidden, client.CodeForbidden},    // API-31
		{"other reservation", func(s *client.JobSubmission) { s.Reservation = "r999" }, http.StatusForbidden, client.CodeForbidden},        // API-31
		{"other runner", func(s *client.JobSubmission) { s.Runner = "r2" }, http.StatusForbidden, client.CodeForbidden},                    // API-31
		{"bad request_id", func(s *client.JobSubmission) { s.RequestID = "nope" }, http.StatusBadRequest, client.CodeInvalid},              // API-46
		{"unknown kind", func(s *client.JobSubmission) { s.Spec = job.JobSpec{Kind: "shell"} }, http.StatusBadRequest, client.CodeInvalid}, // API-46
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.t = t
			g := h.claimed()
			h.want(http.StatusNoContent, nil, "POST", "/v1/reservations/"+g.Admission+"/outcome", outcome(g, client.OutcomeJob))
			s := submission(g, 1)
			tc.edit(&s)
			h.wantErr(tc.status, tc.code, "POST", "/v1/jobs", s)
			if tc.code == client.CodeInvalid && s.RequestID == "nope" {
				return // not even decoded as a submission of this admission
			}
			// API-34: the refusal ended the admission: its reservation
			// is released and cannot be renewed.
			if rel := expectFrame[dispatch.Release](h); rel.Reservation != g.Reservation {
				t.Fatalf("release = %+v, want %s", rel, g.Reservation)
			}
			h.wantErr(http.StatusGone, client.CodeReservationGone, "POST", "/v1/reservations/"+g.Admission+"/renew", nil)
		})
	}
	h.t = t
	// The "bad request_id" case left its admission (outcome job) open.
	for len(h.node.frames) > 0 {
		<-h.node.frames
	}

	// API-34 before any outcome: the refused job's admission ends empty.
	g0 := h.claimed()
	s0 := submission(g0, 6)
	s0.Placement = otherPlacement
	h.wantErr(http.StatusForbidden, client.CodeForbidden, "POST", "/v1/jobs", s0)
	expectFrame[dispatch.Release](h)
	h.want(http.StatusNoContent, nil, "POST", "/v1/reservations/"+g0.Admission+"/outcome", outcome(g0, client.OutcomeEmpty))
	h.wantErr(http.StatusConflict, client.CodeConflict, "POST", "/v1/reservations/"+g0.Admission+"/outcome", outcome(g0, client.OutcomeJob))
	h.advance(2 * time.Second) // the empty outcome backed r1 off (ARB-20)

	g := h.claimed()
	v := h.submitOn(g, 7)
	expectFrame[dispatch.Start](h)
	// API-32: one job per admission.
	h.wantErr(http.StatusConflict, client.CodeConflict, "POST", "/v1/jobs", submission(g, 8))
	// API-33: a queued reservation's job must name its admission.
	s := submission(g, 9)
	s.Admission = ""
	h.wantErr(http.StatusForbidden, client.CodeForbidden, "POST", "/v1/jobs", s)
	// API-50: another relay's job reads as not found.
	o.wantErr(http.StatusNotFound, client.CodeNotFound, "GET", "/v1/jobs/"+v.ID, nil)
	o.wantErr(http.StatusNotFound, client.CodeNotFound, "POST", "/v1/jobs/"+v.ID+"/cancel", client.CancelRequest{Mode: client.CancelGraceful})
	o.wantErr(http.StatusNotFound, client.CodeNotFound, "POST", "/v1/jobs/"+v.ID+"/settle", nil)
	o.wantErr(http.StatusNotFound, client.CodeNotFound, "GET", "/v1/jobs/"+v.ID+"/output", nil)
	h.wantErr(http.StatusNotFound, client.CodeNotFound, "GET", "/v1/jobs/0123456789abcdef", nil)
	h.wantErr(http.StatusNotFound, client.CodeNotFound, "GET", "/v1/jobs/bogus", nil)
}

// spec: API-42, API-43, FAIL-23
func TestSubmitIdempotency(t *testing.T) {
	h := newHarness(t)
	h.relayUp(1)
	h.nodeUp(dispatch.Held{})
	g := h.claimed()
	h.want(http.StatusNoContent, nil, "POST", "/v1/reservations/"+g.Admission+"/outcome", client.OutcomeRequest{Admission: g.Admission, Outcome: client.OutcomeJob})
	s := submission(g, 11)
	var v1, v2 client.JobView
	h.want(http.StatusCreated, &v1, "POST", "/v1/jobs", s)
	expectFrame[dispatch.Start](h)
	h.want(http.StatusCreated, &v2, "POST", "/v1/jobs", s) // replayed, not a second job
	if v1 != v2 {
		t.Fatalf("replay = %+v, want the first answer %+v", v2, v1)
	}
	h.noFrame()
	s2 := s
	s2.PlaceWithinSecs = 60
	h.wantErr(http.StatusConflict, client.CodeConflict, "POST", "/v1/jobs", s2)
	// Once the job left the hub's history: 410 not_found.
	if err := h.srv.Store().DeleteJob(t.Context(), v1.ID); err != nil {
		t.Fatal(err)
	}
	h.wantErr(http.StatusGone, client.CodeNotFound, "POST", "/v1/jobs", s)

	// FAIL-23: a refusal is the recorded answer, so a retry counts once
	// even after the cause went away.
	g2 := h.claimedFor("r2")
	h.want(http.StatusNoContent, nil, "POST", "/v1/reservations/"+g2.Admission+"/outcome", client.OutcomeRequest{Admission: g2.Admission, Outcome: client.OutcomeJob})
	bad := submission(g2, 12)
	bad.Runner = "r1" // mismatching its admission: 403
	h.wantErr(http.StatusForbidden, client.CodeForbidden, "POST", "/v1/jobs", bad)
	h.wantErr(http.StatusForbidden, client.CodeForbidden, "POST", "/v1/jobs", bad)
}

// spec: API-11, API-12, API-36, API-37, API-38, API-40, NSESS-09
func TestJobViewOutputCancel(t *testing.T) {
	h := newHarness(t)
	h.relayUp(1)
	h.nodeUp(dispatch.Held{})
	v := h.submitOn(h.claimed(), 21)
	expectFrame[dispatch.Start](h)
	h.nodeSay(&dispatch.JobUpdate{Job: v.ID, State: dispatch.JobAccepted})

	type answer struct {
		code int
		body []byte
		hdr  http.Header
	}
	got := make(chan answer, 1)
	// Output long poll: woken by bytes past the offset.
	go func() {
		c, b, hd := h.call("GET", "/v1/jobs/"+v.ID+"/output?offset=0&wait=30", nil)
		got <- answer{c, b, hd}
	}()
	waitOutputWaiter(t, h, v.ID)
	h.nodeSay(&dispatch.Output{Job: v.ID, Offset: 0, Data: []byte("line 1\n")})
	expectFrame[dispatch.OutputAck](h)
	if a := <-got; a.code != 200 || string(a.body) != "line 1\n" {
		t.Fatalf("output long poll = %d %q", a.code, a.body)
	}
	// 416 past the end, with the length.
	code, _, hdr := h.call("GET", "/v1/jobs/"+v.ID+"/output?offset=8", nil)
	if code != http.StatusRequestedRangeNotSatisfiable || hdr.Get(client.HeaderOutputLength) != "7" {
		t.Fatalf("read past the end = %d length %q, want 416 with 7", code, hdr.Get(client.HeaderOutputLength))
	}
	// At the end, without wait: 200, empty, not complete.
	code, body, hdr := h.call("GET", "/v1/jobs/"+v.ID+"/output?offset=7", nil)
	if code != 200 || len(body) != 0 || hdr.Get(client.HeaderOutputComplete) != "false" {
		t.Fatalf("read at the end = %d %q complete %q", code, body, hdr.Get(client.HeaderOutputComplete))
	}

	// Job view long poll: woken by the cancel's revision change.
	var cur client.JobView
	h.want(http.StatusOK, &cur, "GET", "/v1/jobs/"+v.ID, nil)
	go func() {
		c, b, hd := h.call("GET", "/v1/jobs/"+v.ID+"?after="+itoa(cur.Revision)+"&wait=60", nil)
		got <- answer{c, b, hd}
	}()
	waitPending(t, h, 3)
	var c1 client.JobView
	h.want(http.StatusAccepted, &c1, "POST", "/v1/jobs/"+v.ID+"/cancel", client.CancelRequest{Mode: client.CancelGraceful})
	if c1.Cancel != client.CancelGraceful || c1.Revision <= cur.Revision {
		t.Fatalf("cancel view = %+v", c1)
	}
	if cf := expectFrame[dispatch.Cancel](h); cf.Mode != client.CancelGraceful {
		t.Fatalf("cancel frame = %+v", cf)
	}
	if a := <-got; a.code != 200 || !contains(a.body, `"cancel":"graceful"`) {
		t.Fatalf("view long poll = %d %s", a.code, a.body)
	}
	// API-40: immediate overrides graceful; graceful does not undo it.
	var c2, c3 client.JobView
	h.want(http.StatusAccepted, &c2, "POST", "/v1/jobs/"+v.ID+"/cancel", client.CancelRequest{Mode: client.CancelImmediate})
	expectFrame[dispatch.Cancel](h)
	h.want(http.StatusAccepted, &c3, "POST", "/v1/jobs/"+v.ID+"/cancel", client.CancelRequest{Mode: client.CancelGraceful})
	expectFrame[dispatch.Cancel](h)
	if c2.Cancel != client.CancelImmediate || c3.Cancel != client.CancelImmediate || c3.Revision != c2.Revision {
		t.Fatalf("immediate then graceful: %+v then %+v", c2, c3)
	}
	h.wantErr(http.StatusBadRequest, client.CodeInvalid, "POST", "/v1/jobs/"+v.ID+"/cancel", client.CancelRequest{Mode: "gently"})

	// A view long poll reaching its limit answers the current view.
	go func() {
		c, b, hd := h.call("GET", "/v1/jobs/"+v.ID+"?after="+itoa(c3.Revision)+"&wait=5", nil)
		got <- answer{c, b, hd}
	}()
	waitPending(t, h, 3)
	h.clk.Advance(5 * time.Second)
	if a := <-got; a.code != 200 || !contains(a.body, `"revision":`+itoa(c3.Revision)) {
		t.Fatalf("view long poll at its limit = %d %s", a.code, a.body)
	}

	h.nodeSay(&dispatch.Result{Job: v.ID, Result: client.JobResult{Failure: client.FailureCanceled, OutputLen: 7}})
	expectFrame[dispatch.Recorded](h)
	// Cancelling a finished job changes nothing.
	var f1, f2 client.JobView
	h.want(http.StatusOK, &f1, "GET", "/v1/jobs/"+v.ID, nil)
	h.want(http.StatusAccepted, &f2, "POST", "/v1/jobs/"+v.ID+"/cancel", client.CancelRequest{Mode: client.CancelImmediate})
	if f1.Revision != f2.Revision || f2.State != client.JobFinished {
		t.Fatalf("cancel of a finished job: %+v then %+v", f1, f2)
	}
	h.noFrame()
}

// waitOutputWaiter waits until an output long poll of job is parked.
func waitOutputWaiter(t *testing.T, h *harness, job string) {
	t.Helper()
	select {
	case j := <-h.outWaits:
		if j != job {
			t.Fatalf("output wait parked for %s, want %s", j, job)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no output long poll parked")
	}
}

// spec: ARB-37, FAIL-10
func TestQueuedJobNoCapacity(t *testing.T) {
	h := newHarness(t)
	h.relayUp(1)
	// No admission, no node: the job waits for place_within_secs.
	s := client.JobSubmission{Runner: "r1", RequestID: client.NewRequestID(), Placement: testPlacement, PlaceWithinSecs: 30, Spec: testSpec(31)}
	var v client.JobView
	h.want(http.StatusCreated, &v, "POST", "/v1/jobs", s)
	if v.State != client.JobQueued {
		t.Fatalf("view = %+v, want queued", v)
	}
	// Cancelled while queued: it ends canceled at once.
	s2 := s
	s2.RequestID = client.NewRequestID()
	var v2 client.JobView
	h.want(http.StatusCreated, &v2, "POST", "/v1/jobs", s2)
	var c client.JobView
	h.want(http.StatusAccepted, &c, "POST", "/v1/jobs/"+v2.ID+"/cancel", client.CancelRequest{Mode: client.CancelGraceful})
	if c.State != client.JobFinished || c.Result == nil || c.Result.Failure != client.FailureCanceled {
		t.Fatalf("cancelled queued job = %+v", c)
	}
	h.advance(31 * time.Second)
	var e client.JobView
	h.want(http.StatusOK, &e, "GET", "/v1/jobs/"+v.ID, nil)
	if e.State != client.JobFinished || e.Result == nil || e.Result.Failure != client.FailureNoCapacity || e.Result.Message == "" {
		t.Fatalf("job past place_within_secs = %+v (%+v)", e, e.Result)
	}
	h.want(http.StatusNoContent, nil, "POST", "/v1/jobs/"+v.ID+"/settle", nil)
}

// spec: API-09
func TestClientsRefusedToRelays(t *testing.T) {
	h := newHarness(t)
	h.wantErr(http.StatusForbidden, client.CodeForbidden, "POST", "/v1/clients", client.ClientHello{Name: "dash"})
	h.wantErr(http.StatusBadRequest, client.CodeInvalid, "POST", "/v1/clients", []byte(`{"name":"dash","x":1}`))
}

// spec: API-02, API-13, API-14
func TestCapacity(t *testing.T) {
	h := newHarness(t)
	req := client.CapacityRequest{Placement: testPlacement}
	var c client.Capacity
	h.want(http.StatusOK, &c, "POST", "/v1/capacity", req)
	if c.Fits != 0 {
		t.Fatalf("fits without nodes = %d", c.Fits)
	}
	h.relayUp(1)
	h.nodeUp(dispatch.Held{}) // room for 4 envelopes on one node: fits counts 4
	var c2 client.Capacity
	h.want(http.StatusOK, &c2, "POST", "/v1/capacity", req)
	if c2.Fits != 4 || c2.Revision <= c.Revision {
		t.Fatalf("capacity = %+v after %+v, want fits 4 and a newer revision", c2, c)
	}
	h.claimed() // a reservation the node's heartbeats do not show yet counts
	var c3 client.Capacity
	h.want(http.StatusOK, &c3, "POST", "/v1/capacity", req)
	if c3.Fits != 3 {
		t.Fatalf("capacity with one reservation = %+v, want 3", c3)
	}
}

func itoa(n uint64) string { return strings.TrimSpace(strings.Repeat(" ", 0) + uintToString(n)) }

func uintToString(n uint64) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for n > 0 {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
	}
	return string(b)
}

// spec: FAIL-11, FAIL-16, FAIL-17, FAIL-18
func TestNodeLost(t *testing.T) {
	h := newHarness(t)
	h.cfg.Sessions.JobLostAfterSecs = 60
	h.restart()
	h.relayUp(1)
	h.nodeUp(dispatch.Held{})
	v := h.submitOn(h.claimed(), 41)
	expectFrame[dispatch.Start](h)
	h.nodeSay(&dispatch.JobUpdate{Job: v.ID, State: dispatch.JobAccepted})
	d := h.srv.Driver()
	if err := d.NodeDisconnected(t.Context(), "n1"); err != nil {
		t.Fatal(err)
	}
	// Out of touch for less than job_lost_after: the job keeps running.
	h.advance(59 * time.Second)
	var r client.JobView
	h.want(http.StatusOK, &r, "GET", "/v1/jobs/"+v.ID, nil)
	if r.State != client.JobRunning {
		t.Fatalf("job after 59 s without its node = %+v, want running", r)
	}
	h.advance(time.Second)
	var l client.JobView
	h.want(http.StatusOK, &l, "GET", "/v1/jobs/"+v.ID, nil)
	if l.State != client.JobFinished || l.Result == nil || l.Result.Failure != client.FailureLost {
		t.Fatalf("job after 60 s without its node = %+v (%+v), want finished lost", l, l.Result)
	}
	// The node returns still holding the job: the hub cancels it (immediate).
	h.nodeUp(dispatch.Held{Jobs: []dispatch.HeldJob{{Job: v.ID, Spooled: 0}}})
	var cancelled bool
	for len(h.node.frames) > 0 {
		if c, ok := (<-h.node.frames).(dispatch.Cancel); ok && c.Job == v.ID && c.Mode == client.CancelImmediate {
			cancelled = true
		}
	}
	if !cancelled {
		t.Fatal("the returning node was not told to cancel the lost job")
	}
}
