package output_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/vk-ci/vk/hub/output"
	"github.com/vk-ci/vk/hub/store/pgstore"
	"github.com/vk-ci/vk/internal/pgtest"
)

func openPG(t testing.TB, dsn string) (*pgstore.Store, *pgstore.Output) {
	t.Helper()
	s, err := pgstore.Open(t.Context(), dsn, pgstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	o := s.Output()
	t.Cleanup(func() { o.Close(); s.Close() })
	return s, o
}

// spec: NODE-12, API-37, API-38
// Job output in PostgreSQL passes the same tests as the directory and
// memory stores.
func TestPostgresConformance(t *testing.T) {
	srv := pgtest.Start(t)
	output.RunConformance(t, func(t testing.TB) output.Store {
		_, o := openPG(t, srv.NewSchema(t))
		return o
	})
}

// spec: FAIL-19, API-39, API-41
// Output, its length and completeness survive closing the store and
// opening it again (a hub restart, or another hub taking over); a dropped
// job's rows are gone; writes of a fenced store with an old epoch are
// refused and change nothing.
func TestPostgresRestartDropFence(t *testing.T) {
	srv := pgtest.Start(t)
	dsn := srv.NewSchema(t)
	ctx := t.Context()
	s, o := openPG(t, dsn)
	o.Append(ctx, "j1", 0, []byte("first part;"))
	o.Append(ctx, "j1", 11, []byte("second"))
	o.MarkComplete(ctx, "j1")
	o.Append(ctx, "j2", 0, []byte("running"))
	o.Close()
	s.Close()

	_, o2 := openPG(t, dsn)
	for job, want := range map[string]struct {
		content  string
		complete bool
	}{"j1": {"first part;second", true}, "j2": {"running", false}} {
		n, complete, err := o2.Len(ctx, job)
		if err != nil || n != int64(len(want.content)) || complete != want.complete {
			t.Fatalf("%s: Len = %d, %v, %v; want %d, %v", job, n, complete, err, len(want.content), want.complete)
		}
		c, err := o2.ReadAt(ctx, job, 0, 0)
		if err != nil || string(c.Data) != want.content || c.Complete != want.complete {
			t.Fatalf("%s: ReadAt = %q complete %v, %v; want %q", job, c.Data, c.Complete, err, want.content)
		}
	}
	if n, err := o2.Append(ctx, "j2", 7, []byte(" on")); err != nil || n != 10 {
		t.Fatalf("Append after reopen = %d, %v", n, err)
	}
	if err := o2.Drop(ctx, "j1"); err != nil {
		t.Fatal(err)
	}
	if err := o2.Drop(ctx, "j1"); err != nil {
		t.Fatalf("Drop twice: %v", err)
	}
	if n, complete, _ := o2.Len(ctx, "j1"); n != 0 || complete {
		t.Fatalf("dropped job Len = %d, %v", n, complete)
	}
	if got := srv.Exec(t, "postgres", "SELECT count(*) FROM "+schemaOf(dsn)+".vk_output_chunks WHERE job = 'j1'"); got != "0" {
		t.Fatalf("%s chunks of the dropped job remain", got)
	}

	// Fenced: the leader's epoch writes; after another instance takes
	// the lease, the old epoch's appends are refused.
	fs, err := pgstore.Open(ctx, dsn, pgstore.Options{Fenced: true})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	fo := fs.Output()
	l := pgstore.NewLease(fs.Pool(), pgstore.LeaseConfig{Holder: "a"})
	e1, _, ok, err := l.TryAcquire(ctx)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	fs.SetEpoch(e1)
	if _, err := fo.Append(ctx, "j3", 0, []byte("abc")); err != nil {
		t.Fatal(err)
	}
	l.Release(ctx, e1)
	e2, _, ok, err := pgstore.NewLease(fs.Pool(), pgstore.LeaseConfig{Holder: "b"}).TryAcquire(ctx)
	if err != nil || !ok || e2 != e1+1 {
		t.Fatal(e2, ok, err)
	}
	if _, err := fo.Append(ctx, "j3", 3, []byte("def")); !errors.Is(err, pgstore.ErrFenced) {
		t.Fatalf("deposed leader's Append: %v, want ErrFenced", err)
	}
	if err := fo.MarkComplete(ctx, "j3"); !errors.Is(err, pgstore.ErrFenced) {
		t.Fatalf("deposed leader's MarkComplete: %v, want ErrFenced", err)
	}
	c, err := o2.ReadAt(ctx, "j3", 0, 0)
	if err != nil || !bytes.Equal(c.Data, []byte("abc")) || c.Complete {
		t.Fatalf("j3 after refused writes = %q complete %v, %v; want \"abc\", not complete", c.Data, c.Complete, err)
	}
}

func schemaOf(dsn string) string {
	const key = "search_path="
	i := bytes.Index([]byte(dsn), []byte(key))
	return dsn[i+len(key):]
}
