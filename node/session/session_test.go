package session_test

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	hubsession "github.com/vk-ci/vk/hub/session"
	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/sessionclient/sessiontest"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/node/session"
	"github.com/vk-ci/vk/proto/dispatch"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// hub plays the hub core around the real hub/session server.
type hub struct {
	*sessiontest.Server
	srv   *hubsession.NodeServer
	up    chan *hubsession.NodeSession
	msgs  chan dispatch.Message
	downs chan error
}

type lookup map[string]ed25519.PublicKey

func (l lookup) LookupPrincipal(_ context.Context, kind hubsession.Kind, id string) (hubsession.Principal, error) {
	if k, ok := l[id]; ok && kind == hubsession.KindNode {
		return hubsession.Principal{Key: k}, nil
	}
	return hubsession.Principal{}, hubsession.ErrUnknownPrincipal
}

func (h *hub) NodeUp(s *hubsession.NodeSession, _ *dispatch.Hello, _ bool) { h.up <- s }
func (h *hub) NodeMessage(_ *hubsession.NodeSession, m dispatch.Message)   { h.msgs <- m }
func (h *hub) NodeDown(_ *hubsession.NodeSession, err error)               { h.downs <- err }

func startHub(t *testing.T, cfg hubsession.Config, keys lookup) *hub {
	t.Helper()
	h := &hub{up: make(chan *hubsession.NodeSession, 100), msgs: make(chan dispatch.Message, 10000), downs: make(chan error, 100)}
	cfg.Lookup = keys
	cfg.Logger = testlog.New(t)
	h.srv = hubsession.NewNodeServer(cfg, h)
	h.Server = sessiontest.Start(t, "/v1/node/session", h.srv)
	t.Cleanup(h.srv.Close)
	return h
}

// agent plays the node agent.
type agent struct {
	c          *session.Client
	connected  chan dispatch.Welcome
	msgs       chan dispatch.Message
	downs      chan error
	sendReport bool
}

func newAgent() *agent {
	return &agent{connected: make(chan dispatch.Welcome, 100), msgs: make(chan dispatch.Message, 10000), downs: make(chan error, 100), sendReport: true}
}

func (a *agent) Connected(w dispatch.Welcome) {
	if !w.Resumed && a.sendReport {
		a.c.Send(dispatch.Report{Host: "node-host"})
		a.c.Send(dispatch.Held{})
	}
	a.connected <- w
}
func (a *agent) Message(m dispatch.Message)    { a.msgs <- m }
func (a *agent) Disconnected(err error)        { a.downs <- err }
func (a *agent) Heartbeat() dispatch.Heartbeat { return dispatch.Heartbeat{State: dispatch.NodeReady} }

func recv[T any](t *testing.T, ch chan T, what string) T {
	t.Helper()
	return sessiontest.Recv(t, ch, what)
}

// waitPending polls until the fake clock has at least n timers armed by
// the client (the real sockets in between make this a poll).
func waitPending(t *testing.T, fc *clock.Fake, n int) {
	t.Helper()
	sessiontest.WaitFor(t, fmt.Sprintf("%d fake clock timers", n), func() bool { return fc.Pending() >= n })
}

func nodeKey() ed25519.PrivateKey {
	s := make([]byte, ed25519.SeedSize)
	s[0] = 7
	return ed25519.NewKeyFromSeed(s)
}

func newClient(t *testing.T, h *hub, a *agent, fc clock.Clock, versions dispatch.Range) *session.Client {
	t.Helper()
	c, err := session.New(session.Config{URL: h.URL, NodeID: "n1", Key: nodeKey(), TLSConfig: h.ClientTLS(t), Versions: versions,
		Clock: fc, Rand: func() float64 { return 0.5 }, Logger: testlog.New(t)}, a)
	if err != nil {
		t.Fatal(err)
	}
	a.c = c
	return c
}

func run(t *testing.T, c *session.Client) { sessiontest.Run(t, c.Run) }

// spec: NSESS-11, NSESS-24, NSESS-01, AUTH-06
// The client connects with the node key, the agent sends report then
// held from Connected, hub messages reach the agent, and heartbeats
// follow the period the hub stated.
func TestClientConnects(t *testing.T) {
	h := startHub(t, hubsession.Config{}, lookup{"n1": nodeKey().Public().(ed25519.PublicKey)})
	fc := clock.NewFake(t0)
	a := newAgent()
	c := newClient(t, h, a, fc, dispatch.Range{})
	run(t, c)
	w := recv(t, a.connected, "welcome")
	if w.Resumed || w.Version != dispatch.Version || c.Handle() != w.Handle || c.Version() != w.Version {
		t.Fatalf("welcome %+v, client handle %q version %d", w, c.Handle(), c.Version())
	}
	s := recv(t, h.up, "NodeUp")
	if _, ok := recv(t, h.msgs, "report").(*dispatch.Report); !ok {
		t.Fatal("first node message is not the report")
	}
	if _, ok := recv(t, h.msgs, "held").(*dispatch.Held); !ok {
		t.Fatal("second node message is not held")
	}
	if err := s.Send(dispatch.Offer{Reservation: "r1", LeaseSecs: 30}); err != nil {
		t.Fatal(err)
	}
	if o, ok := recv(t, a.msgs, "offer").(*dispatch.Offer); !ok || o.Reservation != "r1" {
		t.Fatalf("agent got %+v", o)
	}
	waitPending(t, fc, 1) // the heartbeat timer
	fc.Advance(time.Duration(w.HeartbeatSecs) * time.Second)
	if hb, ok := recv(t, h.msgs, "heartbeat").(*dispatch.Heartbeat); !ok || hb.State != dispatch.NodeReady {
		t.Fatalf("hub got %+v, want heartbeat", hb)
	}
	// Losing the connection is reported to the agent and the hub.
	h.CutAll()
	recv(t, a.downs, "Disconnected")
	recv(t, h.downs, "NodeDown")
}

// spec: NSESS-24, NSESS-11
// The hub's side of the TCP connection is cut at random points while
// both sides stream numbered frames. The client redials, resumes its
// session (same handle, last seq) and every frame reaches each handler
// exactly once, in order.
func TestClientResumesAfterCuts(t *testing.T) {
	h := startHub(t, hubsession.Config{}, lookup{"n1": nodeKey().Public().(ed25519.PublicKey)})
	fc := clock.NewFake(t0)
	a := newAgent()
	c := newClient(t, h, a, fc, dispatch.Range{})
	run(t, c)
	w := recv(t, a.connected, "welcome")
	s := recv(t, h.up, "NodeUp")
	recv(t, h.msgs, "report")
	recv(t, h.msgs, "held")

	// Drive the fake clock so backoff timers fire (heartbeats too; they
	// are filtered out below).
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if fc.Pending() > 0 {
				fc.Advance(31 * time.Second)
			}
			time.Sleep(time.Millisecond)
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	const batches, per = 12, 25
	const n = batches * per
	rng := rand.New(rand.NewPCG(1, 2))
	var gotHub, gotNode []int
	reconnects := 0
	deadline := time.After(60 * time.Second)
	// take receives one delivery on either side.
	take := func() {
		select {
		case m := <-h.msgs:
			switch m := m.(type) {
			case *dispatch.Output:
				gotHub = append(gotHub, int(m.Offset))
			case *dispatch.Report, *dispatch.Held:
				t.Fatalf("hub got %T again: the session was not resumed", m)
			}
		case m := <-a.msgs:
			if r, ok := m.(*dispatch.Renew); ok {
				gotNode = append(gotNode, r.LeaseSecs)
			}
		case w2 := <-a.connected:
			reconnects++
			if !w2.Resumed || w2.Handle != w.Handle {
				t.Fatalf("reconnect welcome %+v, want resumed %s", w2, w.Handle)
			}
		case <-deadline:
			t.Fatalf("after 60 s: hub got %d, node got %d of %d", len(gotHub), len(gotNode), n)
		}
	}
	for batch := range batches {
		for i := batch*per + 1; i <= (batch+1)*per; i++ {
			if err := s.Send(dispatch.Renew{Reservation: "r", LeaseSecs: i}); err != nil {
				t.Fatalf("hub Send %d: %v", i, err)
			}
			if err := c.Send(dispatch.Output{Job: "j", Offset: int64(i)}); err != nil {
				t.Fatalf("node Send %d: %v", i, err)
			}
		}
		// Cut after a random number of this batch's deliveries.
		for range rng.IntN(per) {
			take()
		}
		h.CutAll()
		for len(gotHub) < (batch+1)*per || len(gotNode) < (batch+1)*per {
			take()
		}
	}
	for i := range n {
		if gotHub[i] != i+1 || gotNode[i] != i+1 {
			t.Fatalf("delivery %d: hub got %d, node got %d (want %d, in order, once)", i, gotHub[i], gotNode[i], i+1)
		}
	}
	if len(gotHub) != n || len(gotNode) != n {
		t.Fatalf("hub got %d, node got %d, want %d", len(gotHub), len(gotNode), n)
	}
	if reconnects < batches/2 {
		t.Fatalf("only %d resumes for %d cuts", reconnects, batches)
	}
	if h.srv.Session("n1") != s || s.Ended() != nil {
		t.Fatalf("hub session replaced or ended: %v", s.Ended())
	}
	t.Logf("%d hub connections, %d resumes for %d frames each way", h.Dials(), reconnects, n)
}

// A node offering only versions the hub does not speak is refused; the
// client redials about once a minute.
//
// spec: NSESS-03
func TestClientVersionRefused(t *testing.T) {
	h := startHub(t, hubsession.Config{}, lookup{"n1": nodeKey().Public().(ed25519.PublicKey)})
	fc := clock.NewFake(t0)
	a := newAgent()
	c := newClient(t, h, a, fc, dispatch.Range{Min: 1, Max: 2})
	run(t, c)
	waitPending(t, fc, 1)
	if h.Dials() != 1 {
		t.Fatalf("%d dials", h.Dials())
	}
	fc.Advance(59 * time.Second)
	if fc.Pending() != 1 || h.Dials() != 1 {
		t.Fatalf("redialed before a minute: pending %d dials %d", fc.Pending(), h.Dials())
	}
	fc.Advance(time.Second)
	h.WaitDials(t, 2)
	if len(a.connected) != 0 {
		t.Fatal("refused client reported a connection")
	}
}

// Redial backoff doubles from 1 s to 30 s while the hub is unreachable
// (jitter pinned to 0 by Rand = 0.5).
func TestClientBackoff(t *testing.T) {
	h := startHub(t, hubsession.Config{}, lookup{}) // the node is unknown: every dial is 401
	fc := clock.NewFake(t0)
	a := newAgent()
	c := newClient(t, h, a, fc, dispatch.Range{})
	run(t, c)
	for i, want := range []time.Duration{1, 2, 4, 8, 16, 30, 30} {
		want *= time.Second
		waitPending(t, fc, 1)
		dials := h.Dials()
		fc.Advance(want - time.Millisecond)
		if fc.Pending() != 1 {
			t.Fatalf("retry %d fired before %v", i, want)
		}
		fc.Advance(time.Millisecond)
		h.WaitDials(t, dials+1)
	}
}
