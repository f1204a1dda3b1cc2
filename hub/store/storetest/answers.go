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
