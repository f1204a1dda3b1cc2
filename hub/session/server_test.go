package session

import (
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"

	"github.com/vk-ci/vk/internal/wsconn"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

// These tests cover, from the relay side (and the node side where the
// node tests do not), the paths NodeServer and RelayServer share in
// server.go: the handshake's refusals, shutdown, and how a session ends.

// told is what a peer heard as the hub ended its connection: the next
// frame, then the close code and reason.
type told[F any] struct {
	f      F
	status wsconn.StatusCode
	reason string
}

// watch reads the next frame, then until the connection ends, in the
// background; it answers the close handshake.
func watch[F any](recv func() (F, error)) <-chan told[F] {
	got := make(chan told[F], 1)
	go func() {
		var tl told[F]
		tl.f, _ = recv()
		for {
			if _, err := recv(); err != nil {
				tl.status, tl.reason = wsconn.CloseStatus(err), wsconn.CloseReason(err)
				break
			}
		}
		got <- tl
	}()
	return got
}

// relayUp dials as relay id, says hello, reads the welcome and returns
// the session the driver was told of.
func relayUp(t testing.TB, h *hub, id string, key ed25519.PrivateKey) (*rawRelay, *RelaySession) {
	t.Helper()
	r := dialRelay(t, h, id, key)
	r.send(client.RelayFrame{Msg: client.RelayHello{Versions: client.RelayClientVersions, Relay: id}})
	if _, ok := r.mustRecv().Msg.(*client.RelayWelcome); !ok {
		t.Fatal("relay not welcomed")
	}
	return r, h.rec.next(t, "up").rs
}

// relayTold checks a relay heard an error frame of code and then a close
// with status and reason.
func relayTold(t testing.TB, tl told[client.RelayFrame], code client.RelayErrorCode, status wsconn.StatusCode, reason string) *client.RelayError {
	t.Helper()
	e, ok := tl.f.Msg.(*client.RelayError)
	if !ok || e.Code != code {
		t.Fatalf("relay told %+v, want %s error", tl.f.Msg, code)
	}
	if tl.status != status || tl.reason != reason {
		t.Fatalf("closed %d %q, want %d %q", tl.status, tl.reason, status, reason)
	}
	return e
}

func noEvents(t testing.TB, h *hub) {
	t.Helper()
	select {
	case e := <-h.rec.events:
		t.Fatalf("unexpected handler event %+v", e)
	default:
	}
}

// spec: AUTH-06, RSESS-01
// A relay whose first frame is not a hello, or whose hello names another
// relay than its key, is refused in the relay protocol's vocabulary with
// the close code and reason a node would get; the driver hears nothing.
func TestRelayHandshakeRefused(t *testing.T) {
	h := startHub(t, Config{})
	key := testKey(3)
	h.look.add(KindRelay, "relay-1", key)
	tests := []struct {
		name   string
		first  client.RelayFrame
		code   client.RelayErrorCode
		status wsconn.StatusCode
		reason string
	}{
		{"not a hello", client.RelayFrame{Msg: client.RelayKeepalive{}},
			client.RelayErrorProtocol, wsconn.StatusProtocolError, "expected hello"},
		{"names another relay", client.RelayFrame{Msg: client.RelayHello{Versions: client.RelayClientVersions, Relay: "relay-2"}},
			client.RelayErrorUnauthorized, wsconn.StatusPolicyViolation, "unauthorized"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := dialRelay(t, h, "relay-1", key)
			r.send(tt.first)
			relayTold(t, <-watch(r.recv), tt.code, tt.status, tt.reason)
		})
	}
	noEvents(t, h)
	if n := h.relays.Len(); n != 0 {
		t.Fatalf("%d relay sessions registered after refusals", n)
	}
}

// spec: RSESS-01
// A relay session ends with its connection: it is not kept for resume,
// the driver hears RelayDown, the registry forgets it and Send fails.
func TestRelaySessionDropped(t *testing.T) {
	h := startHub(t, Config{})
	key := testKey(3)
	h.look.add(KindRelay, "relay-1", key)
	r, s := relayUp(t, h, "relay-1", key)
	if h.relays.Session("relay-1") != s || h.relays.Len() != 1 {
		t.Fatal("live session not registered")
	}
	r.c.CloseNow()
	if down := h.rec.next(t, "down"); down.rs != s || down.err == nil {
		t.Fatalf("down = %v for %p, want an error for %p", down.err, down.rs, s)
	}
	if s.Ended() == nil {
		t.Fatal("relay session still live after its connection dropped")
	}
	h.unregistered(t, KindRelay, "relay-1")
	if h.relays.Len() != 0 {
		t.Fatal("dropped relay session still counted")
	}
	if err := s.Send(client.ServerStatus{Status: client.ApprovalApproved}); !errors.Is(err, ErrEnded) {
		t.Fatalf("Send after drop = %v, want ErrEnded", err)
	}
}

// spec: RSESS-01
// The driver ends a relay's session (e.g. the relay was removed): the
// relay is told why with the code it was given, the connection closes
// with 1008 and that code as the reason, and RelayDown says ErrEnded.
func TestRelaySessionEnd(t *testing.T) {
	h := startHub(t, Config{})
	key := testKey(3)
	h.look.add(KindRelay, "relay-1", key)
	r, s := relayUp(t, h, "relay-1", key)
	got := watch(r.recv)
	s.End(client.RelayErrorUnauthorized, "relay removed by an operator")
	e := relayTold(t, <-got, client.RelayErrorUnauthorized, wsconn.StatusPolicyViolation, string(client.RelayErrorUnauthorized))
	if !strings.Contains(e.Message, "removed") {
		t.Fatalf("relay told %q", e.Message)
	}
	if down := h.rec.next(t, "down"); down.rs != s || !errors.Is(down.err, ErrEnded) {
		t.Fatalf("down = %v", down.err)
	}
	h.unregistered(t, KindRelay, "relay-1")
}

// spec: RSESS-01
// Shutdown tells every relay to redial later (shutdown, 1001), waits for
// RelayDown, and refuses later hellos the same way.
func TestRelayServerClose(t *testing.T) {
	h := startHub(t, Config{})
	key := testKey(3)
	h.look.add(KindRelay, "relay-1", key)
	r, s := relayUp(t, h, "relay-1", key)
	got := watch(r.recv)
	h.relays.Close()
	relayTold(t, <-got, client.RelayErrorShutdown, wsconn.StatusGoingAway, string(client.RelayErrorShutdown))
	if down := h.rec.next(t, "down"); down.rs != s || !errors.Is(down.err, errShutdown) {
		t.Fatalf("down = %v, want shutdown", down.err)
	}
	if h.relays.Len() != 0 {
		t.Fatal("sessions registered after Close")
	}

	r2 := dialRelay(t, h, "relay-1", key)
	r2.send(client.RelayFrame{Msg: client.RelayHello{Versions: client.RelayClientVersions, Relay: "relay-1"}})
	relayTold(t, <-watch(r2.recv), client.RelayErrorShutdown, wsconn.StatusGoingAway, "shutdown")
	noEvents(t, h)
}

// A node saying hello after NodeServer.Close is refused with shutdown
// (1001) and reaches no handler.
func TestNodeHelloAfterClose(t *testing.T) {
	h := startHub(t, Config{})
	key := testKey(1)
	h.look.add(KindNode, "n1", key)
	h.nodes.Close()
	n, err := dialNode(t, h, "n1", key)
	if err != nil {
		t.Fatal(err)
	}
	n.send(dispatch.Frame{Msg: dispatch.Hello{Versions: dispatch.NodeVersions, Node: "n1"}})
	tl := <-watch(n.recv)
	if e, ok := tl.f.Msg.(*dispatch.ErrorFrame); !ok || e.Code != dispatch.ErrorShutdown {
		t.Fatalf("hello after Close answered %+v, want shutdown", tl.f.Msg)
	}
	if tl.status != wsconn.StatusGoingAway || tl.reason != "shutdown" {
		t.Fatalf("closed %d %q, want 1001 shutdown", tl.status, tl.reason)
	}
	noEvents(t, h)
}
