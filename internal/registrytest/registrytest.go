// Package registrytest starts the real Debian docker-registry (CNCF
// distribution 2.8.2, /usr/bin/docker-registry) on 127.0.0.1 with
// filesystem storage in a test temp dir, for tests that need an OCI
// registry. The registry speaks plain HTTP and has no referrers API, so
// clients set PlainHTTP (oras) or name.Insecure (go-containerregistry).
//
// The process is stopped by PID in t.Cleanup. [Registry.Stop] and
// [Registry.Start] let a test take the registry down and bring it back on
// the same address with the same data, to exercise client retries.
package registrytest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/need"
)

// Binary is the registry executable the helper runs.
const Binary = "/usr/bin/docker-registry"

// readyTimeout bounds how long Start waits for /v2/ to answer.
const readyTimeout = 15 * time.Second

// Registry is one running (or stopped) docker-registry process.
type Registry struct {
	// Addr is host:port the registry listens on, always 127.0.0.1:<port>.
	Addr string
	// Dir is the registry's storage root (inside t.TempDir).
	Dir string

	t       testing.TB
	cfgPath string
	logPath string

	mu     sync.Mutex
	cmd    *exec.Cmd  // nil while stopped; guarded by mu
	waitCh chan error // receives cmd.Wait's result; guarded by mu
}

// Available reports whether the registry binary is installed.
func Available() bool {
	_, err := os.Stat(Binary)
	return err == nil
}

// New starts a registry for the test and registers its stop in t.Cleanup.
// The test is skipped (with the reason) when the binary is missing; any
// other failure is fatal.
func New(t testing.TB) *Registry {
	t.Helper()
	if !Available() {
		need.Missingf(t, "registrytest: %s not installed (apt-get install -y docker-registry)", Binary)
	}
	dir := t.TempDir()
	r := &Registry{t: t, Dir: filepath.Join(dir, "data"), cfgPath: filepath.Join(dir, "config.yml"), logPath: filepath.Join(dir, "registry.log")}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("registrytest: pick port: %v", err)
	}
	r.Addr = ln.Addr().String()
	ln.Close()
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: info
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
`, r.Dir, r.Addr)
	if err := os.WriteFile(r.cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatalf("registrytest: %v", err)
	}
	t.Cleanup(r.Stop)
	if err := r.Start(); err != nil {
		t.Fatalf("registrytest: %v", err)
	}
	return r
}

// URL returns the registry base URL, "http://127.0.0.1:<port>".
func (r *Registry) URL() string { return "http://" + r.Addr }

// Start (re)starts the registry process on [Registry.Addr] and waits until
// GET /v2/ answers 200. Starting a running registry is a no-op.
func (r *Registry) Start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		return nil
	}
	logf, err := os.OpenFile(r.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(Binary, "serve", r.cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", Binary, err)
	}
	logf.Close()
	r.cmd = cmd
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// Polling with a deadline is how we wait for an external process.
	deadline := time.Now().Add(readyTimeout)
	client := &http.Client{Timeout: time.Second}
	for {
		resp, err := client.Get(r.URL() + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				r.waitCh = exited
				return nil
			}
		}
		select {
		case err := <-exited:
			r.cmd = nil
			return fmt.Errorf("registry exited early: %v; log:\n%s", err, r.Log())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-exited
			r.cmd = nil
			return errors.New("registry not ready in time; log:\n" + r.Log())
		}
	}
}

// Stop terminates the registry (SIGTERM, then SIGKILL after 5 s) and waits
// for it to exit. Its data stays in [Registry.Dir]. Stopping a stopped
// registry is a no-op.
func (r *Registry) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return
	}
	r.cmd.Process.Signal(os.Interrupt)
	select {
	case <-r.waitCh:
	case <-time.After(5 * time.Second):
		r.cmd.Process.Kill()
		<-r.waitCh
	}
	r.cmd, r.waitCh = nil, nil
}

// Log returns what the registry has written to its log so far.
func (r *Registry) Log() string {
	b, _ := os.ReadFile(r.logPath)
	return string(bytes.ToValidUTF8(b, []byte("?")))
}
