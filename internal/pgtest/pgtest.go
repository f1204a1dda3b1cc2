// Package pgtest starts throwaway PostgreSQL clusters for tests, and a TCP
// proxy between a client and a cluster that can cut or black-hole its
// connections (fault tests for the PostgreSQL store and the leader lease).
//
// [Start] runs initdb into a fresh temporary directory and starts the
// server binary directly (no system service, no pg_ctl), listening on a
// free loopback port only (no Unix socket: temporary paths are often longer
// than a socket path may be). The cluster is stopped and its data removed
// in t.Cleanup; nothing is ever shared between tests. The starting
// itself is internal/pglaunch's, which `vk demo --ha` uses outside
// tests. When the test runs as
// root, the cluster runs as the unprivileged user "nobody" (PostgreSQL
// refuses to run as root), and the directories on the way to the data are
// made traversable for it.
//
// By default the cluster is tuned for tests of logic: fsync, synchronous
// commit and full-page writes are off, which makes initdb and every commit
// fast but means a crash of the machine (not of the server) could lose
// data. [Durable] keeps PostgreSQL's durable defaults, for benchmarks that
// compare against a store that fsyncs.
//
// The binaries come from Debian's postgresql package
// (/usr/lib/postgresql/<major>/bin) or from PATH. Without them the test is
// skipped, naming the package; when the environment variable CI is "true"
// it fails instead, so CI cannot pass by skipping.
package pgtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/vk-ci/vk/internal/need"
	"github.com/vk-ci/vk/internal/pglaunch"
)

// User is the database superuser of every cluster; it authenticates with
// trust over loopback.
const User = pglaunch.User

// Option changes how [Start] sets a cluster up.
type Option = pglaunch.Option

// Durable keeps fsync, synchronous commit and full-page writes on.
func Durable() Option { return pglaunch.Durable() }

// Server is a running throwaway cluster.
type Server struct {
	*pglaunch.Cluster

	mu  sync.Mutex
	dbs int // guarded by mu: databases made by NewDatabase
}

// BinDir returns the directory of the PostgreSQL server binaries, or "" if
// none is installed.
func BinDir() string { return pglaunch.BinDir() }

// Require skips t (or, with CI=true, fails it) when PostgreSQL is not
// installed, and returns the binary directory otherwise.
func Require(t testing.TB) string {
	t.Helper()
	bin := BinDir()
	if bin == "" {
		msg := "pgtest: PostgreSQL server binaries not found (install the Debian package postgresql)"
		need.Missingf(t, "%s", msg)
	}
	return bin
}

// Start initialises and starts a new cluster for t, stopped and removed
// in t.Cleanup.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	bin := Require(t)
	c, err := pglaunch.LaunchIn(bin, t.TempDir(), nil, opts...)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	c.Stopped = func(log string) {
		if t.Failed() {
			t.Logf("pgtest: postgres log:\n%s", log)
		}
	}
	t.Cleanup(c.Stop)
	return &Server{Cluster: c}
}

// DSNAt returns a connection string for database db at host:port addr
// (a [Proxy]'s address, say) as the cluster's superuser.
func DSNAt(addr, db string) string { return pglaunch.DSNAt(addr, db) }

// NewDatabase creates a new, empty database on the cluster and returns
// its name (db1, db2, …).
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	s.mu.Lock()
	s.dbs++
	name := fmt.Sprintf("db%d", s.dbs)
	s.mu.Unlock()
	s.Exec(t, "postgres", "CREATE DATABASE "+name+" TEMPLATE template0")
	return name
}

// NewSchema creates a new, empty schema in database "postgres" and
// returns a connection string whose search_path is that schema alone:
// much cheaper than a database (no checkpoint), as separate for a store
// that names its tables unqualified.
func (s *Server) NewSchema(t testing.TB) string {
	t.Helper()
	s.mu.Lock()
	s.dbs++
	name := fmt.Sprintf("s%d", s.dbs)
	s.mu.Unlock()
	s.Exec(t, "postgres", "CREATE SCHEMA "+name)
	return s.DSN("postgres") + " search_path=" + name
}

// Exec runs SQL on database db with psql, failing t on error.
func (s *Server) Exec(t testing.TB, db, sql string) string {
	t.Helper()
	host, port, _ := net.SplitHostPort(s.Addr())
	cmd := exec.Command(filepath.Join(s.BinDir(), "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-At",
		"-h", host, "-p", port, "-U", User, "-d", db, "-c", sql)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pgtest: psql %q: %v\n%s", sql, err, out)
	}
	return strings.TrimSpace(string(out))
}

// Dump returns the rows of every table in schema of database db as
// pg_dump writes them (COPY text, bytea in escape form so that text kept
// in bytea columns reads as text), for tests that search the database for
// what must not be there.
func (s *Server) Dump(t testing.TB, db, schema string) string {
	t.Helper()
	host, port, _ := net.SplitHostPort(s.Addr())
	cmd := exec.Command(filepath.Join(s.BinDir(), "pg_dump"), "--data-only", "-h", host, "-p", port, "-U", User, "-n", schema, db)
	cmd.Env = append(os.Environ(), "PGOPTIONS=-c bytea_output=escape")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pgtest: pg_dump: %v", err)
	}
	return string(out)
}

// Restart stops the server and starts it again on the same data and port.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.Cluster.Restart(); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
}
