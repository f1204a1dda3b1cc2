package hub

import (
	"net/http"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

// spec: API-48, API-49, API-56, FAIL-20, FAIL-23, RSESS-07, OPS-06
func TestApprovals(t *testing.T) {
	h := newHarness(t)
	h.cfg.Approvals.Required = true
	h.cfg.UIURL = "https://hub.example.com:8444/"
	h.restart()
	ctx := t.Context()
	d := h.srv.Driver()
	if err := d.RelayConnected(ctx, h.relay, h.rsend); err != nil {
		t.Fatal(err)
	}
	rep := &client.RelayReport{GitLabURL: "https://gitlab.example.com", Runners: []client.RunnerReport{
		{Name: "r1", Placement: testPlacement, RequestConcurrency: 1}, {Name: "r2", Placement: testPlacement, RequestConcurrency: 1}}}
	if err := d.RelayFrame(ctx, h.relay, rep); err != nil {
		t.Fatal(err)
	}
	// RSESS-07: a new server is pending, with the pending servers page.
	st := (<-h.rsend.frames).(*client.ServerStatus)
	if st.Status != client.ApprovalPending || st.ApprovalURL != "https://hub.example.com:8444/gitlab" {
		t.Fatalf("server status = %+v", st)
	}
	// An operator approves the server (as `vk-hub projects approve`).
	approve := func(project int64, state store.ApprovalState) {
		a := store.Approval{Instance: "gitlab.example.com", Project: project, State: state, By: "ops", Updated: testStart}
		if err := h.srv.Store().PutApproval(ctx, a); err != nil {
			t.Fatal(err)
		}
		if err := d.ApprovalChanged(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	approve(0, store.ApprovalApproved)
	if st := (<-h.rsend.frames).(*client.ServerStatus); st.Status != client.ApprovalApproved {
		t.Fatalf("server status after approval = %+v", st)
	}
	h.heartbeat(nil, nil)
	h.nodeUp(dispatch.Held{})

	// The project (42) is new: 403 approval_pending with its page; the
	// admission ends (FAIL-20) and the refusal is the recorded answer
	// (FAIL-23).
	g := h.claimed()
	h.want(http.StatusNoContent, nil, "POST", "/v1/reservations/"+g.Admission+"/outcome", client.OutcomeRequest{Admission: g.Admission, Outcome: client.OutcomeJob})
	sub := submission(g, 51)
	e := h.wantErr(http.StatusForbidden, client.CodeApprovalPending, "POST", "/v1/jobs", sub)
	if e.ApprovalURL != "https://hub.example.com:8444/gitlab/gitlab.example.com/projects/42" {
		t.Fatalf("approval_url = %q", e.ApprovalURL)
	}
	expectFrame[dispatch.Release](h)
	approve(42, store.ApprovalApproved)
	h.wantErr(http.StatusForbidden, client.CodeApprovalPending, "POST", "/v1/jobs", sub) // replayed: counts once

	// Approved now: a new job of the project runs; a rejected project is
	// refused project_rejected.
	g2 := h.claimedFor("r2")
	v := h.submitOnFor(g2, "r2", 52)
	if v.State != client.JobStarting {
		t.Fatalf("approved project's job = %+v", v)
	}
	expectFrame[dispatch.Start](h)
	approve(42, store.ApprovalRejected)
	h.advance(2 * time.Second)
	g3 := h.claimed()
	h.want(http.StatusNoContent, nil, "POST", "/v1/reservations/"+g3.Admission+"/outcome", client.OutcomeRequest{Admission: g3.Admission, Outcome: client.OutcomeJob})
	h.wantErr(http.StatusForbidden, client.CodeProjectRejected, "POST", "/v1/jobs", submission(g3, 53))

	// API-48: a job of another GitLab server than the relay's.
	s := submission(g3, 54)
	s.Spec.GitLabCI.ServerURL = "https://other.example.com"
	h.wantErr(http.StatusForbidden, client.CodeForbidden, "POST", "/v1/jobs", s)
}
