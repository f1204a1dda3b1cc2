package pglaunch

import (
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/deptest"
	"github.com/vk-ci/vk/internal/need"
)

// Launch puts the cluster in the directory it is given and logs through
// the logger; its stop ends the server (the port refuses connections)
// and keeps the data.
func TestLaunch(t *testing.T) {
	if BinDir() == "" {
		need.Missingf(t, "PostgreSQL server binaries not found (install the Debian package postgresql)")
	}
	dir := filepath.Join(t.TempDir(), "pg")
	var logged strings.Builder
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &logged}, nil))
	s, stop, err := Launch(dir, log)
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(s.Addr())
	out, err := exec.Command(filepath.Join(s.BinDir(), "psql"), "-X", "-At", "-h", host, "-p", port, "-U", User, "-d", "postgres",
		"-c", "SELECT 40 + 2").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "42" {
		t.Fatalf("SELECT = %q, %v; want 42", out, err)
	}
	stop()
	if !strings.Contains(logged.String(), "ready to accept connections") {
		t.Errorf("the server's log did not reach the logger:\n%s", logged.String())
	}
	if c, err := net.DialTimeout("tcp", s.Addr(), time.Second); err == nil {
		c.Close()
		t.Fatalf("%s still accepts connections after stop", s.Addr())
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "PG_VERSION")); err != nil {
		t.Fatalf("the cluster's data is not in the given directory: %v", err)
	}
	stop() // stopping twice does nothing
}

// The package is for binaries too (vk demo): it must not link "testing".
func TestDoesNotLinkTesting(t *testing.T) {
	deptest.Forbid(t, "github.com/vk-ci/vk/internal/pglaunch", "testing")
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
