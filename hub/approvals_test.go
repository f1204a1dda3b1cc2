package hub

import (
	"context"
	"errors"
	"net/http"
	"sync"
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

// operatorInTheWindow is a store where an operator approves the server
// just as the hub records its first sighting: right after the hub's read
// (a read-then-write would then overwrite the approval with pending), or
// just before its create-if-absent.
type operatorInTheWindow struct {
	store.Store
	once     sync.Once
	decision store.Approval
}

func (s *operatorInTheWindow) approve(ctx context.Context) {
	s.once.Do(func() { s.Store.PutApproval(ctx, s.decision) })
}

func (s *operatorInTheWindow) GetApproval(ctx context.Context, instance string, project int64) (store.Approval, error) {
	a, err := s.Store.GetApproval(ctx, instance, project)
	if errors.Is(err, store.ErrNotFound) && instance == s.decision.Instance && project == s.decision.Project {
		s.approve(ctx)
	}
	return a, err
}

func (s *operatorInTheWindow) CreateApproval(ctx context.Context, a store.Approval) (store.Approval, bool, error) {
	if a.Instance == s.decision.Instance && a.Project == s.decision.Project {
		s.approve(ctx)
	}
	return s.Store.CreateApproval(ctx, a)
}

// An operator's approval written while the hub records the server's first
// sighting is kept: the relay is told approved and the store says
// approved (the first sighting never overwrites a decision).
//
// spec: RSESS-07, OPS-06
func TestApprovalNotLostToFirstSighting(t *testing.T) {
	h := newHarness(t)
	h.cfg.Approvals.Required = true
	race := &operatorInTheWindow{decision: store.Approval{Instance: "gitlab.example.com", State: store.ApprovalApproved, By: "ops", Updated: testStart}}
	h.wrapStore = func(st store.Store) store.Store { race.Store = st; return race }
	h.restart()
	ctx := t.Context()
	d := h.srv.Driver()
	if err := d.RelayConnected(ctx, h.relay, h.rsend); err != nil {
		t.Fatal(err)
	}
	rep := &client.RelayReport{GitLabURL: "https://gitlab.example.com", Runners: []client.RunnerReport{
		{Name: "r1", Placement: testPlacement, RequestConcurrency: 1}}}
	if err := d.RelayFrame(ctx, h.relay, rep); err != nil {
		t.Fatal(err)
	}
	if st := (<-h.rsend.frames).(*client.ServerStatus); st.Status != client.ApprovalApproved {
		t.Errorf("server status = %+v, want approved (the operator's decision)", st)
	}
	a, err := h.srv.Store().GetApproval(ctx, "gitlab.example.com", 0)
	if err != nil || a.State != store.ApprovalApproved || a.By != "ops" {
		t.Errorf("stored approval = %+v, %v; want the operator's approved", a, err)
	}
}
