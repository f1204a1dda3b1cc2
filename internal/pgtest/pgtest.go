// Package pgtest starts throwaway PostgreSQL clusters for tests, and a TCP
// proxy between a client and a cluster that can cut or black-hole its
// connections (fault tests for the PostgreSQL store and the leader lease).
//
// [Start] runs initdb into a fresh temporary directory and starts the
// server binary directly (no system service, no pg_ctl), listening on a
// free loopback port only (no Unix socket: temporary paths are often longer
// than a socket path may be). The cluster is stopped and its data removed
// in t.Cleanup; nothing is ever shared between tests. When the test runs as
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
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/need"
)

// User is the database superuser of every cluster; it authenticates with
// trust over loopback.
const User = "vk"

// Option changes how [Start] sets a cluster up.
type Option func(*options)

type options struct{ durable bool }

// Durable keeps fsync, synchronous commit and full-page writes on.
func Durable() Option { return func(o *options) { o.durable = true } }

// Server is a running throwaway cluster.
type Server struct {
	t    testing.TB
	bin  string
	data string
	port int
	opt  options
	cred *syscall.Credential

	mu   sync.Mutex
	cmd  *exec.Cmd     // guarded by mu; nil while stopped
	done chan struct{} // closed when cmd exited
	log  *logBuf
	dbs  int // guarded by mu: databases made by NewDatabase
}

// BinDir returns the directory of the PostgreSQL server binaries, or "" if
// none is installed.
func BinDir() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return major(dirs[i]) > major(dirs[j]) })
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return d
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			d := filepath.Dir(real)
			if isExec(filepath.Join(d, "postgres")) {
				return d
			}
		}
	}
	return ""
}

func major(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

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
	s := &Server{t: t, bin: bin}
	for _, o := range opts {
		o(&s.opt)
	}
	root := t.TempDir()
	if os.Geteuid() == 0 {
		cred, err := nobody()
		if err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		s.cred = cred
		// t.TempDir's directories are 0700 root: let the server's user
		// through (traverse only, no listing).
		for d := root; d != filepath.Dir(d) && d != os.TempDir(); d = filepath.Dir(d) {
			if err := os.Chmod(d, 0o711); err != nil {
				t.Fatalf("pgtest: %v", err)
			}
		}
	}
	s.data = filepath.Join(root, "data")
	if err := os.Mkdir(s.data, 0o700); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if s.cred != nil {
		if err := os.Chown(s.data, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
	}
	initdb := s.command(filepath.Join(bin, "initdb"), "-D", s.data, "-U", User, "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions")
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("pgtest: initdb: %v\n%s", err, out)
	}
	t.Cleanup(s.Stop)
	for attempt := 0; ; attempt++ {
		s.port = freePort(t)
		err := s.start()
		if err == nil {
			return s
		}
		if attempt == 3 {
			t.Fatalf("pgtest: %v", err)
		}
	}
}

func nobody() (*syscall.Credential, error) {
	u, err := user.Lookup("nobody")
	if err != nil {
		return nil, fmt.Errorf("running as root and no user nobody to run PostgreSQL as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C", "TZ=UTC")
	cmd.Dir = filepath.Dir(s.data)
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	return cmd
}

func freePort(t testing.TB) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// start runs the server on the data directory and waits until it accepts
// connections (it says so in its log) or exits.
func (s *Server) start() error {
	args := []string{"-D", s.data, "-p", strconv.Itoa(s.port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=",
		"-c", "max_connections=200", "-c", "shared_buffers=16MB",
		"-c", "logging_collector=off", "-c", "log_min_messages=warning", "-c", "log_destination=stderr"}
	if !s.opt.durable {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	cmd := s.command(filepath.Join(s.bin, "postgres"), args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	lb := &logBuf{}
	ready := make(chan struct{})
	done := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		once := sync.Once{}
		for sc.Scan() {
			line := sc.Text()
			lb.add(line)
			if strings.Contains(line, "ready to accept connections") {
				once.Do(func() { close(ready) })
			}
		}
		io.Copy(io.Discard, stderr)
		cmd.Wait()
		close(done)
	}()
	select {
	case <-ready:
	case <-done:
		return fmt.Errorf("postgres exited during start:\n%s", lb.String())
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-done
		return fmt.Errorf("postgres not ready after 60s:\n%s", lb.String())
	}
	s.mu.Lock()
	s.cmd, s.done, s.log = cmd, done, lb
	s.mu.Unlock()
	return nil
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// DSN returns a connection string for database db on this cluster.
func (s *Server) DSN(db string) string { return DSNAt(s.Addr(), db) }

// DSNAt returns a connection string for database db at host:port addr
// (a [Proxy]'s address, say) as the cluster's superuser.
func DSNAt(addr, db string) string {
	host, port, _ := net.SplitHostPort(addr)
	return fmt.Sprintf("host=%s port=%s user=%s dbname=%s sslmode=disable connect_timeout=5", host, port, User, db)
}

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
	cmd := exec.Command(filepath.Join(s.bin, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-At",
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
	cmd := exec.Command(filepath.Join(s.bin, "pg_dump"), "--data-only", "-h", host, "-p", port, "-U", User, "-n", schema, db)
	cmd.Env = append(os.Environ(), "PGOPTIONS=-c bytea_output=escape")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pgtest: pg_dump: %v", err)
	}
	return string(out)
}

// Stop shuts the server down (fast shutdown: open transactions are rolled
// back, clients disconnected) and waits for it to exit. Stopping a stopped
// server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, done, lb := s.cmd, s.done, s.log
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
	}
	if s.t.Failed() {
		s.t.Logf("pgtest: postgres log:\n%s", lb.String())
	}
}

// Restart stops the server and starts it again on the same data and port.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	var err error
	for range 50 { // the port may linger a moment after the old server exits
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("pgtest: restart: %v", err)
}

// logBuf keeps the server's log for a failing test.
type logBuf struct {
	mu    sync.Mutex
	lines []string
}

func (l *logBuf) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) < 2000 {
		l.lines = append(l.lines, s)
	}
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}
