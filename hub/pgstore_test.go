package hub

import (
	"strings"
	"testing"

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
