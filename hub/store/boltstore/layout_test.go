package boltstore

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/hub/store/storetest"
	bolt "go.etcd.io/bbolt"
)

var rewrite = flag.Bool("rewrite", false, "rewrite testdata/layout.golden from this package's writes")

// layoutFixture writes one record of every kind (and the edits the
// methods make: an update, a dropped answer, a used token, a removed
// principal) through the public API.
func layoutFixture(t *testing.T, s *Store) {
	t.Helper()
	ctx := t.Context()
	j := storetest.FullJob("job-1")
	must(t, s.CreateJob(ctx, j))
	must(t, s.CreateJob(ctx, storetest.FullJob("job-2")))
	_, err := s.UpdateJob(ctx, "job-1", func(j *store.Job) error { j.Revision++; j.Settled = true; return nil })
	must(t, err)
	must(t, s.PutAdmission(ctx, store.Admission{ID: "adm-1", Reservation: "res-1", Node: "node-1", Relay: "relay-1", Runner: "r1", Job: "job-1", ClaimedAt: storetest.T0}))
	must(t, s.PutAnswer(ctx, store.Answer{Principal: "relay-1", RequestID: "rq-1", BodyHash: store.Sum([]byte("b")), Status: 201, Body: []byte(`{"id":"job-2"}`), Job: "job-2", Created: storetest.T0}))
	must(t, s.PutAnswer(ctx, store.Answer{Principal: "relay-1", RequestID: "rq-2", Status: 409, Created: storetest.T0}))
	must(t, s.PutAnswer(ctx, store.Answer{Principal: "relay-1", RequestID: "rq-3", Status: 201, Job: "job-1", Created: storetest.T0}))
	must(t, s.DeleteJob(ctx, "job-2")) // drops rq-1 and its index entry
	must(t, s.PutApproval(ctx, store.Approval{Instance: "main", Project: -3, Path: "g/p", State: store.ApprovalApproved, By: "ops", Updated: storetest.T0}))
	_, _, err = s.CreateApproval(ctx, store.Approval{Instance: "main", Project: 0, State: store.ApprovalPending, Updated: storetest.T0})
	must(t, err)
	must(t, s.CreatePrincipal(ctx, store.Principal{ID: "node-1", Kind: store.KindNode, PublicKey: []byte{1, 2, 3}, Name: "n", Created: storetest.T0}))
	must(t, s.RemovePrincipal(ctx, "node-1", storetest.T0.Add(time.Hour)))
	must(t, s.CreateToken(ctx, store.Token{Hash: store.Sum([]byte("tok")), Kind: store.KindNode, Created: storetest.T0, Expires: storetest.T0.Add(time.Hour)}))
	_, err = s.UseToken(ctx, store.Sum([]byte("tok")), store.KindNode, "node-1", storetest.T0.Add(time.Minute))
	must(t, err)
	_, err = s.AppendAudit(ctx, store.AuditEntry{Time: storetest.T0, Actor: "ops", Action: "node.remove", Subject: "node-1"})
	must(t, err)
	must(t, s.PutMeta(ctx, store.MetaSchedulerSeed, []byte{0, 0xff, 7}))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// dump renders every bucket of the file, key by key, as quoted Go strings
// ("bucket" "key" "value"), after the bucket's sequence number when it
// has one ("bucket" sequence N).
func dump(t *testing.T, db *bolt.DB) string {
	t.Helper()
	var b strings.Builder
	err := db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, bkt *bolt.Bucket) error {
			if seq := bkt.Sequence(); seq != 0 {
				fmt.Fprintf(&b, "%q sequence %d\n", name, seq)
			}
			return bkt.ForEach(func(k, v []byte) error {
				fmt.Fprintf(&b, "%q %q %q\n", name, k, v)
				return nil
			})
		})
	})
	must(t, err)
	return b.String()
}

// spec: FAIL-19
// A hub upgraded in place reads its old file: the keys and the JSON this
// package writes are pinned byte for byte (testdata/layout.golden was
// written by the boltstore before its record plumbing was folded into
// helpers), and a file holding exactly those bytes reads back as the
// records that were written.
func TestLayoutGolden(t *testing.T) {
	golden := filepath.Join("testdata", "layout.golden")
	dir := t.TempDir()
	s, err := Open(t.Context(), filepath.Join(dir, "written.db"))
	must(t, err)
	defer s.Close()
	layoutFixture(t, s)
	got := dump(t, s.db)
	if *rewrite {
		must(t, os.WriteFile(golden, []byte(got), 0o644))
	}
	want, err := os.ReadFile(golden)
	must(t, err)
	if d := cmp.Diff(string(want), got); d != "" {
		t.Fatalf("stored bytes differ from %s (-want +got):\n%s", golden, d)
	}

	// The golden bytes, put into a fresh file by bbolt alone, read back
	// as what the fixture wrote.
	old := filepath.Join(dir, "old.db")
	db, err := bolt.Open(old, 0o600, nil)
	must(t, err)
	err = db.Update(func(tx *bolt.Tx) error {
		for _, line := range strings.Split(strings.TrimSpace(string(want)), "\n") {
			var name, k, v string
			var seq uint64
			if _, err := fmt.Sscanf(line, "%q sequence %d", &name, &seq); err == nil {
				b, err := tx.CreateBucketIfNotExists([]byte(name))
				if err != nil {
					return err
				}
				if err := b.SetSequence(seq); err != nil {
					return err
				}
				continue
			}
			if _, err := fmt.Sscanf(line, "%q %q %q", &name, &k, &v); err != nil {
				return fmt.Errorf("golden line %q: %w", line, err)
			}
			b, err := tx.CreateBucketIfNotExists([]byte(name))
			if err != nil {
				return err
			}
			if err := b.Put([]byte(k), []byte(v)); err != nil {
				return err
			}
		}
		return nil
	})
	must(t, err)
	must(t, db.Close())
	r, err := Open(t.Context(), old)
	must(t, err)
	defer r.Close()
	compareAll(t, s, r)
}

// compareAll fails unless every read method answers the same from a and b.
func compareAll(t *testing.T, a, b *Store) {
	t.Helper()
	ctx := t.Context()
	reads := map[string]func(s *Store) (any, error){
		"ListJobs":       func(s *Store) (any, error) { return s.ListJobs(ctx, false) },
		"GetJob":         func(s *Store) (any, error) { return s.GetJob(ctx, "job-1") },
		"ListAdmissions": func(s *Store) (any, error) { return s.ListAdmissions(ctx) },
		"GetAnswer rq-1": func(s *Store) (any, error) { return s.GetAnswer(ctx, "relay-1", "rq-1", storetest.T0) },
		"GetAnswer rq-2": func(s *Store) (any, error) { return s.GetAnswer(ctx, "relay-1", "rq-2", storetest.T0) },
		"ListApprovals":  func(s *Store) (any, error) { return s.ListApprovals(ctx) },
		"ListPrincipals": func(s *Store) (any, error) { return s.ListPrincipals(ctx) },
		"ListTokens":     func(s *Store) (any, error) { return s.ListTokens(ctx) },
		"ListAudit":      func(s *Store) (any, error) { return s.ListAudit(ctx, 0) },
		"GetMeta":        func(s *Store) (any, error) { return s.GetMeta(ctx, store.MetaSchedulerSeed) },
	}
	for name, read := range reads {
		va, ea := read(a)
		vb, eb := read(b)
		if fmt.Sprint(ea) != fmt.Sprint(eb) {
			t.Errorf("%s: error %v from the written file, %v from the golden one", name, ea, eb)
		}
		if d := cmp.Diff(va, vb); d != "" {
			t.Errorf("%s (-written +golden):\n%s", name, d)
		}
		if reflect.ValueOf(va).IsZero() {
			t.Errorf("%s read nothing: the comparison proves nothing", name)
		}
	}
	// The fixture's next audit sequence number continues the old file's.
	e, err := b.AppendAudit(ctx, store.AuditEntry{Time: storetest.T0, Actor: "a", Action: "x"})
	if err != nil || e.Seq != 2 {
		t.Errorf("AppendAudit on the golden file = seq %d, %v; want seq 2", e.Seq, err)
	}
}

// The decode and lookup errors, byte for byte, for a record of each kind
// that does not decode: what an operator greps for in a hub's log must
// not change with the code's shape.
func TestErrorTexts(t *testing.T) {
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "hub.db"))
	must(t, err)
	defer s.Close()
	ctx := t.Context()
	tokHash := store.Sum([]byte("tok"))
	err = s.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bktJobs).Put([]byte("aaa"), []byte(`{"id":"aaa"}`)); err != nil {
			return err
		}
		for _, kv := range []struct{ bkt, k []byte }{
			{bktJobs, []byte("bad")},
			{bktAdmissions, []byte("bad")},
			{bktAnswers, key("p", "bad")},
			{bktApprovals, approvalKey("bad", 1)},
			{bktPrincipals, []byte("bad")},
			{bktTokens, tokHash[:]},
			{bktAudit, []byte{0, 0, 0, 0, 0, 0, 0, 1}},
		} {
			if err := tx.Bucket(kv.bkt).Put(kv.k, []byte("{")); err != nil {
				return err
			}
		}
		return nil
	})
	must(t, err)
	const eof = "unexpected end of JSON input"
	tests := []struct {
		name string
		call func() error
		want string
	}{
		{"GetJob", func() error { _, err := s.GetJob(ctx, "bad"); return err }, `boltstore: decode *store.Job at "bad": ` + eof},
		{"GetJob missing", func() error { _, err := s.GetJob(ctx, "none"); return err }, "boltstore: job none: store: not found"},
		{"UpdateJob", func() error {
			_, err := s.UpdateJob(ctx, "bad", func(*store.Job) error { return nil })
			return err
		}, `boltstore: decode *store.Job at "bad": ` + eof},
		{"ListJobs", func() error { _, err := s.ListJobs(ctx, false); return err }, `boltstore: decode job "bad": ` + eof},
		{"CreateJob taken", func() error { return s.CreateJob(ctx, store.Job{ID: "bad"}) }, "boltstore: job bad exists: store: conflict"},
		{"GetAdmission", func() error { _, err := s.GetAdmission(ctx, "bad"); return err }, `boltstore: decode *store.Admission at "bad": ` + eof},
		{"ListAdmissions", func() error { _, err := s.ListAdmissions(ctx); return err }, `boltstore: decode admission "bad": ` + eof},
		{"GetAnswer", func() error { _, err := s.GetAnswer(ctx, "p", "bad", storetest.T0); return err }, `boltstore: decode *store.Answer at "p\x00bad": ` + eof},
		{"GetAnswer missing", func() error { _, err := s.GetAnswer(ctx, "p", "none", storetest.T0); return err }, "boltstore: answer p/none: store: not found"},
		{"PruneAnswers", func() error { _, err := s.PruneAnswers(ctx, storetest.T0); return err }, `boltstore: decode answer "p\x00bad": ` + eof},
		{"GetApproval", func() error { _, err := s.GetApproval(ctx, "bad", 1); return err }, `boltstore: decode *store.Approval at "bad\x00\x80\x00\x00\x00\x00\x00\x00\x01": ` + eof},
		{"CreateApproval", func() error {
			_, _, err := s.CreateApproval(ctx, store.Approval{Instance: "bad", Project: 1})
			return err
		}, `boltstore: decode *store.Approval at "bad\x00\x80\x00\x00\x00\x00\x00\x00\x01": ` + eof},
		{"GetApproval missing", func() error { _, err := s.GetApproval(ctx, "none", -2); return err }, "boltstore: approval none/-2: store: not found"},
		{"ListApprovals", func() error { _, err := s.ListApprovals(ctx); return err }, `boltstore: decode approval "bad\x00\x80\x00\x00\x00\x00\x00\x00\x01": ` + eof},
		{"GetPrincipal", func() error { _, err := s.GetPrincipal(ctx, "bad"); return err }, `boltstore: decode *store.Principal at "bad": ` + eof},
		{"RemovePrincipal missing", func() error { return s.RemovePrincipal(ctx, "none", storetest.T0) }, "boltstore: principal none: store: not found"},
		{"CreatePrincipal taken", func() error { return s.CreatePrincipal(ctx, store.Principal{ID: "bad"}) }, "boltstore: principal bad exists: store: conflict"},
		{"ListPrincipals", func() error { _, err := s.ListPrincipals(ctx); return err }, `boltstore: decode principal "bad": ` + eof},
		{"UseToken", func() error { _, err := s.UseToken(ctx, tokHash, store.KindNode, "x", storetest.T0); return err }, fmt.Sprintf(`boltstore: decode *store.Token at %q: `, tokHash[:]) + eof},
		{"UseToken missing", func() error {
			_, err := s.UseToken(ctx, store.Sum([]byte("none")), store.KindNode, "x", storetest.T0)
			return err
		}, "boltstore: token: store: not found"},
		{"CreateToken taken", func() error { return s.CreateToken(ctx, store.Token{Hash: tokHash}) }, "boltstore: token exists: store: conflict"},
		{"ListTokens", func() error { _, err := s.ListTokens(ctx); return err }, "boltstore: decode token: " + eof},
		{"ListAudit", func() error { _, err := s.ListAudit(ctx, 0); return err }, "boltstore: decode audit entry: " + eof},
		{"GetMeta missing", func() error { _, err := s.GetMeta(ctx, "none"); return err }, `boltstore: meta "none": store: not found`},
	}
	for _, tt := range tests {
		err := tt.call()
		if err == nil || err.Error() != tt.want {
			t.Errorf("%s error = %q, want %q", tt.name, err, tt.want)
		}
	}
	// A corrupt record leaves no partial list behind (the valid "aaa"
	// before it is not returned).
	if got, err := s.ListJobs(ctx, false); got != nil || err == nil {
		t.Errorf("ListJobs over a corrupt record = %v, %v; want nil and the error", got, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetJob(context.Background(), "bad"); err == nil || err.Error() != "boltstore: store: closed" {
		t.Errorf("GetJob after Close = %v, want boltstore: store: closed", err)
	}
}
