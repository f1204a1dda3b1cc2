package pgstore_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/hub/store/pgstore"
	"github.com/vk-ci/vk/hub/store/storetest"
	"github.com/vk-ci/vk/internal/pgtest"
)

// harness makes each store on a new database of one cluster per test.
type harness struct {
	srv *pgtest.Server
	mu  sync.Mutex
	dsn map[store.Store]string
}

func newHarness(t *testing.T) *harness {
	return &harness{srv: pgtest.Start(t), dsn: map[store.Store]string{}}
}

func (h *harness) open(t *testing.T, dsn string) store.Store {
	t.Helper()
	s, err := pgstore.Open(t.Context(), dsn, pgstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	h.dsn[s] = dsn
	h.mu.Unlock()
	return s
}

func (h *harness) new(t *testing.T) store.Store {
	t.Helper()
	return h.open(t, h.srv.NewSchema(t))
}

func (h *harness) reopen(t *testing.T, s store.Store) store.Store {
	t.Helper()
	h.mu.Lock()
	dsn := h.dsn[s]
	h.mu.Unlock()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return h.open(t, dsn)
}

// spec: API-42, API-43, API-41, AUTH-07, AUTH-13
func TestConformance(t *testing.T) {
	h := newHarness(t)
	storetest.Run(t, storetest.Harness{New: h.new})
}

// spec: FAIL-19, API-42, API-43
// Everything written survives closing the store and opening it again, as
// a hub restart does.
func TestConformanceReopened(t *testing.T) {
	h := newHarness(t)
	storetest.Run(t, storetest.Harness{New: h.new, Reopen: h.reopen})
}

// The same suite with fencing on and this store's epoch the lease's: a
// fenced store behaves exactly like an unfenced one while it leads.
func TestConformanceFenced(t *testing.T) {
	h := newHarness(t)
	storetest.Run(t, storetest.Harness{New: func(t *testing.T) store.Store {
		dsn := h.srv.NewSchema(t)
		s, err := pgstore.Open(t.Context(), dsn, pgstore.Options{Fenced: true})
		if err != nil {
			t.Fatal(err)
		}
		l := pgstore.NewLease(s.Pool(), pgstore.LeaseConfig{Holder: "hub-a", TTL: time.Hour})
		epoch, _, ok, err := l.TryAcquire(t.Context())
		if err != nil || !ok {
			t.Fatalf("TryAcquire on a fresh database: ok %v, %v", ok, err)
		}
		s.SetEpoch(epoch)
		return s
	}})
}

// Opening migrates an empty database to the newest schema; opening again
// changes nothing; a database whose schema is newer than the binary is
// refused, and left as it was.
func TestSchemaVersions(t *testing.T) {
	srv := pgtest.Start(t)
	db := srv.NewDatabase(t)
	s, err := pgstore.Open(t.Context(), srv.DSN(db), pgstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	want := pgstore.SchemaVersion()
	if got := srv.Exec(t, db, "SELECT string_agg(version::text, ',' ORDER BY version) FROM vk_schema"); got != versions(want) {
		t.Fatalf("vk_schema versions %q, want %q", got, versions(want))
	}
	s, err = pgstore.Open(t.Context(), srv.DSN(db), pgstore.Options{})
	if err != nil {
		t.Fatalf("second open: %v", err)
	}
	s.Close()
	if got := srv.Exec(t, db, "SELECT count(*) FROM vk_schema"); got != strconv.Itoa(want) {
		t.Fatalf("second open applied migrations again: %s rows", got)
	}
	srv.Exec(t, db, "INSERT INTO vk_schema (version, name) VALUES (999, '0999_future.sql')")
	_, err = pgstore.Open(t.Context(), srv.DSN(db), pgstore.Options{})
	if !errors.Is(err, pgstore.ErrSchemaNewer) {
		t.Fatalf("open on a newer schema: %v, want ErrSchemaNewer", err)
	}
	if got := srv.Exec(t, db, "SELECT max(version) FROM vk_schema"); got != "999" {
		t.Fatalf("refused open changed the schema table: max version %s", got)
	}
}

func versions(n int) string {
	out := ""
	for i := 1; i <= n; i++ {
		if i > 1 {
			out += ","
		}
		out += strconv.Itoa(i)
	}
	return out
}

// store.Open selects this implementation for "postgres:<dsn>".
func TestOpenPrefix(t *testing.T) {
	srv := pgtest.Start(t)
	s, err := store.Open(t.Context(), "postgres:"+srv.DSN(srv.NewDatabase(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := s.(*pgstore.Store); !ok {
		t.Fatalf("store.Open(postgres:…) = %T, want *pgstore.Store", s)
	}
}

// Closing the store while the database does not answer gives up after
// CloseWait with ErrCloseTimedOut, instead of waiting out pgx's goodbye
// on each connection (15 s each, one after another), so that a hub cut
// off from its database still exits. Closing again answers the same.
//
// spec: BS-11
func TestCloseWithDatabaseUnreachable(t *testing.T) {
	srv := pgtest.Start(t)
	p := pgtest.NewProxy(t, srv.Addr())
	st, err := pgstore.Open(t.Context(), pgtest.DSNAt(p.Addr(), "postgres")+tail(srv, t), pgstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Several connections in the pool, each of which will wait.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if _, err := st.GetMeta(t.Context(), "nothing"); err != nil && !errors.Is(err, store.ErrNotFound) {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	p.Blackhole(true)
	defer p.Blackhole(false)
	// A call that times out on the silent database (as a lease renew
	// does) leaves its connection mid-exchange.
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if _, err := st.GetMeta(ctx, "nothing"); err == nil {
		t.Fatal("a read from the black-holed database answered")
	}
	t0 := time.Now()
	err = st.Close()
	took := time.Since(t0)
	if !errors.Is(err, pgstore.ErrCloseTimedOut) {
		t.Fatalf("Close with the database unreachable: %v, want ErrCloseTimedOut", err)
	}
	// Without the bound it takes 15 s per connection; CloseWait plus a
	// loaded machine's slack is far below one of them.
	if limit := pgstore.CloseWait + 5*time.Second; took > limit {
		t.Errorf("Close took %v, want at most %v", took, limit)
	}
	if err := st.Close(); !errors.Is(err, pgstore.ErrCloseTimedOut) {
		t.Errorf("second Close: %v, want the first's error", err)
	}
}
