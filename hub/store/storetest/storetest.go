// Package storetest is the conformance suite every [store.Store]
// implementation passes (STYLE C8): memstore, boltstore, and boltstore
// closed and reopened between writing and reading (restart, FAIL-19). A
// future networked store runs the same suite.
//
// Use it from an implementation's test:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Harness{New: func(t *testing.T) store.Store { … }})
//	}
package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vk-ci/vk/hub/store"
)

// Harness tells the suite how to make stores.
type Harness struct {
	// New returns a new, empty store; the suite closes it (Close may be
	// called twice and must then return nil).
	New func(t *testing.T) store.Store
	// Reopen, when set, closes s and returns a store over the same durable
	// state, as a hub restart would. The suite then restarts between every
	// write phase and the checks that follow, proving that everything a
	// method reported written survives. Nil for stores without durable
	// state.
	Reopen func(t *testing.T, s store.Store) store.Store
}

// T0 is the suite's fixed start time (UTC, with nanoseconds, to catch
// stores that drop precision).
var T0 = time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)

type suite struct {
	h   Harness
	ctx context.Context
}

// restart reopens s when the harness supports it, else returns s.
func (su suite) restart(t *testing.T, s store.Store) store.Store {
	t.Helper()
	if su.h.Reopen == nil {
		return s
	}
	s2 := su.h.Reopen(t, s)
	t.Cleanup(func() { s2.Close() })
	return s2
}

func (su suite) open(t *testing.T) store.Store {
	t.Helper()
	s := su.h.New(t)
	t.Cleanup(func() { s.Close() })
	return s
}

// Run runs every conformance test against stores from h.
func Run(t *testing.T, h Harness) {
	su := suite{h: h, ctx: t.Context()}
	tests := []struct {
		name string
		fn   func(*testing.T, suite)
	}{
		{"Jobs", testJobs},
		{"JobCopies", testJobCopies},
		{"JobUpdateConcurrent", testJobUpdateConcurrent},
		{"Admissions", testAdmissions},
		{"Answers", testAnswers},
		{"AnswerDroppedWithJob", testAnswerDropped},
		{"Approvals", testApprovals},
		{"Principals", testPrincipals},
		{"Tokens", testTokens},
		{"TokenUseConcurrent", testTokenConcurrent},
		{"Audit", testAudit},
		{"Meta", testMeta},
		{"Closed", testClosed},
		{"Cancelled", testCancelled},
		{"Invalid", testInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, su) })
	}
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if want == nil && err != nil || want != nil && !errors.Is(err, want) {
		t.Fatalf("%s: error %v, want %v", what, err, want)
	}
}

func diff(t *testing.T, what string, want, got any) {
	t.Helper()
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("%s mismatch (-want +got):\n%s", what, d)
	}
}

// FullJob returns a job record with every field set.
func FullJob(id string) store.Job {
	return store.Job{
		ID: id, Principal: "relay-1", Runner: "r1", Tenant: "team-a", Instance: "main",
		Project: 12, GitLabJobID: 9001, Admission: "adm-" + id, Reservation: "res-" + id,
		Placement: "linux", RequestID: "00112233445566778899aabbccddeeff",
		State: store.JobRunning, Revision: 3, Node: "node-1", Stage: "step_script",
		OutputLen: 4096, Cancel: store.CancelGraceful, Result: []byte(`{"state":"success"}`),
		Spec:    []byte(`{"variables":[{"key":"TOKEN","value":"[MASKED]"}],  "x": 1}`),
		Created: T0, Updated: T0.Add(time.Second),
	}
}

// spec: FAIL-19, AUTH-07
func testJobs(t *testing.T, su suite) {
	s := su.open(t)
	ctx := su.ctx
	a, b, c := FullJob("job-b"), FullJob("job-a"), FullJob("job-c")
	c.Settled = true
	for _, j := range []store.Job{a, b, c} {
		wantErr(t, "CreateJob "+j.ID, s.CreateJob(ctx, j), nil)
	}
	wantErr(t, "CreateJob duplicate", s.CreateJob(ctx, a), store.ErrConflict)
	_, err := s.GetJob(ctx, "job-x")
	wantErr(t, "GetJob missing", err, store.ErrNotFound)
	_, err = s.UpdateJob(ctx, "job-x", func(*store.Job) error { return nil })
	wantErr(t, "UpdateJob missing", err, store.ErrNotFound)

	s = su.restart(t, s)
	got, err := s.GetJob(ctx, a.ID)
	wantErr(t, "GetJob", err, nil)
	diff(t, "GetJob", a, got)

	upd, err := s.UpdateJob(ctx, a.ID, func(j *store.Job) error {
		j.Revision++
		j.State = store.JobFinished
		j.Cancel = store.CancelImmediate
		j.Updated = T0.Add(time.Minute)
		return nil
	})
	wantErr(t, "UpdateJob", err, nil)
	want := a
	want.Revision, want.State, want.Cancel, want.Updated = 4, store.JobFinished, store.CancelImmediate, T0.Add(time.Minute)
	diff(t, "UpdateJob result", want, upd)

	boom := errors.New("boom")
	_, err = s.UpdateJob(ctx, a.ID, func(j *store.Job) error { j.Revision = 99; return boom })
	wantErr(t, "UpdateJob fn error", err, boom)
	_, err = s.UpdateJob(ctx, a.ID, func(j *store.Job) error { j.ID = "other"; return nil })
	wantErr(t, "UpdateJob changing ID", err, store.ErrInvalid)

	s = su.restart(t, s)
	got, _ = s.GetJob(ctx, a.ID)
	diff(t, "GetJob after update", want, got)

	all, err := s.ListJobs(ctx, false)
	wantErr(t, "ListJobs", err, nil)
	diff(t, "ListJobs IDs", []string{"job-a", "job-b", "job-c"}, jobIDs(all))
	uns, _ := s.ListJobs(ctx, true)
	diff(t, "ListJobs unsettled IDs", []string{"job-a", "job-b"}, jobIDs(uns))

	wantErr(t, "DeleteJob", s.DeleteJob(ctx, b.ID), nil)
	wantErr(t, "DeleteJob again", s.DeleteJob(ctx, b.ID), store.ErrNotFound)
	s = su.restart(t, s)
	_, err = s.GetJob(ctx, b.ID)
	wantErr(t, "GetJob deleted", err, store.ErrNotFound)
	all, _ = s.ListJobs(ctx, false)
	diff(t, "ListJobs after delete", []string{"job-b", "job-c"}, jobIDs(all))
}

func jobIDs(js []store.Job) []string {
	var out []string
	for _, j := range js {
		out = append(out, j.ID)
	}
	return out
}

// spec: AUTH-07
// The store keeps exactly the bytes it is given: a caller changing its
// slices afterwards, or the slices it got back, changes nothing stored.
func testJobCopies(t *testing.T, su suite) {
	s := su.open(t)
	ctx := su.ctx
	j := FullJob("job-1")
	orig := j.Clone()
	wantErr(t, "CreateJob", s.CreateJob(ctx, j), nil)
	j.Spec[0], j.Result[0] = 'X', 'X'
	got, _ := s.GetJob(ctx, "job-1")
	diff(t, "after caller mutation", orig, got)
	got.Spec[0] = 'Y'
	got2, _ := s.GetJob(ctx, "job-1")
	diff(t, "after result mutation", orig, got2)
	var kept *store.Job
	_, err := s.UpdateJob(ctx, "job-1", func(j *store.Job) error { kept = j; return nil })
	wantErr(t, "UpdateJob", err, nil)
	kept.Spec[0] = 'Z'
	got3, _ := s.GetJob(ctx, "job-1")
	diff(t, "after fn pointer mutation", orig, got3)
}

// UpdateJob is an atomic read-modify-write: concurrent increments are
// never lost.
func testJobUpdateConcurrent(t *testing.T, su suite) {
	s := su.open(t)
	ctx := su.ctx
	j := FullJob("job-1")
	j.Revision = 0
	wantErr(t, "CreateJob", s.CreateJob(ctx, j), nil)
	const workers, each = 4, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for range workers {
		wg.Go(func() {
			for range each {
				if _, err := s.UpdateJob(ctx, "job-1", func(j *store.Job) error { j.Revision++; return nil }); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got, _ := s.GetJob(ctx, "job-1")
	if got.Revision != workers*each {
		t.Fatalf("revision %d after %d increments", got.Revision, workers*each)
	}
}

// spec: FAIL-19
// Claimed admissions survive a restart so the hub can adopt them
// (DECISIONS 6).
func testAdmissions(t *testing.T, su suite) {
	s := su.open(t)
	ctx := su.ctx
	a := store.Admission{ID: "adm-2", Reservation: "res-2", Node: "node-1", Relay: "relay-1", Runner: "r1", Tenant: "team-a", Placement: "linux", ClaimedAt: T0}
	b := a
	b.ID, b.Reservation = "adm-1", "res-1"
	wantErr(t, "PutAdmission", s.PutAdmission(ctx, a), nil)
	wantErr(t, "PutAdmission", s.PutAdmission(ctx, b), nil)
	a.Job = "job-9"
	wantErr(t, "PutAdmission replace", s.PutAdmission(ctx, a), nil)
	s = su.restart(t, s)
	got, err := s.GetAdmission(ctx, "adm-2")
	wantErr(t, "GetAdmission", err, nil)
	diff(t, "GetAdmission", a, got)
	all, _ := s.ListAdmissions(ctx)
	diff(t, "ListAdmissions", []store.Admission{b, a}, all)
	wantErr(t, "DeleteAdmission", s.DeleteAdmission(ctx, "adm-1"), nil)
	wantErr(t, "DeleteAdmission absent", s.DeleteAdmission(ctx, "adm-1"), nil)
	s = su.restart(t, s)
	_, err = s.GetAdmission(ctx, "adm-1")
	wantErr(t, "GetAdmission deleted", err, store.ErrNotFound)
	all, _ = s.ListAdmissions(ctx)
	diff(t, "ListAdmissions after delete", []store.Admission{a}, all)
}

// spec: API-42, API-43
// A request_id's first answer replays for 24 h; a second answer is a
// conflict; after the TTL the lookup says expired (not never-seen) until
// pruned; another principal's request_id is separate.
func testAnswers(t *testing.T, su suite) {
	s := su.open(t)
	ctx := su.ctx
	rid := "0123456789abcdef0123456789abcdef"
	a := store.Answer{Principal: "relay-1", RequestID: rid, BodyHash: store.Sum([]byte(`{"a":1}`)), Status: 201, Body: []byte(`{"id":"job-1"}`), Job: "job-1", Created: T0}
	_, err := s.GetAnswer(ctx, "relay-1", rid, T0)
	wantErr(t, "GetAnswer never seen", err, store.ErrNotFound)
	wantErr(t, "PutAnswer", s.PutAnswer(ctx, a), nil)
	second := a
	second.Status, second.Created = 409, T0.Add(time.Hour)
	wantErr(t, "PutAnswer again", s.PutAnswer(ctx, second), store.ErrConflict)
	other := a
	other.Principal, other.Status = "relay-2", 403
	wantErr(t, "PutAnswer other principal", s.PutAnswer(ctx, other), nil)

	s = su.restart(t, s)
	got, err := s.GetAnswer(ctx, "relay-1", rid, T0.Add(store.AnswerTTL-time.Nanosecond))
	wantErr(t, "GetAnswer within TTL", err, nil)
	diff(t, "GetAnswer", a, got)
	got, _ = s.GetAnswer(ctx, "relay-2", rid, T0)
	if got.Status != 403 {
		t.Fatalf("relay-2's answer status %d, want 403", got.Status)
	}
	got, err = s.GetAnswer(ctx, "relay-1", rid, T0.Add(store.AnswerTTL))
	wantErr(t, "GetAnswer at TTL", err, store.ErrExpired)
	diff(t, "expired answer still returned", a, got)

	// After expiry a new answer may take the request_id.
	fresh := a
	fresh.Created, fresh.Status = T0.Add(store.AnswerTTL+time.Hour), 202
	wantErr(t, "PutAnswer after expiry", s.PutAnswer(ctx, fresh), nil)
	got, err = s.GetAnswer(ctx, "relay-1", rid, fresh.Created)
	wantErr(t, "GetAnswer fresh", err, nil)
	diff(t, "fresh answer", fresh, got)

	n, err := s.PruneAnswers(ctx, T0.Add(time.Minute))
	wantErr(t, "PruneAnswers", err, nil)
	if n != 1 {
		t.Fatalf("PruneAnswers removed %d, want 1 (relay-2's)", n)
	}
	s = su.restart(t, s)
	_, err = s.GetAnswer(ctx, "relay-2", rid, T0)
	wantErr(t, "GetAnswer pruned", err, store.ErrNotFound)
	_, err = s.GetAnswer(ctx, "relay-1", rid, fresh.Created)
	wantErr(t, "GetAnswer unpruned", err, nil)
}

// spec: API-43, API-41
// Once a job leaves the history its request_id answers read as expired
// (410 not_found), never as never-seen (which would create it again).
func testAnswerDropped(t *testing.T, su suite) {
	s := su.open(t)
	ctx := su.ctx
	j := FullJob("job-1")
	wantErr(t, "CreateJob", s.CreateJob(ctx, j), nil)
	a := store.Answer{Principal: "relay-1", RequestID: "aa", Status: 201, Job: "job-1", Created: T0}
	b := store.Answer{Principal: "relay-1", RequestID: "bb", Status: 201, Job: "job-2", Created: T0}
	wantErr(t, "PutAnswer a", s.PutAnswer(ctx, a), nil)
	wantErr(t, "PutAnswer b", s.PutAnswer(ctx, b), nil)
	// Settle keeps the record (API-41): the answer still replays.
	_, err := s.UpdateJob(ctx, "job-1", func(j *store.Job) error { j.Settled = true; return nil })
	wantErr(t, "settle", err, nil)
	_, err = s.GetAnswer(ctx, "relay-1", "aa", T0)
	wantErr(t, "GetAnswer settled job", err, nil)
	wantErr(t, "DeleteJob", s.DeleteJob(ctx, "job-1"), nil)
	s = su.restart(t, s)
	got, err := s.GetAnswer(ctx, "relay-1", "aa", T0)
	wantErr(t, "GetAnswer dropped job", err, store.ErrExpired)
	if !got.Dropped {
		t.Errorf("answer not marked dropped: %+v", got)
	}
	_, err = s.GetAnswer(ctx, "relay-1", "bb", T0)
	wantErr(t, "GetAnswer other job", err, nil)
}

// Approvals per GitLab instance and project (0: the server itself).
func testApprovals(t *testing.T, su suite) {
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

// spec: AUTH-13
// Enrolled principals keep their key; a removed one stays listed, marked.
func testPrincipals(t *testing.T, su suite) {
	s := su.open(t)
	ctx := su.ctx
	key := []byte("0123456789abcdef0123456789abcdef")
	p := store.Principal{ID: "relay-1", Kind: store.KindRelay, PublicKey: key, Name: "gl-relay-a", Created: T0}
	n := store.Principal{ID: "node-1", Kind: store.KindNode, PublicKey: []byte("fedcba9876543210fedcba9876543210"), Name: "n1", Created: T0}
	wantErr(t, "CreatePrincipal", s.CreatePrincipal(ctx, p), nil)
	wantErr(t, "CreatePrincipal", s.CreatePrincipal(ctx, n), nil)
	wantErr(t, "CreatePrincipal duplicate", s.CreatePrincipal(ctx, p), store.ErrConflict)
	key[0] = 'X'
	p.PublicKey = []byte("0123456789abcdef0123456789abcdef")
	s = su.restart(t, s)
	got, err := s.GetPrincipal(ctx, "relay-1")
	wantErr(t, "GetPrincipal", err, nil)
	diff(t, "GetPrincipal", p, got)
	_, err = s.GetPrincipal(ctx, "relay-9")
	wantErr(t, "GetPrincipal unknown", err, store.ErrNotFound)
	wantErr(t, "RemovePrincipal", s.RemovePrincipal(ctx, "relay-1", T0.Add(time.Hour)), nil)
	wantErr(t, "RemovePrincipal again", s.RemovePrincipal(ctx, "relay-1", T0.Add(2*time.Hour)), nil)
	wantErr(t, "RemovePrincipal unknown", s.RemovePrincipal(ctx, "relay-9", T0), store.ErrNotFound)
	s = su.restart(t, s)
	got, _ = s.GetPrincipal(ctx, "relay-1")
	p.Removed, p.RemovedAt = true, T0.Add(time.Hour)
	diff(t, "removed principal", p, got)
	all, _ := s.ListPrincipals(ctx)
	diff(t, "ListPrincipals", []store.Principal{n, p}, all)
}

// One-time enrolment tokens: used once, never after expiry, only for
// their kind; only the hash is kept.
func testTokens(t *testing.T, su suite) {
	s := su.open(t)
	ctx := su.ctx
	h1, h2, h3 := store.Sum([]byte("tok-1")), store.Sum([]byte("tok-2")), store.Sum([]byte("tok-3"))
	t1 := store.Token{Hash: h1, Kind: store.KindRelay, Created: T0, Expires: T0.Add(time.Hour)}
	t2 := store.Token{Hash: h2, Kind: store.KindNode, Created: T0.Add(time.Second), Expires: T0.Add(time.Hour)}
	t3 := store.Token{Hash: h3, Kind: store.KindRelay, Created: T0.Add(2 * time.Second), Expires: T0.Add(time.Minute)}
	for _, tok := range []store.Token{t1, t2, t3} {
		wantErr(t, "CreateToken", s.CreateToken(ctx, tok), nil)
	}
	wantErr(t, "CreateToken duplicate", s.CreateToken(ctx, t1), store.ErrConflict)
	s = su.restart(t, s)

	_, err := s.UseToken(ctx, store.Sum([]byte("nope")), store.KindRelay, "relay-1", T0)
	wantErr(t, "UseToken unknown", err, store.ErrNotFound)
	_, err = s.UseToken(ctx, h2, store.KindRelay, "relay-1", T0)
	wantErr(t, "UseToken other kind", err, store.ErrNotFound)
	_, err = s.UseToken(ctx, h3, store.KindRelay, "relay-1", T0.Add(time.Minute))
	wantErr(t, "UseToken expired", err, store.ErrExpired)
	got, err := s.UseToken(ctx, h1, store.KindRelay, "relay-1", T0.Add(time.Second))
	wantErr(t, "UseToken", err, nil)
	want := t1
	want.Used, want.UsedBy, want.UsedAt = true, "relay-1", T0.Add(time.Second)
	diff(t, "UseToken", want, got)
	s = su.restart(t, s)
	_, err = s.UseToken(ctx, h1, store.KindRelay, "relay-2", T0.Add(2*time.Second))
	wantErr(t, "UseToken again", err, store.ErrConflict)
	all, _ := s.ListTokens(ctx)
	diff(t, "ListTokens", []store.Token{want, t2, t3}, all)
}

// A token used concurrently enrolls exactly one principal.
func testTokenConcurrent(t *testing.T, su suite) {
	s := su.open(t)
	ctx := su.ctx
	h := store.Sum([]byte("tok"))
	wantErr(t, "CreateToken", s.CreateToken(ctx, store.Token{Hash: h, Kind: store.KindNode, Created: T0, Expires: T0.Add(time.Hour)}), nil)
	var wg sync.WaitGroup
	results := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			_, err := s.UseToken(ctx, h, store.KindNode, fmt.Sprintf("node-%d", i), T0)
			results <- err
		})
	}
	wg.Wait()
	close(results)
	ok := 0
	for err := range results {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, store.ErrConflict):
			t.Fatalf("UseToken: %v", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d concurrent uses succeeded, want 1", ok)
	}
}

// The audit log is append-only with sequence numbers never reused.
func testAudit(t *testing.T, su suite) {
	s := su.open(t)
	ctx := su.ctx
	var want []store.AuditEntry
	for i := range 5 {
		e, err := s.AppendAudit(ctx, store.AuditEntry{Time: T0.Add(time.Duration(i) * time.Second), Actor: "ops", Action: "relay.remove", Subject: fmt.Sprint("relay-", i), Detail: "d"})
		wantErr(t, "AppendAudit", err, nil)
		if e.Seq != uint64(i+1) {
			t.Fatalf("seq %d, want %d", e.Seq, i+1)
		}
		want = append([]store.AuditEntry{e}, want...)
	}
	s = su.restart(t, s)
	got, _ := s.ListAudit(ctx, 3)
	diff(t, "ListAudit(3)", want[:3], got)
	got, _ = s.ListAudit(ctx, 0)
	diff(t, "ListAudit(0)", want, got)
	e, _ := s.AppendAudit(ctx, store.AuditEntry{Time: T0, Actor: "hub", Action: "start"})
	if e.Seq != 6 {
		t.Fatalf("seq after restart %d, want 6", e.Seq)
	}
}

// Meta values, get-or-create of the scheduler seed included (STYLE C2).
func testMeta(t *testing.T, su suite) {
	s := su.open(t)
	ctx := su.ctx
	_, err := s.GetMeta(ctx, store.MetaSchedulerSeed)
	wantErr(t, "GetMeta unset", err, store.ErrNotFound)
	got, err := s.InitMeta(ctx, store.MetaSchedulerSeed, []byte{1, 2, 3, 4, 5, 6, 7, 8})
	wantErr(t, "InitMeta", err, nil)
	diff(t, "InitMeta first", []byte{1, 2, 3, 4, 5, 6, 7, 8}, got)
	s = su.restart(t, s)
	got, _ = s.InitMeta(ctx, store.MetaSchedulerSeed, []byte{9})
	diff(t, "InitMeta keeps first", []byte{1, 2, 3, 4, 5, 6, 7, 8}, got)
	wantErr(t, "PutMeta", s.PutMeta(ctx, "k", []byte("v1")), nil)
	wantErr(t, "PutMeta", s.PutMeta(ctx, "k", []byte("v2")), nil)
	s = su.restart(t, s)
	got, _ = s.GetMeta(ctx, "k")
	diff(t, "GetMeta", []byte("v2"), got)
}

// After Close every method fails with ErrClosed.
func testClosed(t *testing.T, su suite) {
	s := su.h.New(t)
	wantErr(t, "Close", s.Close(), nil)
	wantErr(t, "Close twice", s.Close(), nil)
	ctx := su.ctx
	_, err := s.GetJob(ctx, "x")
	wantErr(t, "GetJob", err, store.ErrClosed)
	wantErr(t, "CreateJob", s.CreateJob(ctx, FullJob("x")), store.ErrClosed)
	_, err = s.ListAudit(ctx, 1)
	wantErr(t, "ListAudit", err, store.ErrClosed)
	wantErr(t, "PutMeta", s.PutMeta(ctx, "k", nil), store.ErrClosed)
}

// A cancelled context stops a call before it does anything.
func testCancelled(t *testing.T, su suite) {
	s := su.open(t)
	ctx, cancel := context.WithCancel(su.ctx)
	cancel()
	wantErr(t, "CreateJob", s.CreateJob(ctx, FullJob("x")), context.Canceled)
	_, err := s.GetJob(su.ctx, "x")
	wantErr(t, "GetJob", err, store.ErrNotFound)
}

// Records without their key fields are refused.
func testInvalid(t *testing.T, su suite) {
	s := su.open(t)
	ctx := su.ctx
	wantErr(t, "CreateJob no ID", s.CreateJob(ctx, store.Job{}), store.ErrInvalid)
	wantErr(t, "PutAdmission no ID", s.PutAdmission(ctx, store.Admission{}), store.ErrInvalid)
	wantErr(t, "PutAnswer no time", s.PutAnswer(ctx, store.Answer{Principal: "p", RequestID: "r"}), store.ErrInvalid)
	wantErr(t, "PutApproval no instance", s.PutApproval(ctx, store.Approval{Project: 1}), store.ErrInvalid)
	wantErr(t, "CreatePrincipal no ID", s.CreatePrincipal(ctx, store.Principal{}), store.ErrInvalid)
	wantErr(t, "CreateToken no hash", s.CreateToken(ctx, store.Token{}), store.ErrInvalid)
	wantErr(t, "PutMeta no key", s.PutMeta(ctx, "", nil), store.ErrInvalid)
}
