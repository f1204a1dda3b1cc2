package hub

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/hub/store/pgstore"
	"github.com/vk-ci/vk/internal/pgtest"
)

// TestRestartPostgres is TestRestart with the hub's records in PostgreSQL
// ([store] kind = "postgres"): the same records, outputs and adoptions
// survive the restart, and the database, dumped whole, holds no form of
// the job's secrets.
//
// spec: FAIL-19, ARB-04, ARB-40, NSESS-24, AUTH-07, API-39, DECISIONS 6
func TestRestartPostgres(t *testing.T) {
	srv := pgtest.Start(t)
	dsn := srv.NewSchema(t)
	_, schema, _ := strings.Cut(dsn, "search_path=")
	testRestart(t, func(c *Config) {
		c.Store = StoreConfig{Kind: StorePostgres, DSN: dsn}
	}, func(h *harness) []byte {
		dump := srv.Dump(t, "postgres", schema)
		// The job records must be in it, readable, or their absence of
		// the secret proves nothing.
		if !strings.Contains(dump, `"principal":"relay-1"`) {
			t.Fatalf("the dump lacks the job records in clear:\n%.3000s", dump)
		}
		return []byte(dump)
	})
}

// A hub on PostgreSQL keeps job output in the same database, not in
// <state_dir>/output: an acked chunk is a row another hub could read.
//
// spec: NODE-12, FAIL-19
func TestPostgresOutputInDatabase(t *testing.T) {
	srv := pgtest.Start(t)
	dsn := srv.NewSchema(t)
	_, schema, _ := strings.Cut(dsn, "search_path=")
	cfg := DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.StateDir = t.TempDir()
	cfg.Store = StoreConfig{Kind: StorePostgres, DSN: dsn}
	s, err := Start(t.Context(), cfg, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	if _, ok := s.out.(*pgstore.Output); !ok {
		t.Fatalf("output store %T, want *pgstore.Output", s.out)
	}
	if n, err := s.out.Append(t.Context(), "job-1", 0, []byte("hello")); err != nil || n != 5 {
		t.Fatalf("Append = %d, %v", n, err)
	}
	if got := srv.Exec(t, "postgres", "SELECT length FROM "+schema+".vk_output WHERE job = 'job-1'"); got != "5" {
		t.Fatalf("output length in the database %q, want 5", got)
	}
	if _, err := os.Stat(filepath.Join(cfg.StateDir, "output")); !os.IsNotExist(err) {
		t.Fatalf("<state_dir>/output exists (%v): output went to disk", err)
	}
}

// With store.lease, a second hub on the same database waits until the
// first gives the lease up (a cold standby), then starts as a restart
// does; a hub cut off from the database loses the lease and stops.
//
// spec: BS-10, BS-11
func TestLeaseColdStandby(t *testing.T) {
	srv := pgtest.Start(t)
	dsn := srv.NewSchema(t)
	_, schema, _ := strings.Cut(dsn, "search_path=")
	const ttlMillis = 1500
	config := func(instance, dsn string) Config {
		c := DefaultConfig()
		c.Addr = "127.0.0.1:0"
		c.StateDir = t.TempDir()
		c.Store = StoreConfig{Kind: StorePostgres, DSN: dsn, Lease: true, LeaseTTLMillis: ttlMillis, Instance: instance}
		return c
	}
	a, err := Start(t.Context(), config("hub-a", dsn), nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Shutdown(context.Background())
	if got := srv.Exec(t, "postgres", "SELECT holder || ' ' || epoch FROM "+schema+".vk_lease"); got != "hub-a 1" {
		t.Fatalf("lease %q, want hub-a 1", got)
	}

	proxy := pgtest.NewProxy(t, srv.Addr())
	type started struct {
		s   *Server
		err error
	}
	bDone := make(chan started, 1)
	go func() {
		s, err := Start(t.Context(), config("hub-b", pgtest.DSNAt(proxy.Addr(), "postgres")+" search_path="+schema), nil, Options{})
		bDone <- started{s, err}
	}()
	select {
	case b := <-bDone:
		t.Fatalf("hub-b started while hub-a holds the lease: %v", b.err)
	case <-time.After(2 * ttlMillis * time.Millisecond): // a bound on a non-event, not a synchronisation
	}
	stopAt := time.Now()
	if err := a.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	var b started
	select {
	case b = <-bDone:
	case <-time.After(10 * time.Second):
		t.Fatal("hub-b did not start within 10 s of hub-a's shutdown")
	}
	if b.err != nil {
		t.Fatal(b.err)
	}
	defer b.s.Shutdown(context.Background())
	t.Logf("hub-b started %v after hub-a's shutdown released the lease", time.Since(stopAt).Round(time.Millisecond))
	if got := srv.Exec(t, "postgres", "SELECT holder || ' ' || epoch FROM "+schema+".vk_lease"); got != "hub-b 2" {
		t.Fatalf("lease %q, want hub-b 2", got)
	}
	if _, err := b.s.Store().AppendAudit(t.Context(), store.AuditEntry{Time: time.Now(), Actor: "test", Action: "probe"}); err != nil {
		t.Fatalf("the leader's write: %v", err)
	}

	// hub-c waits as the next standby; hub-b then fails hard: cut off
	// from the database, it cannot release the lease, so hub-c takes it
	// only once it expired on the database's clock.
	cDone := make(chan started, 1)
	go func() {
		s, err := Start(t.Context(), config("hub-c", dsn), nil, Options{})
		cDone <- started{s, err}
	}()
	cutAt := time.Now()
	proxy.Blackhole(true)
	select {
	case <-b.s.done:
		if !b.s.lostLease.Load() {
			t.Fatal("hub-b stopped, but not for its lost lease")
		}
		t.Logf("hub-b stopped %v after its database was black-holed (ttl %d ms)", time.Since(cutAt).Round(time.Millisecond), ttlMillis)
	case <-time.After(5 * ttlMillis * time.Millisecond):
		t.Fatal("hub-b still running 5 TTLs after losing its database")
	}
	var c started
	select {
	case c = <-cDone:
	case <-time.After(10 * time.Second):
		t.Fatal("hub-c did not take over within 10 s of hub-b's failure")
	}
	if c.err != nil {
		t.Fatal(c.err)
	}
	defer c.s.Shutdown(context.Background())
	took := time.Since(cutAt)
	t.Logf("hub-c serving %v after hub-b was cut off (ttl %d ms)", took.Round(time.Millisecond), ttlMillis)
	// The lease expires at most a TTL after hub-b's last renew, hub-c
	// retries every third of it, then starts (3 s of slack for a loaded
	// machine).
	if limit := ttlMillis*time.Millisecond*4/3 + 3*time.Second; took > limit {
		t.Errorf("takeover took %v, want at most %v", took, limit)
	}
	if got := srv.Exec(t, "postgres", "SELECT holder || ' ' || epoch FROM "+schema+".vk_lease"); got != "hub-c 3" {
		t.Fatalf("lease %q, want hub-c 3", got)
	}
	proxy.Blackhole(false)
	if _, err := c.s.Store().AppendAudit(t.Context(), store.AuditEntry{Time: time.Now(), Actor: "test", Action: "probe"}); err != nil {
		t.Fatalf("the new leader's write: %v", err)
	}
	_, err = b.s.Store().AppendAudit(t.Context(), store.AuditEntry{Time: time.Now(), Actor: "test", Action: "late"})
	if !errors.Is(err, pgstore.ErrFenced) {
		t.Fatalf("deposed hub's write once another holds the lease: %v, want ErrFenced", err)
	}
}
