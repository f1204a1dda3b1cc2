package boltstore

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vk-ci/vk/hub/store"
	bolt "go.etcd.io/bbolt"
	bolterr "go.etcd.io/bbolt/errors"
)

// The helpers below carry every method's plumbing; the conformance suite
// (boltstore_test.go) covers them through the methods, these tests pin
// their own contracts.

type rec struct {
	N int    `json:"n"`
	S string `json:"s,omitempty"`
}

var bktTest = []byte("test")

// testStore is an open store with an extra bucket "test" holding the
// given raw records.
func testStore(t *testing.T, raw map[string]string) *Store {
	t.Helper()
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "hub.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	err = s.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket(bktTest)
		if err != nil {
			return err
		}
		for k, v := range raw {
			if err := b.Put([]byte(k), []byte(v)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func rawAt(t *testing.T, s *Store, k string) []byte {
	t.Helper()
	var out []byte
	if err := s.db.View(func(tx *bolt.Tx) error {
		out = append(out, tx.Bucket(bktTest).Get([]byte(k))...)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// noCall is a record namer that fails the test when called: on the paths
// that format no error.
func noCall(t *testing.T) func() string {
	return func() string { t.Error("what called on a path without an error"); return "" }
}

func TestInTx(t *testing.T) {
	s := testStore(t, nil)
	ctx := t.Context()
	got, err := viewTx(ctx, s, func(tx *bolt.Tx) (int, error) {
		if tx.Writable() {
			t.Error("viewTx ran fn in a writable transaction")
		}
		return 7, nil
	})
	if got != 7 || err != nil {
		t.Fatalf("viewTx = %d, %v; want 7, nil", got, err)
	}

	got, err = updateTx(ctx, s, func(tx *bolt.Tx) (int, error) {
		return 8, tx.Bucket(bktTest).Put([]byte("k"), []byte("v"))
	})
	if got != 8 || err != nil || string(rawAt(t, s, "k")) != "v" {
		t.Fatalf("updateTx = %d, %v, stored %q; want 8, nil, v", got, err, rawAt(t, s, "k"))
	}

	errFn := errors.New("fn")
	got, err = updateTx(ctx, s, func(tx *bolt.Tx) (int, error) {
		if err := tx.Bucket(bktTest).Put([]byte("k"), []byte("w")); err != nil {
			return 0, err
		}
		return 9, errFn
	})
	if got != 0 || err != errFn {
		t.Fatalf("updateTx(fn fails) = %d, %v; want 0 and fn's error as is", got, err)
	}
	if v := rawAt(t, s, "k"); string(v) != "v" {
		t.Fatalf("failed updateTx left %q stored, want its write rolled back (v)", v)
	}
	if err := s.update(ctx, func(*bolt.Tx) error { return errFn }); err != errFn {
		t.Fatalf("update = %v, want fn's error as is", err)
	}

	done, cancel := context.WithCancel(ctx)
	cancel()
	called := false
	fn := func(*bolt.Tx) (int, error) { called = true; return 7, nil }
	if got, err := viewTx(done, s, fn); got != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("viewTx(done ctx) = %d, %v; want 0, context.Canceled", got, err)
	}
	if got, err := updateTx(done, s, fn); got != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("updateTx(done ctx) = %d, %v; want 0, context.Canceled", got, err)
	}
	s.Close()
	if got, err := viewTx(ctx, s, fn); got != 0 || !errors.Is(err, store.ErrClosed) {
		t.Fatalf("viewTx(closed) = %d, %v; want 0, ErrClosed", got, err)
	}
	if got, err := updateTx(ctx, s, fn); got != 0 || !errors.Is(err, store.ErrClosed) {
		t.Fatalf("updateTx(closed) = %d, %v; want 0, ErrClosed", got, err)
	}
	if called {
		t.Fatal("fn ran although ctx was done or the store closed")
	}
	// bbolt's own "database not open" (a Close racing the closed flag)
	// reads as ErrClosed too.
	if err := s.mapErr(bolterr.ErrDatabaseNotOpen); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("mapErr(ErrDatabaseNotOpen) = %v, want ErrClosed", err)
	}
}

func TestNames(t *testing.T) {
	k := []byte("a\x00b")
	for _, tt := range []struct{ got, want string }{
		{keyed("job")(k), `job "a\x00b"`},
		{fixed("token")(k), "token"},
		{typeAt[store.Job](k), `*store.Job at "a\x00b"`},
	} {
		if tt.got != tt.want {
			t.Errorf("name = %q, want %q", tt.got, tt.want)
		}
	}
}

func TestDecode(t *testing.T) {
	v, err := decode[rec]([]byte(`{"n":1,"s":"x"}`), []byte("k"), func([]byte) string { t.Error("what called on success"); return "" })
	if err != nil || v != (rec{1, "x"}) {
		t.Fatalf("decode = %+v, %v; want {1 x}, nil", v, err)
	}
	v, err = decode[rec]([]byte(`{"n":1,"s":2}`), []byte("k"), keyed("rec"))
	if v != (rec{}) || err == nil {
		t.Fatalf("decode(bad) = %+v, %v; want the zero value and an error", v, err)
	}
	var je *json.UnmarshalTypeError
	if !errors.As(err, &je) {
		t.Errorf("decode(bad) error %v does not wrap the JSON error", err)
	}
	if want := `boltstore: decode rec "k": `; len(err.Error()) <= len(want) || err.Error()[:len(want)] != want {
		t.Errorf("decode(bad) error %q, want prefix %q", err, want)
	}
}

func TestFindGetRec(t *testing.T) {
	s := testStore(t, map[string]string{"a": `{"n":1}`, "bad": `{`})
	_, err := viewTx(t.Context(), s, func(tx *bolt.Tx) (struct{}, error) {
		b := tx.Bucket(bktTest)
		if v, ok, err := findRec[rec](b, []byte("a")); v != (rec{N: 1}) || !ok || err != nil {
			t.Errorf("findRec(a) = %+v, %v, %v; want {1}, true, nil", v, ok, err)
		}
		if v, ok, err := findRec[rec](b, []byte("none")); v != (rec{}) || ok || err != nil {
			t.Errorf("findRec(none) = %+v, %v, %v; want zero, false, nil", v, ok, err)
		}
		v, _, err := findRec[rec](b, []byte("bad"))
		if want := `boltstore: decode *boltstore.rec at "bad": unexpected end of JSON input`; v != (rec{}) || err == nil || err.Error() != want {
			t.Errorf("findRec(bad) = %+v, %v; want zero and %q", v, err, want)
		}

		if v, err := getRec[rec](b, []byte("a"), noCall(t)); v != (rec{N: 1}) || err != nil {
			t.Errorf("getRec(a) = %+v, %v; want {1}, nil", v, err)
		}
		v, err = getRec[rec](b, []byte("none"), func() string { return "rec none" })
		if v != (rec{}) || !errors.Is(err, store.ErrNotFound) || err.Error() != "boltstore: rec none: store: not found" {
			t.Errorf("getRec(none) = %+v, %v; want zero and boltstore: rec none: store: not found", v, err)
		}
		if _, err := getRec[rec](b, []byte("bad"), noCall(t)); err == nil || errors.Is(err, store.ErrNotFound) {
			t.Errorf("getRec(bad) = %v, want the decode error", err)
		}
		return struct{}{}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := viewRec[rec](t.Context(), s, bktTest, []byte("a"), noCall(t)); v != (rec{N: 1}) || err != nil {
		t.Errorf("viewRec(a) = %+v, %v; want {1}, nil", v, err)
	}
	if _, err := viewRec[rec](t.Context(), s, bktTest, []byte("none"), func() string { return "rec none" }); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("viewRec(none) = %v, want ErrNotFound", err)
	}
}

func TestPutRecNew(t *testing.T) {
	s := testStore(t, nil)
	err := s.update(t.Context(), func(tx *bolt.Tx) error {
		b := tx.Bucket(bktTest)
		if err := putNew(b, []byte("a"), rec{N: 1}, noCall(t)); err != nil {
			return err
		}
		err := putNew(b, []byte("a"), rec{N: 2}, func() string { return "rec a" })
		if !errors.Is(err, store.ErrConflict) || err.Error() != "boltstore: rec a exists: store: conflict" {
			t.Errorf("putNew(a again) = %v, want boltstore: rec a exists: store: conflict", err)
		}
		if err := putRec(b, []byte("b"), rec{N: 3, S: "x"}); err != nil {
			return err
		}
		if err := putRec(b, []byte("c"), func() {}); err == nil || err.Error()[:len("boltstore: encode: ")] != "boltstore: encode: " {
			t.Errorf("putRec(func) = %v, want a boltstore: encode error", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"a": `{"n":1}`, "b": `{"n":3,"s":"x"}`, "c": ""} {
		if got := string(rawAt(t, s, k)); got != want {
			t.Errorf("stored at %s: %q, want %q", k, got, want)
		}
	}
}

func TestEachListRecs(t *testing.T) {
	s := testStore(t, map[string]string{"c": `{"n":3}`, "a": `{"n":1}`, "b": `{"n":2}`})
	ctx := t.Context()
	all, err := listRecs[rec](ctx, s, bktTest, nil, keyed("rec"))
	if d := cmp.Diff([]rec{{N: 1}, {N: 2}, {N: 3}}, all); err != nil || d != "" {
		t.Fatalf("listRecs = %v (-want +got):\n%s", err, d)
	}
	odd, _ := listRecs(ctx, s, bktTest, func(r rec) bool { return r.N != 2 }, keyed("rec"))
	if d := cmp.Diff([]rec{{N: 1}, {N: 3}}, odd); d != "" {
		t.Fatalf("listRecs filtered (-want +got):\n%s", d)
	}
	if none, err := listRecs(ctx, s, bktTest, func(rec) bool { return false }, keyed("rec")); none != nil || err != nil {
		t.Fatalf("listRecs with nothing kept = %#v, %v; want nil, nil", none, err)
	}

	stop := errors.New("stop")
	var keys []string
	_, err = viewTx(ctx, s, func(tx *bolt.Tx) (struct{}, error) {
		return struct{}{}, eachRec(tx.Bucket(bktTest), keyed("rec"), func(k []byte, r rec) error {
			keys = append(keys, string(k))
			if r.N == 2 {
				return stop
			}
			return nil
		})
	})
	if err != stop || !cmp.Equal(keys, []string{"a", "b"}) {
		t.Fatalf("eachRec stopped by fn = %v after %v; want stop after [a b]", err, keys)
	}

	if err := s.update(ctx, func(tx *bolt.Tx) error { return tx.Bucket(bktTest).Put([]byte("bb"), []byte("{")) }); err != nil {
		t.Fatal(err)
	}
	bad, err := listRecs[rec](ctx, s, bktTest, nil, keyed("rec"))
	if want := `boltstore: decode rec "bb": unexpected end of JSON input`; bad != nil || err == nil || err.Error() != want {
		t.Fatalf("listRecs over a corrupt record = %v, %v; want nil and %q", bad, err, want)
	}
}

// CreateApproval answers the approval already stored as it is stored,
// never filled in from the caller's record: a path the stored one lacks
// must not appear in the answer (the old code decoded over a copy of the
// caller's approval and did show it).
func TestCreateApprovalAnswersStored(t *testing.T) {
	s := testStore(t, nil)
	ctx := t.Context()
	stored := store.Approval{Instance: "main", Project: 5, State: store.ApprovalApproved, By: "ops"}
	if err := s.PutApproval(ctx, stored); err != nil {
		t.Fatal(err)
	}
	cur, created, err := s.CreateApproval(ctx, store.Approval{Instance: "main", Project: 5, Path: "g/p", State: store.ApprovalPending, By: "intruder"})
	if err != nil || created {
		t.Fatalf("CreateApproval = %v, %v; want not created", created, err)
	}
	stored.Path = "g/p" // the one field a sighting fills in, when empty
	if d := cmp.Diff(stored, cur); d != "" {
		t.Fatalf("CreateApproval answered (-stored +got):\n%s", d)
	}
}
