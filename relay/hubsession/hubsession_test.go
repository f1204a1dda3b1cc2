package hubsession_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	hub "github.com/vk-ci/vk/hub/session"
	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/sessionclient/sessiontest"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/relay/hubsession"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

type lookup map[string]ed25519.PublicKey

func (l lookup) LookupPrincipal(_ context.Context, kind hub.Kind, id string) (hub.Principal, error) {
	if k, ok := l[id]; ok && kind == hub.KindRelay {
		return hub.Principal{Key: k}, nil
	}
	return hub.Principal{}, hub.ErrUnknownPrincipal
}

// fakeHub plays the hub core around the real hub/session relay server.
type fakeHub struct {
	*sessiontest.Server
	srv   *hub.RelayServer
	up    chan *hub.RelaySession
	msgs  chan client.RelayMessage
	downs chan error
}

func (h *fakeHub) RelayUp(s *hub.RelaySession, _ *client.RelayHello)       { h.up <- s }
func (h *fakeHub) RelayMessage(_ *hub.RelaySession, m client.RelayMessage) { h.msgs <- m }
func (h *fakeHub) RelayDown(_ *hub.RelaySession, err error)                { h.downs <- err }

func relayKey() ed25519.PrivateKey {
	s := make([]byte, ed25519.SeedSize)
	s[0] = 9
	return ed25519.NewKeyFromSeed(s)
}

func startHub(t *testing.T, cfg hub.Config) *fakeHub {
	t.Helper()
	h := &fakeHub{up: make(chan *hub.RelaySession, 100), msgs: make(chan client.RelayMessage, 1000), downs: make(chan error, 100)}
	cfg.Lookup = lookup{"relay-1": relayKey().Public().(ed25519.PublicKey)}
	cfg.Logger = testlog.New(t)
	h.srv = hub.NewRelayServer(cfg, h)
	h.Server = sessiontest.Start(t, "/v1/gitlab/session", h.srv)
	t.Cleanup(h.srv.Close)
	return h
}

// relay plays vk-gitlab.
type relay struct {
	report    client.RelayReport
	connected chan client.RelayWelcome
	statuses  chan *client.ServerStatus
	downs     chan error
}

func newRelay(runners int) *relay {
	r := &relay{connected: make(chan client.RelayWelcome, 100), statuses: make(chan *client.ServerStatus, 100), downs: make(chan error, 100)}
	for i := range runners {
		r.report.Runners = append(r.report.Runners, client.RunnerReport{Name: fmt.Sprint("r", i), RequestConcurrency: 1})
	}
	return r
}

func (r *relay) Connected(w client.RelayWelcome) client.RelayReport {
	r.connected <- w
	return r.report
}
func (r *relay) ServerStatus(s *client.ServerStatus) { r.statuses <- s }
func (r *relay) Update(*client.Update)               {}
func (r *relay) Disconnected(err error)              { r.downs <- err }
func (r *relay) Heartbeat() client.RelayHeartbeat {
	return client.RelayHeartbeat{Runners: []client.RunnerHeartbeat{{Name: "r0", State: client.RunnerPolling}}}
}

func recv[T any](t *testing.T, ch chan T, what string) T {
	t.Helper()
	return sessiontest.Recv(t, ch, what)
}

func newClient(t *testing.T, h *fakeHub, r *relay, fc clock.Clock, log *slog.Logger) *hubsession.Client {
	t.Helper()
	if log == nil {
		log = testlog.New(t)
	}
	c, err := hubsession.New(hubsession.Config{URL: h.URL, RelayID: "relay-1", Key: relayKey(), TLSConfig: h.ClientTLS(t),
		Clock: fc, Rand: func() float64 { return 0.5 }, Logger: log}, r)
	if err != nil {
		t.Fatal(err)
	}
	sessiontest.Run(t, c.Run)
	return c
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	sessiontest.WaitFor(t, what, cond)
}

// spec: RSESS-01, RSESS-07, RSESS-10
// The relay holds its session: report after welcome, heartbeats at the
// stated period, and the hub's server status gates GitLab requests: not
// before the first status, not while pending, yes while approved, never
// after a refusal. A lost session is redialed.
func TestRelaySessionApproval(t *testing.T) {
	h := startHub(t, hub.Config{})
	fc := clock.NewFake(t0)
	r := newRelay(2)
	c := newClient(t, h, r, fc, nil)
	w := recv(t, r.connected, "welcome")
	if w.Version != client.RelayVersion {
		t.Fatalf("version %d", w.Version)
	}
	s := recv(t, h.up, "RelayUp")
	if rep, ok := recv(t, h.msgs, "report").(*client.RelayReport); !ok || len(rep.Runners) != 2 {
		t.Fatalf("hub got %+v, want the report", rep)
	}
	if c.MayRequestJobs() {
		t.Fatal("may request jobs before the first status")
	}
	steps := []struct {
		status client.ApprovalStatus
		may    bool
	}{
		{client.ApprovalPending, false},
		{client.ApprovalApproved, true},
		{client.ApprovalRebound, false},
		{client.ApprovalApproved, true},
		{client.ApprovalRefused, false},
		{client.ApprovalApproved, false}, // never after a permanent refusal
	}
	for _, st := range steps {
		if err := s.Send(client.ServerStatus{Status: st.status}); err != nil {
			t.Fatal(err)
		}
		if got := recv(t, r.statuses, "status"); got.Status != st.status {
			t.Fatalf("relay got %v, want %v", got.Status, st.status)
		}
		if c.MayRequestJobs() != st.may {
			t.Fatalf("after %v MayRequestJobs = %v", st.status, !st.may)
		}
	}

	// Heartbeats at the period the hub stated.
	waitFor(t, "heartbeat timer", func() bool { return fc.Pending() >= 1 })
	fc.Advance(time.Duration(w.HeartbeatSecs) * time.Second)
	if hb, ok := recv(t, h.msgs, "heartbeat").(*client.RelayHeartbeat); !ok || hb.Runners[0].State != client.RunnerPolling {
		t.Fatalf("hub got %+v, want heartbeat", hb)
	}

	// A cut session is redialed after the 1 s backoff: a new session.
	h.CutAll()
	recv(t, r.downs, "Disconnected")
	recv(t, h.downs, "RelayDown")
	waitFor(t, "backoff timer", func() bool { return fc.Pending() >= 1 })
	fc.Advance(time.Second)
	recv(t, r.connected, "second welcome")
	if s2 := recv(t, h.up, "second RelayUp"); s2 == s || s2.Handle() == s.Handle() {
		t.Fatal("relay session resumed; want a new one")
	}
	if _, ok := recv(t, h.msgs, "report").(*client.RelayReport); !ok {
		t.Fatal("no report on the new session")
	}
}

// spec: RSESS-09
// A relay whose inventory is over the limits has its session ended.
func TestRelayOverLimits(t *testing.T) {
	h := startHub(t, hub.Config{})
	r := newRelay(client.MaxRelayRunners + 1)
	newClient(t, h, r, clock.NewFake(t0), nil)
	recv(t, r.connected, "welcome")
	err := recv(t, r.downs, "Disconnected")
	if !errors.Is(err, hubsession.ErrRefused) || !strings.Contains(err.Error(), string(client.RelayErrorLimits)) {
		t.Fatalf("relay told %v, want a limits refusal", err)
	}
	if down := recv(t, h.downs, "RelayDown"); !errors.Is(down, hub.ErrLimits) {
		t.Fatalf("hub down %v", down)
	}
}

// spec: RSESS-12, RSESS-10
// A hub speaking only version 1 refuses vk-gitlab (2..3): the relay logs
// that the hub must be upgraded, requests no GitLab jobs, and redials
// about once a minute.
func TestRelayVersionRefusedBackoff(t *testing.T) {
	h := startHub(t, hub.Config{RelayVersions: client.VersionRange{Min: 1, Max: 1}})
	fc := clock.NewFake(t0)
	var logs sessiontest.Buffer
	c := newClient(t, h, newRelay(1), fc, slog.New(slog.NewTextHandler(&logs, nil)))
	for dial := int64(1); dial <= 3; dial++ {
		waitFor(t, "redial timer", func() bool { return fc.Pending() >= 1 && h.Dials() == dial })
		if c.MayRequestJobs() {
			t.Fatal("may request jobs after a version refusal")
		}
		fc.Advance(53 * time.Second) // 60 s ± 10%, pinned to 60 s by Rand
		if fc.Pending() != 1 || h.Dials() != dial {
			t.Fatalf("redialed before about a minute (dials %d)", h.Dials())
		}
		fc.Advance(7 * time.Second)
		waitFor(t, "redial", func() bool { return h.Dials() == dial+1 })
	}
	if !strings.Contains(logs.String(), "the hub must be upgraded") {
		t.Fatalf("log does not say the hub must be upgraded:\n%s", logs.String())
	}
}
