package boltstore_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/hub/store/boltstore"
	"github.com/vk-ci/vk/hub/store/memstore"
	"github.com/vk-ci/vk/hub/store/storetest"
	"pgregory.net/rapid"
)

func errClass(err error) string {
	for _, s := range []error{store.ErrNotFound, store.ErrConflict, store.ErrExpired, store.ErrInvalid, store.ErrClosed} {
		if errors.Is(err, s) {
			return s.Error()
		}
	}
	if err != nil {
		return "other: " + err.Error()
	}
	return "ok"
}

// spec: API-42, API-43, FAIL-19
// Property: over any sequence of job, request_id-answer and token
// operations, with restarts of the bolt store in between, boltstore answers
// exactly as memstore (the model) does.
func TestMatchesMemstore(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		path := filepath.Join(t.TempDir(), rapid.StringMatching(`[a-z]{12}`).Draw(rt, "file")+".db")
		bs, err := boltstore.Open(ctx, path)
		if err != nil {
			rt.Fatal(err)
		}
		defer func() { bs.Close() }()
		var b store.Store = bs
		m := memstore.New()
		jobID := rapid.SampledFrom([]string{"j1", "j2", "j3"})
		principal := rapid.SampledFrom([]string{"relay-1", "relay-2"})
		rid := rapid.SampledFrom([]string{"r1", "r2"})
		tok := rapid.SampledFrom([]string{"t1", "t2"})
		kind := rapid.SampledFrom([]store.PrincipalKind{store.KindRelay, store.KindNode})
		at := func(label string) time.Time {
			return storetest.T0.Add(time.Duration(rapid.IntRange(0, 60).Draw(rt, label)) * time.Hour)
		}
		same := func(op string, e1, e2 error, v1, v2 any) {
			if errClass(e1) != errClass(e2) {
				rt.Fatalf("%s: bolt error %v, mem error %v", op, e1, e2)
			}
			if d := cmp.Diff(v2, v1); d != "" {
				rt.Fatalf("%s: (-mem +bolt)\n%s", op, d)
			}
		}
		for range rapid.IntRange(1, 40).Draw(rt, "ops") {
			switch rapid.IntRange(0, 10).Draw(rt, "op") {
			case 0:
				j := storetest.FullJob(jobID.Draw(rt, "id"))
				same("CreateJob", b.CreateJob(ctx, j), m.CreateJob(ctx, j), nil, nil)
			case 1:
				id := jobID.Draw(rt, "id")
				settle := rapid.Bool().Draw(rt, "settle")
				fn := func(j *store.Job) error { j.Revision++; j.Settled = settle; return nil }
				v1, e1 := b.UpdateJob(ctx, id, fn)
				v2, e2 := m.UpdateJob(ctx, id, fn)
				same("UpdateJob", e1, e2, v1, v2)
			case 2:
				id := jobID.Draw(rt, "id")
				same("DeleteJob", b.DeleteJob(ctx, id), m.DeleteJob(ctx, id), nil, nil)
			case 3:
				v1, e1 := b.ListJobs(ctx, true)
				v2, e2 := m.ListJobs(ctx, true)
				same("ListJobs", e1, e2, v1, v2)
			case 4:
				a := store.Answer{Principal: principal.Draw(rt, "p"), RequestID: rid.Draw(rt, "rid"), Status: 201,
					Body: []byte(`{}`), Job: jobID.Draw(rt, "job"), Created: at("created")}
				same("PutAnswer", b.PutAnswer(ctx, a), m.PutAnswer(ctx, a), nil, nil)
			case 5:
				p, r, now := principal.Draw(rt, "p"), rid.Draw(rt, "rid"), at("now")
				v1, e1 := b.GetAnswer(ctx, p, r, now)
				v2, e2 := m.GetAnswer(ctx, p, r, now)
				same("GetAnswer", e1, e2, v1, v2)
			case 6:
				before := at("before")
				v1, e1 := b.PruneAnswers(ctx, before)
				v2, e2 := m.PruneAnswers(ctx, before)
				same("PruneAnswers", e1, e2, v1, v2)
			case 7:
				tk := store.Token{Hash: store.Sum([]byte(tok.Draw(rt, "tok"))), Kind: kind.Draw(rt, "kind"), Created: storetest.T0, Expires: at("expires")}
				same("CreateToken", b.CreateToken(ctx, tk), m.CreateToken(ctx, tk), nil, nil)
			case 8:
				h, k, now := store.Sum([]byte(tok.Draw(rt, "tok"))), kind.Draw(rt, "kind"), at("now")
				v1, e1 := b.UseToken(ctx, h, k, "x", now)
				v2, e2 := m.UseToken(ctx, h, k, "x", now)
				same("UseToken", e1, e2, v1, v2)
			case 9:
				e := store.AuditEntry{Time: at("t"), Actor: "a", Action: "x"}
				v1, e1 := b.AppendAudit(ctx, e)
				v2, e2 := m.AppendAudit(ctx, e)
				same("AppendAudit", e1, e2, v1, v2)
			case 10:
				if err := b.Close(); err != nil {
					rt.Fatal(err)
				}
				if bs, err = boltstore.Open(ctx, path); err != nil {
					rt.Fatal(err)
				}
				b = bs
			}
		}
	})
}
