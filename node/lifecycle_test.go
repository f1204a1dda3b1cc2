package node

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/testlog"
)

// A Start that fails at a late step (the metrics port is taken) undoes
// the earlier ones: the control socket is closed and its file gone, the
// agent is stopped, and a new agent starts on the same state dir.
func TestStartUndoesOnFailure(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	cfg.Node.MetricsListen = taken.Addr().String()
	opts := Options{Identity: &Identity{NodeID: testNode, Key: testKey, HubURL: "https://127.0.0.1:1"}}
	a, err := New(cfg, testlog.New(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(t.Context()); err == nil || !strings.Contains(err.Error(), "metrics listener") {
		t.Fatalf("Start with the metrics port taken: err = %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ControlSocket)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("control socket left behind: %v", err)
	}
	select {
	case <-a.Done():
	default:
		t.Fatal("a failed Start left the agent running")
	}
	if err := a.Start(t.Context()); !errors.Is(err, ErrStopped) {
		t.Fatalf("second Start: err = %v, want ErrStopped", err)
	}
	if err := a.Shutdown(t.Context()); !errors.Is(err, ErrStopped) {
		t.Fatalf("Shutdown after a failed Start: err = %v, want ErrStopped", err)
	}

	cfg.Node.MetricsListen = ""
	b, err := Start(t.Context(), cfg, testlog.New(t), opts)
	if err != nil {
		t.Fatalf("a new agent on the same state dir: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, ControlSocket)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("control socket left after Shutdown: %v", err)
	}
}

// New opens nothing: no journal, no socket; an agent never started shuts
// down at once, and only once.
func TestNewOpensNothing(t *testing.T) {
	dir := t.TempDir()
	a, err := New(testConfig(t, dir), nil, Options{Identity: &Identity{NodeID: testNode, Key: testKey, HubURL: "https://127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"journal", "spool", ControlSocket} {
		if _, err := os.Stat(filepath.Join(dir, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("New made %s: %v", p, err)
		}
	}
	if err := a.Shutdown(t.Context()); err != nil {
		t.Fatalf("Shutdown of an agent never started: %v", err)
	}
	if err := a.Shutdown(t.Context()); !errors.Is(err, ErrStopped) {
		t.Fatalf("second Shutdown: err = %v, want ErrStopped", err)
	}
	if err := a.Start(t.Context()); !errors.Is(err, ErrStopped) {
		t.Fatalf("Start after Shutdown: err = %v, want ErrStopped", err)
	}
}
