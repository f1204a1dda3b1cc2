package relay

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/realhub"
	"github.com/vk-ci/vk/relay/state"
)

// Start-up checks: state files no runner owns are warned about; a state
// file holding another relay's jobs stops the daemon; [hub] url must be the
// enrolled hub, and [hub] urls must list it.
//
// spec: RELAY-04, AUTH-16, OPS-08
func TestStartChecks(t *testing.T) {
	t.Run("orphan warned", func(t *testing.T) {
		e := newRunEnvWith(t, 3600, clock.NewFake(t0), gitlabfake.Options{}, realhub.Options{NoNode: true})
		old, err := state.Open(e.cfg.StateDir, "renamed", e.enrol.ID)
		if err != nil {
			t.Fatal(err)
		}
		if err := old.Put(state.Job{GitLabID: 1, Token: "t", SubmitRequestID: "x", Phase: state.PhaseCommitted}); err != nil {
			t.Fatal(err)
		}
		logs := make(chan string, 10000)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			Run(ctx, e.cfg, e.toks, slog.New(recordHandler{logs}), Options{Clock: e.clk, NoSession: true})
		}()
		defer func() { cancel(); <-done }()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case l := <-logs:
				if strings.HasPrefix(l, "WARN state file owned by no configured runner") {
					return
				}
			case <-deadline:
				t.Fatal("no warning about renamed.json")
			}
		}
	})
	t.Run("other relay", func(t *testing.T) {
		e := newRunEnvWith(t, 3600, clock.NewFake(t0), gitlabfake.Options{}, realhub.Options{NoNode: true})
		other, _ := state.Open(e.cfg.StateDir, "r1", "relay-old")
		if err := other.Put(state.Job{GitLabID: 1, Token: "t", SubmitRequestID: "x", Phase: state.PhaseCommitted}); err != nil {
			t.Fatal(err)
		}
		if err := Run(context.Background(), e.cfg, e.toks, nil, Options{Clock: e.clk, NoSession: true}); !errors.Is(err, state.ErrRelay) {
			t.Errorf("Run = %v, want ErrRelay", err)
		}
	})
	t.Run("hub url", func(t *testing.T) {
		e := newRunEnvWith(t, 3600, clock.NewFake(t0), gitlabfake.Options{}, realhub.Options{NoNode: true})
		e.cfg.Hub.URL = "https://elsewhere.example.com"
		if err := Run(context.Background(), e.cfg, e.toks, nil, Options{Clock: e.clk, NoSession: true}); !errors.Is(err, ErrConfig) {
			t.Errorf("Run = %v, want ErrConfig", err)
		}
	})
	t.Run("hub urls without the enrolled hub", func(t *testing.T) {
		e := newRunEnvWith(t, 3600, clock.NewFake(t0), gitlabfake.Options{}, realhub.Options{NoNode: true})
		e.cfg.Hub.URLs = []string{"https://elsewhere.example.com", "https://other.example.com"}
		if err := Run(context.Background(), e.cfg, e.toks, nil, Options{Clock: e.clk, NoSession: true}); !errors.Is(err, ErrConfig) {
			t.Errorf("Run = %v, want ErrConfig", err)
		}
	})
}

// The report's server key is the SHA-256 of GitLab's certificate public key;
// none for plain HTTP.
//
// spec: RSESS-02
func TestServerKeySHA256(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	sum := sha256.Sum256(srv.Certificate().RawSubjectPublicKeyInfo)
	if got, want := serverKeySHA256(t.Context(), srv.URL, roots), hex.EncodeToString(sum[:]); got != want {
		t.Errorf("serverKeySHA256 = %q, want %q", got, want)
	}
	if got := serverKeySHA256(t.Context(), "http://127.0.0.1:1", nil); got != "" {
		t.Errorf("plain HTTP: %q, want empty", got)
	}
}
