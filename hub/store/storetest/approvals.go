package storetest

import (
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/store"
)

// Approvals per GitLab instance and project (0: the server itself).
func testApprovals(t *testing.T, su suite[ApprovalsStore]) {
	s := su.open(t)
	ctx := su.ctx
	_, err := s.GetApproval(ctx, "main", 12)
	wantErr(t, "GetApproval never seen", err, store.ErrNotFound)
	in := []store.Approval{
		{Instance: "main", Project: 12, Path: "acme/web", State: store.ApprovalPending, Updated: T0},
		{Instance: "main", Project: 0, Path: "https://gitlab.example.com", State: store.ApprovalApproved, By: "ops", Updated: T0},
		{Instance: "edge", Project: 300, Path: "x/y", State: store.ApprovalRejected, By: "ops", Updated: T0},
		{Instance: "main", Project: 3, Path: "acme/api", State: store.ApprovalPending, Updated: T0},
	}
	for _, a := range in {
		wantErr(t, "PutApproval", s.PutApproval(ctx, a), nil)
	}
	in[0].State, in[0].By, in[0].Updated = store.ApprovalApproved, "alice", T0.Add(time.Hour)
	wantErr(t, "PutApproval change", s.PutApproval(ctx, in[0]), nil)
	s = su.restart(t, s)
	got, err := s.GetApproval(ctx, "main", 12)
	wantErr(t, "GetApproval", err, nil)
	diff(t, "GetApproval", in[0], got)
	all, _ := s.ListApprovals(ctx)
	diff(t, "ListApprovals", []store.Approval{in[2], in[1], in[3], in[0]}, all)

	// CreateApproval records a first sighting only: an existing decision
	// is returned untouched.
	seen := store.Approval{Instance: "main", Project: 12, Path: "acme/web", State: store.ApprovalPending, Updated: T0.Add(2 * time.Hour)}
	cur, created, err := s.CreateApproval(ctx, seen)
	wantErr(t, "CreateApproval existing", err, nil)
	if created {
		t.Error("CreateApproval over an existing approval reported created")
	}
	diff(t, "CreateApproval existing", in[0], cur)
	fresh := store.Approval{Instance: "new", Project: 0, Path: "https://new.example.com", State: store.ApprovalPending, Updated: T0}
	cur, created, err = s.CreateApproval(ctx, fresh)
	wantErr(t, "CreateApproval new", err, nil)
	if !created {
		t.Error("CreateApproval of a new approval reported not created")
	}
	diff(t, "CreateApproval new", fresh, cur)
	_, _, err = s.CreateApproval(ctx, store.Approval{Project: 1})
	wantErr(t, "CreateApproval without instance", err, store.ErrInvalid)
	// Decided ahead (no path yet): the sighting fills in the path only.
	ahead := store.Approval{Instance: "ahead", Project: 7, State: store.ApprovalApproved, By: "ops", Updated: T0}
	wantErr(t, "PutApproval ahead", s.PutApproval(ctx, ahead), nil)
	cur, created, err = s.CreateApproval(ctx, store.Approval{Instance: "ahead", Project: 7, Path: "acme/later", State: store.ApprovalPending, Updated: T0.Add(time.Hour)})
	wantErr(t, "CreateApproval over a decision without path", err, nil)
	ahead.Path = "acme/later"
	if created {
		t.Error("CreateApproval over a decision reported created")
	}
	diff(t, "CreateApproval over a decision without path", ahead, cur)
	s = su.restart(t, s)
	got, _ = s.GetApproval(ctx, "main", 12)
	diff(t, "approval after CreateApproval over it", in[0], got)
	got, _ = s.GetApproval(ctx, "new", 0)
	diff(t, "created approval", fresh, got)
	got, _ = s.GetApproval(ctx, "ahead", 7)
	diff(t, "decision with its path learnt", ahead, got)
}

// An approval without its instance is refused.
func testApprovalsInvalid(t *testing.T, su suite[ApprovalsStore]) {
	s := su.open(t)
	wantErr(t, "PutApproval no instance", s.PutApproval(su.ctx, store.Approval{Project: 1}), store.ErrInvalid)
}
