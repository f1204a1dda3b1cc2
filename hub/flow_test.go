package hub

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

// TestFlow runs a job's whole path through the hub over real TLS with
// signed requests, playing the relay and the node through the driver:
// reserve → offer accepted → grant → claim → outcome job → submit → start
// → accepted → output → result → settle.
//
// spec: API-01, API-03, API-04, API-05, API-07, API-08, API-17, API-22, API-26, API-36, API-37, API-39, API-41, ARB-01, ARB-22, ARB-24, ARB-36, NSESS-04, NSESS-07, NSESS-08, NSESS-10, NODE-12
func TestFlow(t *testing.T) {
	h := newHarness(t)
	h.relayUp(1)
	h.nodeUp(dispatch.Held{})

	tk := h.reserve()
	// Waiting: 202 with the same ticket.
	var t1 client.ReservationTicket
	h.want(http.StatusAccepted, &t1, "GET", "/v1/reservations/tickets/"+tk, nil)
	if t1.Ticket != tk {
		t.Fatalf("ticket poll answered %q, want %q", t1.Ticket, tk)
	}
	off := expectFrame[dispatch.Offer](h)
	if off.Envelope != testPlacement.Envelope || off.LeaseSecs != 90 {
		t.Fatalf("offer = %+v, want envelope %v lease 90", off, testPlacement.Envelope)
	}
	h.nodeSay(&dispatch.OfferReply{Reservation: off.Reservation, Reply: dispatch.ReplyAccepted, LeaseSecs: 90})
	var g client.ReservationGrant
	h.want(http.StatusCreated, &g, "GET", "/v1/reservations/tickets/"+tk, nil)
	if g.Reservation != off.Reservation || g.Node != "n1" || g.LeaseSecs != 90 || g.Envelope != testPlacement.Envelope {
		t.Fatalf("grant = %+v, want reservation %s on n1, lease 90", g, off.Reservation)
	}
	h.want(http.StatusNoContent, nil, "POST", "/v1/reservations/"+g.Admission+"/claim", nil)
	h.want(http.StatusNoContent, nil, "POST", "/v1/reservations/"+g.Admission+"/claim", nil) // API-26 repeat
	h.heartbeat([]string{g.Admission}, nil)

	v := h.submitOn(g, 1001)
	if v.State != client.JobStarting || v.Node != "n1" || v.Revision == 0 {
		t.Fatalf("submitted view = %+v, want starting on n1", v)
	}
	st := expectFrame[dispatch.Start](h)
	if st.Job != v.ID || st.Reservation != g.Reservation || st.Spec.GitLabCI == nil || st.Spec.GitLabCI.Token != canary+"-token" {
		t.Fatalf("start = %+v, want job %s on reservation %s with the full spec", st.Redacted(), v.ID, g.Reservation)
	}
	h.nodeSay(&dispatch.JobUpdate{Job: v.ID, State: dispatch.JobAccepted})
	var v2 client.JobView
	h.want(http.StatusOK, &v2, "GET", "/v1/jobs/"+v.ID+"?after="+strconv.FormatUint(v.Revision, 10)+"&wait=30", nil)
	if v2.State != client.JobRunning || v2.Revision <= v.Revision {
		t.Fatalf("after accepted: %+v, want running with a newer revision than %d", v2, v.Revision)
	}

	h.nodeSay(&dispatch.Output{Job: v.ID, Offset: 0, Data: []byte("hello ")})
	if ack := expectFrame[dispatch.OutputAck](h); ack.Offset != 6 {
		t.Fatalf("ack = %+v, want offset 6", ack)
	}
	// An overlapping chunk is trimmed (NODE-12).
	h.nodeSay(&dispatch.Output{Job: v.ID, Offset: 3, Data: []byte("lo world\n")})
	if ack := expectFrame[dispatch.OutputAck](h); ack.Offset != 12 {
		t.Fatalf("ack = %+v, want offset 12", ack)
	}
	var v3 client.JobView
	h.want(http.StatusOK, &v3, "GET", "/v1/jobs/"+v.ID, nil)
	if v3.OutputLen != 12 || v3.Revision != v2.Revision {
		t.Fatalf("after output: %+v, want output_len 12 and revision %d unchanged (API-36)", v3, v2.Revision)
	}
	code, body, hdr := h.call("GET", "/v1/jobs/"+v.ID+"/output?offset=6", nil)
	if code != 200 || string(body) != "world\n" || hdr.Get(client.HeaderOutputOffset) != "6" ||
		hdr.Get(client.HeaderOutputLength) != "12" || hdr.Get(client.HeaderOutputComplete) != "false" {
		t.Fatalf("output read = %d %q %v", code, body, hdr)
	}
	// Settle before the result: 409 (API-51).
	h.wantErr(http.StatusConflict, client.CodeConflict, "POST", "/v1/jobs/"+v.ID+"/settle", nil)

	h.nodeSay(&dispatch.JobUpdate{Job: v.ID, State: dispatch.JobRunning, Stage: "step_script"})
	h.nodeSay(&dispatch.JobUpdate{Job: v.ID, State: dispatch.JobFinished})
	exit := 0
	h.nodeSay(&dispatch.Result{Job: v.ID, Result: client.JobResult{ExitCode: &exit, OutputLen: 12, Usage: &client.Usage{WallMS: 1234}}})
	if rec := expectFrame[dispatch.Recorded](h); rec.Job != v.ID {
		t.Fatalf("recorded = %+v", rec)
	}
	var v4 client.JobView
	h.want(http.StatusOK, &v4, "GET", "/v1/jobs/"+v.ID, nil)
	if v4.State != client.JobFinished || v4.Result == nil || v4.Result.Failure != "" || v4.Result.Usage == nil || v4.Result.Usage.WallMS != 1234 || v4.Stage != "step_script" {
		t.Fatalf("finished view = %+v (result %+v)", v4, v4.Result)
	}
	code, body, hdr = h.call("GET", "/v1/jobs/"+v.ID+"/output?offset=0", nil)
	if code != 200 || string(body) != "hello world\n" || hdr.Get(client.HeaderOutputComplete) != "true" {
		t.Fatalf("final output read = %d %q complete=%s", code, body, hdr.Get(client.HeaderOutputComplete))
	}
	h.want(http.StatusNoContent, nil, "POST", "/v1/jobs/"+v.ID+"/settle", nil)
	h.want(http.StatusNoContent, nil, "POST", "/v1/jobs/"+v.ID+"/settle", nil) // idempotent (API-45)
	// The record stays, the output is gone (API-41).
	var v5 client.JobView
	h.want(http.StatusOK, &v5, "GET", "/v1/jobs/"+v.ID, nil)
	if v5.State != client.JobFinished || v5.Result == nil {
		t.Fatalf("settled view = %+v", v5)
	}
	h.wantErr(http.StatusNotFound, client.CodeNotFound, "GET", "/v1/jobs/"+v.ID+"/output", nil)

	code, body, _ = h.call("GET", "/metrics", nil)
	if code != 200 || !strings.Contains(string(body), `vk_hub_requests_total{code="201",route="POST /v1/jobs"} 1`) ||
		!strings.Contains(string(body), "vk_hub_grants_total 1") {
		t.Fatalf("metrics = %d\n%s", code, body)
	}
}

// spec: NODE-12, NSESS-08
func TestOutputGapAndResend(t *testing.T) {
	h := newHarness(t)
	h.relayUp(1)
	h.nodeUp(dispatch.Held{})
	v := h.submitOn(h.claimed(), 61)
	expectFrame[dispatch.Start](h)
	h.nodeSay(&dispatch.JobUpdate{Job: v.ID, State: dispatch.JobAccepted})
	h.nodeSay(&dispatch.Output{Job: v.ID, Offset: 0, Data: []byte("abcd")})
	expectFrame[dispatch.OutputAck](h)
	// A chunk leaving a gap is a protocol error; nothing is written.
	err := h.srv.Driver().NodeFrame(t.Context(), "n1", &dispatch.Output{Job: v.ID, Offset: 10, Data: []byte("x")})
	if !errors.Is(err, ErrNodeProtocol) {
		t.Fatalf("gap: %v, want ErrNodeProtocol", err)
	}
	h.noFrame()
	// A repeated chunk is trimmed and acked at the stored end.
	h.nodeSay(&dispatch.Output{Job: v.ID, Offset: 0, Data: []byte("abcd")})
	if ack := expectFrame[dispatch.OutputAck](h); ack.Offset != 4 {
		t.Fatalf("ack of a repeat = %+v, want 4", ack)
	}
	h.nodeSay(&dispatch.Result{Job: v.ID, Result: client.JobResult{OutputLen: 4}})
	expectFrame[dispatch.Recorded](h)
	// After the result, a resend is acked without writing.
	h.nodeSay(&dispatch.Output{Job: v.ID, Offset: 2, Data: []byte("cdef")})
	if ack := expectFrame[dispatch.OutputAck](h); ack.Offset != 4 {
		t.Fatalf("ack after the result = %+v, want 4", ack)
	}
	code, body, _ := h.call("GET", "/v1/jobs/"+v.ID+"/output", nil)
	if code != 200 || string(body) != "abcd" {
		t.Fatalf("output = %d %q", code, body)
	}
	// Output of a job the node does not run is dropped, not fatal.
	h.nodeSay(&dispatch.Output{Job: "0123456789abcdef", Offset: 0, Data: []byte("zz")})
	h.noFrame()
}

// spec: FAIL-15, NSESS-24
func TestLostStartAnswer(t *testing.T) {
	h := newHarness(t)
	h.relayUp(1)
	h.nodeUp(dispatch.Held{})
	v := h.submitOn(h.claimed(), 81)
	expectFrame[dispatch.Start](h)
	// The node's accepted never arrives; its session drops and comes back
	// holding the job.
	if err := h.srv.Driver().NodeDisconnected(t.Context(), "n1"); err != nil {
		t.Fatal(err)
	}
	h.nodeUp(dispatch.Held{Jobs: []dispatch.HeldJob{{Job: v.ID}}})
	if ack := expectFrame[dispatch.OutputAck](h); ack.Job != v.ID || ack.Offset != 0 {
		t.Fatalf("ack = %+v", ack)
	}
	h.noFrame() // not started again, not cancelled
	var r client.JobView
	h.want(http.StatusOK, &r, "GET", "/v1/jobs/"+v.ID, nil)
	if r.State != client.JobRunning || r.Node != "n1" {
		t.Fatalf("job after held = %+v, want running on n1", r)
	}
}
