package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/store"
)

// The audit log is append-only with sequence numbers never reused.
func testAudit(t *testing.T, su suite[AuditStore]) {
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
func testMeta(t *testing.T, su suite[MetaStore]) {
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

// A meta value without a key is refused.
func testMetaInvalid(t *testing.T, su suite[MetaStore]) {
	s := su.open(t)
	wantErr(t, "PutMeta no key", s.PutMeta(su.ctx, "", nil), store.ErrInvalid)
}
