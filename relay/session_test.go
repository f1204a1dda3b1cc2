package relay

import (
	"context"
	"crypto/ed25519"
	"testing"
	"time"

	hubsess "github.com/vk-ci/vk/hub/session"
	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/relay/internal/hubfake"
)

type sessLookup struct{ key ed25519.PublicKey }

func (l sessLookup) LookupPrincipal(_ context.Context, kind hubsess.Kind, id string) (hubsess.Principal, error) {
	if id == hubfake.RelayID && kind == hubsess.KindRelay {
		return hubsess.Principal{Key: l.key}, nil
	}
	return hubsess.Principal{}, hubsess.ErrUnknownPrincipal
}

// sessHub plays the hub core around the real hub/session relay server.
type sessHub struct {
	up   chan *hubsess.RelaySession
	msgs chan client.RelayMessage
}

func (h *sessHub) RelayUp(s *hubsess.RelaySession, _ *client.RelayHello)       { h.up <- s }
func (h *sessHub) RelayMessage(_ *hubsess.RelaySession, m client.RelayMessage) { h.msgs <- m }
func (h *sessHub) RelayDown(*hubsess.RelaySession, error)                      {}

// Run holds the hub session: the report describes the relay and its
// runners, no GitLab job is asked for before the hub approved the server
// (the runners report server_pending), and heartbeats list the job held.
// The clock never advances here, so no periodic heartbeat is ever due:
// every heartbeat the hub sees is sent because something changed.
//
// spec: RSESS-01, RSESS-02, RSESS-03, RSESS-04, RSESS-05, RSESS-06, RSESS-07, RSESS-08
func TestRunSession(t *testing.T) {
	e := newRunEnvWith(t, 3600, clock.NewFake(t0), gitlabfake.Options{})
	sh := &sessHub{up: make(chan *hubsess.RelaySession, 10), msgs: make(chan client.RelayMessage, 10000)}
	srv := hubsess.NewRelayServer(hubsess.Config{Lookup: sessLookup{e.hub.Key().Public().(ed25519.PublicKey)},
		Logger: testlog.New(t), Skew: 1000 * time.Hour}, sh)
	t.Cleanup(func() { srv.Close() })
	e.hub.Handle(client.RouteRelaySession, srv)
	glID := e.pipeline(t)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := Run(ctx, e.cfg, e.toks, testlog.New(t), Options{Clock: e.clk}); err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })

	var s *hubsess.RelaySession
	select {
	case s = <-sh.up:
	case <-time.After(20 * time.Second):
		t.Fatal("no session")
	}
	next := func(what string, ok func(client.RelayMessage) bool) client.RelayMessage {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case m := <-sh.msgs:
				if ok(m) {
					return m
				}
			case <-deadline:
				t.Fatalf("no %s", what)
			}
		}
	}
	rep := next("report", func(m client.RelayMessage) bool { _, ok := m.(*client.RelayReport); return ok }).(*client.RelayReport)
	if rep.SystemID == "" || rep.Concurrent != 10 || rep.GitLabURL != e.gl.URL() || rep.Host == "" || len(rep.Runners) != 1 {
		t.Errorf("report = %+v", rep)
	}
	if r := rep.Runners[0]; r.Name != "r1" || r.GitLabRunnerID == 0 || !r.TokenAccepted || r.Placement.Pool != "linux" || r.RequestConcurrency != 1 {
		t.Errorf("runner report = %+v", r)
	}
	if err := s.Send(client.ServerStatus{Status: client.ApprovalPending}); err != nil {
		t.Fatal(err)
	}
	next("server_pending heartbeat", func(m client.RelayMessage) bool {
		hb, ok := m.(*client.RelayHeartbeat)
		return ok && hb.Runners[0].State == client.RunnerServerPending
	})
	if n := len(e.gl.RequestsTo(gitlabfake.RouteJobRequest)); n != 0 {
		t.Fatalf("%d GitLab job requests before approval", n)
	}
	if err := s.Send(client.ServerStatus{Status: client.ApprovalApproved}); err != nil {
		t.Fatal(err)
	}
	next("a heartbeat listing the job", func(m client.RelayMessage) bool {
		hb, ok := m.(*client.RelayHeartbeat)
		if !ok {
			return false
		}
		for _, ja := range hb.Runners[0].JobAdmissions {
			if ja.GitLabJob == glID && ja.Admission != "" {
				return true
			}
		}
		return false
	})
	// RSESS-08: a job held keeps running whatever the status.
	id := e.hub.OnlyJob(t)
	if err := s.Send(client.ServerStatus{Status: client.ApprovalPending}); err != nil {
		t.Fatal(err)
	}
	e.hub.AppendOutput(id, []byte("ok\n"))
	e.hub.Finish(id, client.JobResult{})
	if _, err := e.gl.WaitJobState(t.Context(), glID, gitlabfake.StateSuccess); err != nil {
		t.Fatal(err)
	}
}
