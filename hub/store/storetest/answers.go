package storetest

import (
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/store"
)

// spec: API-42, API-43
// A request_id's first answer replays for 24 h; a second answer is a
// conflict; after the TTL the lookup says expired (not never-seen) until
// pruned; another principal's request_id is separate.
func testAnswers(t *testing.T, su suite[AnswersStore]) {
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

// An answer without its creation time is refused.
func testAnswersInvalid(t *testing.T, su suite[AnswersStore]) {
	s := su.open(t)
	wantErr(t, "PutAnswer no time", s.PutAnswer(su.ctx, store.Answer{Principal: "p", RequestID: "r"}), store.ErrInvalid)
}

// spec: API-42, API-43
// A job created with its request_id answer is stored with it in one
// write: after CreateJobAnswered both are there, across a restart, and
// when it fails neither is. Each conflict below is one that an
// implementation writing the two separately (in either order) would
// leave half done: the job without its answer (a retry after a crash
// there finds no answer and creates a second job) or the answer without
// its job (a retry replays a job that never existed).
func testJobAnswered(t *testing.T, su suite[store.Store]) {
	s := su.open(t)
	ctx := su.ctx
	const rid, rid2 = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	j := FullJob("job-1")
	a := store.Answer{Principal: "relay-1", RequestID: rid, BodyHash: store.Sum([]byte(`{"a":1}`)), Status: 201,
		Body: []byte(`{"id":"job-1"}` + "\n"), Job: "job-1", Created: T0}
	wantErr(t, "CreateJobAnswered", s.CreateJobAnswered(ctx, j, a), nil)
	s = su.restart(t, s)
	gotJob, err := s.GetJob(ctx, "job-1")
	wantErr(t, "GetJob", err, nil)
	diff(t, "job", j, gotJob)
	got, err := s.GetAnswer(ctx, "relay-1", rid, T0)
	wantErr(t, "GetAnswer", err, nil)
	diff(t, "answer", a, got)

	// The request_id is taken: the second job is not stored either.
	j2, a2 := FullJob("job-2"), a
	a2.Job = "job-2"
	wantErr(t, "CreateJobAnswered same request_id", s.CreateJobAnswered(ctx, j2, a2), store.ErrConflict)
	_, err = s.GetJob(ctx, "job-2")
	wantErr(t, "GetJob of the refused create", err, store.ErrNotFound)
	// The job ID is taken: the second request_id's answer is not stored.
	a3 := a
	a3.RequestID = rid2
	wantErr(t, "CreateJobAnswered same job", s.CreateJobAnswered(ctx, j, a3), store.ErrConflict)
	_, err = s.GetAnswer(ctx, "relay-1", rid2, T0)
	wantErr(t, "GetAnswer of the refused create", err, store.ErrNotFound)
	// An answer naming another job is refused whole.
	j4, a4 := FullJob("job-4"), a
	a4.RequestID = rid2
	wantErr(t, "CreateJobAnswered answer of another job", s.CreateJobAnswered(ctx, j4, a4), store.ErrInvalid)
	_, err = s.GetJob(ctx, "job-4")
	wantErr(t, "GetJob of the invalid create", err, store.ErrNotFound)

	// Past its TTL the request_id may make a new job, as with PutAnswer.
	j5, a5 := FullJob("job-5"), a
	a5.Job, a5.Created = "job-5", T0.Add(store.AnswerTTL)
	wantErr(t, "CreateJobAnswered after expiry", s.CreateJobAnswered(ctx, j5, a5), nil)
	s = su.restart(t, s)
	got, err = s.GetAnswer(ctx, "relay-1", rid, a5.Created)
	wantErr(t, "GetAnswer after expiry", err, nil)
	diff(t, "answer after expiry", a5, got)
	// The answer is tied to its job as PutAnswer's is (API-43).
	wantErr(t, "DeleteJob", s.DeleteJob(ctx, "job-5"), nil)
	got, err = s.GetAnswer(ctx, "relay-1", rid, a5.Created)
	wantErr(t, "GetAnswer of a deleted job", err, store.ErrExpired)
	if !got.Dropped {
		t.Errorf("answer of the deleted job not marked dropped: %+v", got)
	}
}
