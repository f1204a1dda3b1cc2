package hub

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
