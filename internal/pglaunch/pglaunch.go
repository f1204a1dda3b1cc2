// Package pglaunch starts a private PostgreSQL cluster: initdb into a
// directory, then the server binary directly (no system service, no
// pg_ctl), listening on a free loopback port only (no Unix socket:
// temporary paths are often longer than a socket path may be). When run
// as root, the cluster runs as the unprivileged user "nobody"
// (PostgreSQL refuses to run as root). By default it is tuned for tests
// and demos: fsync, synchronous commit and full-page writes are off
// ([Durable] keeps them on).
//
// It is what internal/pgtest's throwaway test clusters and `vk demo --ha`
// share; it does not link "testing".
package pglaunch

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
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
	"time"
)

// User is the database superuser of every cluster; it authenticates with
// trust over loopback.
const User = "vk"

// Option changes how a cluster is set up.
type Option func(*options)

type options struct{ durable bool }

// Durable keeps fsync, synchronous commit and full-page writes on.
func Durable() Option { return func(o *options) { o.durable = true } }

// Cluster is a running private cluster.
type Cluster struct {
	// Stopped, when set, is called with the server's log once Stop
	// stopped it.
	Stopped func(log string)
	logger  *slog.Logger // server log lines, as they come; nil drops them
	bin     string
	data    string
	port    int
	opt     options
	cred    *syscall.Credential

	mu   sync.Mutex
	cmd  *exec.Cmd     // guarded by mu; nil while stopped
	done chan struct{} // closed when cmd exited
	log  *logBuf
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

// Launch initialises a new cluster in dir (created if missing; it must
// hold no cluster yet) and starts it, its log lines going to log (nil
// drops them). stop shuts it down and leaves the data in dir, for the
// caller to remove. When run as root, dir and the directories above it
// up to the temporary directory are made traversable for "nobody": put
// dir under [os.TempDir]. It fails naming the postgresql package when
// the server binaries are not installed.
func Launch(dir string, log *slog.Logger, opts ...Option) (s *Cluster, stop func(), err error) {
	bin := BinDir()
	if bin == "" {
		return nil, nil, errors.New("pglaunch: PostgreSQL server binaries not found (install the Debian package postgresql)")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, err
	}
	s, err = launch(bin, dir, log, opts)
	if err != nil {
		return nil, nil, err
	}
	return s, s.Stop, nil
}

// LaunchIn is Launch with the binaries in bin and the data in
// root/data (root exists); pgtest uses it with a test's temp dir.
func LaunchIn(bin, root string, log *slog.Logger, opts ...Option) (*Cluster, error) {
	return launch(bin, root, log, opts)
}

// launch runs initdb into root/data and starts the server.
func launch(bin, root string, log *slog.Logger, opts []Option) (*Cluster, error) {
	s := &Cluster{bin: bin, logger: log}
	for _, o := range opts {
		o(&s.opt)
	}
	if os.Geteuid() == 0 {
		cred, err := nobody()
		if err != nil {
			return nil, err
		}
		s.cred = cred
		// Temporary directories are 0700 root: let the server's user
		// through (traverse only, no listing).
		for d := root; d != filepath.Dir(d) && d != os.TempDir(); d = filepath.Dir(d) {
			if err := os.Chmod(d, 0o711); err != nil {
				return nil, err
			}
		}
	}
	s.data = filepath.Join(root, "data")
	if err := os.Mkdir(s.data, 0o700); err != nil {
		return nil, err
	}
	if s.cred != nil {
		if err := os.Chown(s.data, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return nil, err
		}
	}
	initdb := s.command(filepath.Join(bin, "initdb"), "-D", s.data, "-U", User, "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions")
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	for attempt := 0; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s.port = port
		err = s.start()
		if err == nil {
			return s, nil
		}
		if attempt == 3 {
			return nil, err
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

func (s *Cluster) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C", "TZ=UTC")
	cmd.Dir = filepath.Dir(s.data)
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	return cmd
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// start runs the server on the data directory and waits until it accepts
// connections (it says so in its log) or exits.
func (s *Cluster) start() error {
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
			if s.logger != nil {
				s.logger.Info("postgres", "line", line)
			}
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

// BinDir returns the directory of the binaries the cluster runs.
func (s *Cluster) BinDir() string { return s.bin }

// DataDir returns the cluster's data directory.
func (s *Cluster) DataDir() string { return s.data }

// Addr is the server's host:port.
func (s *Cluster) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// DSN returns a connection string for database db on this cluster.
func (s *Cluster) DSN(db string) string { return DSNAt(s.Addr(), db) }

// DSNAt returns a connection string for database db at host:port addr
// (a proxy's address, say) as the cluster's superuser.
func DSNAt(addr, db string) string {
	host, port, _ := net.SplitHostPort(addr)
	return fmt.Sprintf("host=%s port=%s user=%s dbname=%s sslmode=disable connect_timeout=5", host, port, User, db)
}

// Stop shuts the server down (fast shutdown: open transactions are rolled
// back, clients disconnected) and waits for it to exit. Stopping a stopped
// server does nothing.
func (s *Cluster) Stop() {
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
	if s.Stopped != nil {
		s.Stopped(lb.String())
	}
}

// Restart stops the server and starts it again on the same data and
// port.
func (s *Cluster) Restart() error {
	s.Stop()
	var err error
	for range 50 { // the port may linger a moment after the old server exits
		if err = s.start(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("pglaunch: restart: %w", err)
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
