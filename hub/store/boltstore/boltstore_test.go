package boltstore_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/hub/store/boltstore"
	_ "github.com/vk-ci/vk/hub/store/memstore"
	"github.com/vk-ci/vk/hub/store/storetest"
	"github.com/vk-ci/vk/internal/deptest"
)

// pathOf remembers each store's file for Reopen.
var pathOf = map[store.Store]string{}

func newStore(t *testing.T) store.Store {
	t.Helper()
	p := filepath.Join(t.TempDir(), "hub.db")
	s, err := boltstore.Open(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	pathOf[s] = p
	return s
}

func reopen(t *testing.T, s store.Store) store.Store {
	t.Helper()
	p := pathOf[s]
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := boltstore.Open(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	pathOf[s2] = p
	return s2
}

// spec: API-42, API-43, API-41, AUTH-07
func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{New: newStore})
}

// spec: FAIL-19, API-42, API-43
// The same suite with a Close and Open between every write phase and the
// checks after it: everything written survives a hub restart.
func TestConformanceReopened(t *testing.T) {
	storetest.Run(t, storetest.Harness{New: newStore, Reopen: reopen})
}

// spec: AUTH-07
// The file holds the redacted spec it was given, byte for byte, and no
// trace of a secret the caller never handed to the store.
func TestNoSecretInFile(t *testing.T) {
	const canary = "glcbt-CANARY-7f3a9c1e"
	p := filepath.Join(t.TempDir(), "hub.db")
	s, err := boltstore.Open(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	secretSpec := []byte(`{"token":"` + canary + `","variables":[{"key":"DEPLOY","value":"` + canary + `"}]}`)
	redacted := bytes.ReplaceAll(secretSpec, []byte(canary), []byte("[MASKED]"))
	j := storetest.FullJob("job-1")
	j.Spec = redacted
	if err := s.CreateJob(t.Context(), j); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendAudit(t.Context(), store.AuditEntry{Time: storetest.T0, Actor: "relay-1", Action: "job.create", Subject: "job-1"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, form := range [][]byte{[]byte(canary), []byte(base64.StdEncoding.EncodeToString([]byte(canary)))} {
		if bytes.Contains(raw, form) {
			t.Errorf("store file contains the canary (%q)", form)
		}
	}
	// The scan is meaningful: the redacted spec itself is there (JSON
	// records hold it base64-encoded).
	if !bytes.Contains(raw, []byte(base64.StdEncoding.EncodeToString(redacted))) {
		t.Error("store file lacks the redacted spec it was given")
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("store file mode %v, want 0600", fi.Mode().Perm())
	}
}

// A second hub on the same file is refused instead of corrupting it.
func TestLocked(t *testing.T) {
	p := filepath.Join(t.TempDir(), "hub.db")
	s, err := boltstore.Open(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := boltstore.Open(t.Context(), p); !errors.Is(err, boltstore.ErrLocked) {
		t.Fatalf("second Open = %v, want %v", err, boltstore.ErrLocked)
	}
}

func TestOpenLocations(t *testing.T) {
	dir := t.TempDir()
	for _, loc := range []string{filepath.Join(dir, "a.db"), "bolt:" + filepath.Join(dir, "b.db")} {
		s, err := store.Open(t.Context(), loc)
		if err != nil {
			t.Fatalf("Open(%q): %v", loc, err)
		}
		if _, ok := s.(*boltstore.Store); !ok {
			t.Errorf("Open(%q) = %T, want *boltstore.Store", loc, s)
		}
		s.Close()
	}
	if _, err := os.Stat(filepath.Join(dir, "b.db")); err != nil {
		t.Errorf("bolt: prefix not stripped: %v", err)
	}
}

// The interface must not leak bbolt: the store package and memstore stay
// free of it (DESIGN "Later: High availability").
func TestDeps(t *testing.T) {
	deptest.Forbid(t, "github.com/vk-ci/vk/hub/store", "go.etcd.io/bbolt")
	deptest.Forbid(t, "github.com/vk-ci/vk/hub/store/memstore", "go.etcd.io/bbolt")
}

// AppendAudits appends its entries in order, numbered after the entries
// already there, and they are there after a reopen (the hub's record
// writer hands it the audit entries queued together).
func TestAppendAuditsInOrder(t *testing.T) {
	ctx := t.Context()
	p := filepath.Join(t.TempDir(), "hub.db")
	s, err := boltstore.Open(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendAudit(ctx, store.AuditEntry{Time: storetest.T0, Actor: "a", Action: "x", Subject: "first"}); err != nil {
		t.Fatal(err)
	}
	var es []store.AuditEntry
	for _, sub := range []string{"b", "c", "d"} {
		es = append(es, store.AuditEntry{Time: storetest.T0, Actor: "a", Action: "x", Subject: sub})
	}
	if err := s.AppendAudits(ctx, es); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = boltstore.Open(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.ListAudit(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"d", "c", "b", "first"} // newest first
	if len(got) != len(want) {
		t.Fatalf("%d entries, want %d", len(got), len(want))
	}
	for i, e := range got {
		if e.Subject != want[i] || e.Seq != uint64(len(want)-i) || !e.Time.Equal(storetest.T0) {
			t.Errorf("entry %d = %s seq %d at %v; want %s seq %d", i, e.Subject, e.Seq, e.Time, want[i], len(want)-i)
		}
	}
}
