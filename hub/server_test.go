package hub

import (
	"context"
	"net"
	"testing"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/testlog"
)

// TestStartFailureReleases makes Start fail at its last step (the web
// UI's port is taken) and then starts a hub on the same state dir: that
// only works if the failed Start released what it had built (the store's
// file lock, the admin socket, the listener).
func TestStartFailureReleases(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg := DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.StateDir = t.TempDir()
	cfg.UI.Addr = busy.Addr().String()
	log := testlog.New(t)
	opt := Options{Clock: clock.NewFake(testStart)}
	if srv, err := Start(t.Context(), cfg, log, opt); err == nil {
		srv.Shutdown(context.Background())
		t.Fatalf("Start with the UI port taken succeeded")
	} else {
		t.Logf("Start with the UI port taken: %v", err)
	}
	cfg.UI.Addr = ""
	srv, err := Start(t.Context(), cfg, log, opt)
	if err != nil {
		t.Fatalf("Start after a failed Start: %v", err)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
