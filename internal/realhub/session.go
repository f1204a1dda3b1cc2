package realhub

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"strings"
	"testing"

	"github.com/vk-ci/vk/hubclient"
	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/relay/hubsession"
)

// SessionHandler is the relay side of a session a test holds itself (the
// relay/loop tests, which run the loops without relay.Run): Report is the
// report sent after each welcome, Heartbeat the current heartbeat, Status
// receives each server status.
type SessionHandler struct {
	Report    func() client.RelayReport
	Heartbeat func() client.RelayHeartbeat
	Status    func(client.ServerStatus)
}

type sessHandler struct{ h SessionHandler }

func (s sessHandler) Connected(client.RelayWelcome) client.RelayReport { return s.h.Report() }
func (s sessHandler) ServerStatus(st *client.ServerStatus) {
	if s.h.Status != nil {
		s.h.Status(*st)
	}
}
func (s sessHandler) Update(*client.Update)            {}
func (s sessHandler) Disconnected(error)               {}
func (s sessHandler) Heartbeat() client.RelayHeartbeat { return s.h.Heartbeat() }

// Session holds the relay's hub session for enrolment e with the real
// hubsession client on clk until the test ends; the hub takes reservations
// only from a relay whose session is up and reported the runner.
func Session(t testing.TB, e hubclient.Enrolment, clk clock.Clock, h SessionHandler) *hubsession.Client {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(e.CAPEM) {
		t.Fatal("realhub: enrolment CA holds no certificate")
	}
	tcfg := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13}
	url := strings.Replace(strings.TrimRight(e.HubURL, "/"), "https://", "wss://", 1) + "/v1/gitlab/session"
	c, err := hubsession.New(hubsession.Config{URL: url, RelayID: e.ID, Key: e.Key, TLSConfig: tcfg, Clock: clk,
		Release: "test", Logger: testlog.New(t)}, sessHandler{h})
	if err != nil {
		t.Fatalf("realhub: session: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return c
}
