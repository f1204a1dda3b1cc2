package relay

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/realhub"
)

// recordHandler sends every record's message to a channel.
type recordHandler struct{ ch chan string }

func (h recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recordHandler) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.ch <- r.Level.String() + " " + r.Message:
	default:
	}
	return nil
}
func (h recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recordHandler) WithGroup(string) slog.Handler      { return h }

// The token is verified at start and again a day later, with a warning
// while it expires within a week; the daemon never rotates it.
//
// spec: GL-18, GL-02
func TestVerifyDailyAndExpiry(t *testing.T) {
	clk := clock.NewFake(t0)
	e := newRunEnvWith(t, 3600, clk, gitlabfake.Options{RunnerTokenExpiresAt: t0.Add(72 * time.Hour), Now: clk.Now}, realhub.Options{NoNode: true})
	logs := make(chan string, 10000)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, e.cfg, e.toks, slog.New(recordHandler{logs}), Options{Clock: clk, NoSession: true})
	}()
	defer func() { cancel(); <-done }()
	expiring := func(wait time.Duration) bool {
		t.Helper()
		deadline := time.After(wait)
		for {
			select {
			case l := <-logs:
				if strings.HasPrefix(l, "WARN runner token expires soon") {
					return true
				}
			case <-deadline:
				return false
			}
		}
	}
	if !expiring(20 * time.Second) {
		t.Fatal("no expiry warning at start")
	}
	// A day later (the daily timer may be armed a moment after start, so
	// advance again until the second verify has happened).
	again := false
	for i := 0; i < 5 && !again; i++ {
		clk.Advance(25 * time.Hour)
		again = expiring(2 * time.Second)
	}
	if !again {
		t.Fatal("no expiry warning a day later")
	}
	if n := len(e.gl.RequestsTo(gitlabfake.RouteVerify)); n < 2 {
		t.Errorf("%d verify calls, want at least 2", n)
	}
}
