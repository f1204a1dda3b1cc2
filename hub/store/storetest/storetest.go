// Package storetest is the conformance suite every [store.Store]
// implementation passes (STYLE C8): memstore, boltstore and pgstore, and
// the durable ones closed and reopened between writing and reading
// (restart, FAIL-19). Each role of the store has its own suite
// ([RunRecords], [RunAnswers], [RunApprovals], [RunPrincipals],
// [RunAudit], [RunMeta]), so a new backend can implement and prove the
// roles one at a time; [Run] runs them all and the tests that span roles.
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

// The stores of one role: the role's methods and Close, all a role's
// suite asks of a backend that implements that role alone.
type (
	RecordsStore interface {
		store.Records
		Close() error
	}
	AnswersStore interface {
		store.Answers
		Close() error
	}
	ApprovalsStore interface {
		store.Approvals
		Close() error
	}
	PrincipalsStore interface {
		store.Principals
		Close() error
	}
	AuditStore interface {
		store.Audit
		Close() error
	}
	MetaStore interface {
		store.Meta
		Close() error
	}
)

// RoleHarness is [Harness] for the stores of one role.
type RoleHarness[S interface{ Close() error }] struct {
	New    func(t *testing.T) S
	Reopen func(t *testing.T, s S) S
}

// T0 is the suite's fixed start time (UTC, with nanoseconds, to catch
// stores that drop precision).
var T0 = time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)

type suite[S interface{ Close() error }] struct {
	h   RoleHarness[S]
	ctx context.Context
}

// restart reopens s when the harness supports it, else returns s.
func (su suite[S]) restart(t *testing.T, s S) S {
	t.Helper()
	if su.h.Reopen == nil {
		return s
	}
	s2 := su.h.Reopen(t, s)
	t.Cleanup(func() { s2.Close() })
	return s2
}

func (su suite[S]) open(t *testing.T) S {
	t.Helper()
	s := su.h.New(t)
	t.Cleanup(func() { s.Close() })
	return s
}

type roleTest[S interface{ Close() error }] struct {
	name string
	fn   func(*testing.T, suite[S])
}

func runRole[S interface{ Close() error }](t *testing.T, h RoleHarness[S], tests []roleTest[S]) {
	su := suite[S]{h: h, ctx: t.Context()}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, su) })
	}
}

// RunRecords runs the conformance tests of [store.Records].
func RunRecords(t *testing.T, h RoleHarness[RecordsStore]) {
	runRole(t, h, []roleTest[RecordsStore]{{"Jobs", testJobs}, {"JobCopies", testJobCopies},
		{"JobSave", testJobSave}, {"JobUpdateConcurrent", testJobUpdateConcurrent}, {"Admissions", testAdmissions}, {"RecordsInvalid", testRecordsInvalid}})
}

// RunAnswers runs the conformance tests of [store.Answers].
func RunAnswers(t *testing.T, h RoleHarness[AnswersStore]) {
	runRole(t, h, []roleTest[AnswersStore]{{"Answers", testAnswers}, {"AnswersInvalid", testAnswersInvalid}})
}

// RunApprovals runs the conformance tests of [store.Approvals].
func RunApprovals(t *testing.T, h RoleHarness[ApprovalsStore]) {
	runRole(t, h, []roleTest[ApprovalsStore]{{"Approvals", testApprovals}, {"ApprovalsInvalid", testApprovalsInvalid}})
}

// RunPrincipals runs the conformance tests of [store.Principals].
func RunPrincipals(t *testing.T, h RoleHarness[PrincipalsStore]) {
	runRole(t, h, []roleTest[PrincipalsStore]{{"Principals", testPrincipals}, {"Tokens", testTokens},
		{"TokenUseConcurrent", testTokenConcurrent}, {"PrincipalsInvalid", testPrincipalsInvalid}})
}

// RunAudit runs the conformance tests of [store.Audit].
func RunAudit(t *testing.T, h RoleHarness[AuditStore]) {
	runRole(t, h, []roleTest[AuditStore]{{"Audit", testAudit}})
}

// RunMeta runs the conformance tests of [store.Meta].
func RunMeta(t *testing.T, h RoleHarness[MetaStore]) {
	runRole(t, h, []roleTest[MetaStore]{{"Meta", testMeta}, {"MetaInvalid", testMetaInvalid}})
}

// Run runs every role's conformance tests against stores from h, and
// those that span roles (a job created with its answer; an answer whose
// job was deleted; Close; a cancelled context).
func Run(t *testing.T, h Harness) {
	RunRecords(t, roleOf[RecordsStore](h))
	RunAnswers(t, roleOf[AnswersStore](h))
	RunApprovals(t, roleOf[ApprovalsStore](h))
	RunPrincipals(t, roleOf[PrincipalsStore](h))
	RunAudit(t, roleOf[AuditStore](h))
	RunMeta(t, roleOf[MetaStore](h))
	runRole(t, roleOf[store.Store](h), []roleTest[store.Store]{{"AnswerDroppedWithJob", testAnswerDropped},
		{"JobAnswered", testJobAnswered}, {"Closed", testClosed}, {"Cancelled", testCancelled}})
}

// roleOf narrows a whole store's harness to one role.
func roleOf[S interface{ Close() error }](h Harness) RoleHarness[S] {
	rh := RoleHarness[S]{New: func(t *testing.T) S { return any(h.New(t)).(S) }}
	if h.Reopen != nil {
		rh.Reopen = func(t *testing.T, s S) S { return any(h.Reopen(t, any(s).(store.Store))).(S) }
	}
	return rh
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

// spec: API-43, API-41
// Once a job leaves the history its request_id answers read as expired
// (410 not_found), never as never-seen (which would create it again).
func testAnswerDropped(t *testing.T, su suite[store.Store]) {
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

// After Close every method fails with ErrClosed.
func testClosed(t *testing.T, su suite[store.Store]) {
	s := su.h.New(t)
	wantErr(t, "Close", s.Close(), nil)
	wantErr(t, "Close twice", s.Close(), nil)
	ctx := su.ctx
	_, err := s.GetJob(ctx, "x")
	wantErr(t, "GetJob", err, store.ErrClosed)
	wantErr(t, "CreateJob", s.CreateJob(ctx, FullJob("x")), store.ErrClosed)
	wantErr(t, "CreateJobAnswered", s.CreateJobAnswered(ctx, FullJob("x"),
		store.Answer{Principal: "p", RequestID: "r", Job: "x", Created: T0}), store.ErrClosed)
	_, err = s.ListAudit(ctx, 1)
	wantErr(t, "ListAudit", err, store.ErrClosed)
	wantErr(t, "PutMeta", s.PutMeta(ctx, "k", nil), store.ErrClosed)
}

// A cancelled context stops a call before it does anything.
func testCancelled(t *testing.T, su suite[store.Store]) {
	s := su.open(t)
	ctx, cancel := context.WithCancel(su.ctx)
	cancel()
	wantErr(t, "CreateJob", s.CreateJob(ctx, FullJob("x")), context.Canceled)
	_, err := s.GetJob(su.ctx, "x")
	wantErr(t, "GetJob", err, store.ErrNotFound)
}
