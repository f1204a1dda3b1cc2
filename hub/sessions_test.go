package hub

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/pki"
	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/internal/wsconn"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
	"github.com/vk-ci/vk/reqsign"
)

// wsPeer is a hand-driven session peer over a real WebSocket.
type wsPeer struct {
	t   testing.TB
	c   *wsconn.Conn
	seq uint64
}

// dialPeer dials a session as principal id with key (enrolling it as kind
// when enrol is set).
func dialPeer(t testing.TB, h *harness, path, id string, key ed25519.PrivateKey, kind store.PrincipalKind, enrol bool) *wsPeer {
	t.Helper()
	if enrol {
		if err := h.srv.Store().CreatePrincipal(t.Context(), store.Principal{ID: id, Kind: kind, PublicKey: key.Public().(ed25519.PublicKey), Created: testStart}); err != nil {
			t.Fatal(err)
		}
	}
	tcfg, _ := pki.ClientConfig(h.srv.CAPEM(), "127.0.0.1")
	c, err := wsconn.Dial(t.Context(), "wss://"+h.srv.Addr()+path, key, id, tcfg, &wsconn.Options{})
	if err != nil {
		t.Fatalf("dial %s: %v", path, err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return &wsPeer{t: t, c: c}
}

func (p *wsPeer) write(b []byte, err error) {
	p.t.Helper()
	if err != nil {
		p.t.Fatal(err)
	}
	if err := p.c.WriteFrame(p.t.Context(), b); err != nil {
		p.t.Fatal(err)
	}
}

func (p *wsPeer) read() []byte {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.t.Context(), 10*time.Second)
	defer cancel()
	b, err := p.c.ReadFrame(ctx)
	if err != nil {
		p.t.Fatalf("read: %v", err)
	}
	return b
}

func (p *wsPeer) node(m dispatch.Message) {
	p.t.Helper()
	var seq uint64
	if !dispatch.Stateless(m) {
		p.seq++
		seq = p.seq
	}
	p.write(dispatch.Encode(dispatch.Frame{Seq: seq, Msg: m}))
}

// nodeRead returns the next non-keepalive frame's message.
func (p *wsPeer) nodeRead() dispatch.Message {
	p.t.Helper()
	for {
		f, err := dispatch.Decode(p.read())
		if err != nil {
			p.t.Fatal(err)
		}
		if _, ok := f.Msg.(*dispatch.Keepalive); !ok {
			return f.Msg
		}
	}
}

func (p *wsPeer) relay(m client.RelayMessage, stateless bool) {
	p.t.Helper()
	var seq uint64
	if !stateless {
		p.seq++
		seq = p.seq
	}
	p.write(client.EncodeRelayFrame(client.RelayFrame{Seq: seq, Msg: m}))
}

func (p *wsPeer) relayRead() client.RelayMessage {
	p.t.Helper()
	f, err := client.DecodeRelayFrame(p.read())
	if err != nil {
		p.t.Fatal(err)
	}
	return f.Msg
}

// TestRealSessions runs a reservation with the node and the relay on real
// WebSocket sessions (hub/session wired to the driver): the relay's
// report is answered with the server status, the node's report and held
// make it placeable, the offer and its reply travel over the node's
// session.
//
// spec: API-21, ARB-12, ARB-22, ARB-24, NSESS-04, NSESS-11, NSESS-12, RSESS-07
func TestRealSessions(t *testing.T) {
	h := newHarness(t)
	req := client.ReservationRequest{Runner: "r1", Queue: true, RequestID: client.NewRequestID(), Placement: testPlacement}
	h.wantErr(http.StatusServiceUnavailable, client.CodeUnavailable, "POST", "/v1/reservations", req)

	rl := dialPeer(t, h, "/v1/gitlab/session", h.relay, h.key, store.KindRelay, false)
	rl.relay(client.RelayHello{Versions: client.RelayClientVersions, Relay: h.relay}, true)
	if w, ok := rl.relayRead().(*client.RelayWelcome); !ok || w.Version != client.RelayVersion {
		t.Fatalf("relay welcome = %+v", w)
	}
	rl.relay(client.RelayReport{Concurrent: 4, Runners: []client.RunnerReport{{Name: "r1", Placement: testPlacement, RequestConcurrency: 1}}}, false)
	if st, ok := rl.relayRead().(*client.ServerStatus); !ok || st.Status != client.ApprovalApproved {
		t.Fatalf("server status = %#v", st)
	}
	rl.relay(client.RelayHeartbeat{Runners: []client.RunnerHeartbeat{{Name: "r1", State: client.RunnerPolling}}}, false)

	nkey, _ := reqsign.GenerateKey()
	nd := dialPeer(t, h, "/v1/node/session", "n-ws", nkey, store.KindNode, true)
	nd.node(dispatch.Hello{Versions: dispatch.NodeVersions, Node: "n-ws"})
	if w, ok := nd.nodeRead().(*dispatch.Welcome); !ok || w.HeartbeatSecs <= 0 {
		t.Fatalf("node welcome = %#v", w)
	}
	nd.node(dispatch.Report{Resources: dispatch.Resources{Mem: 4 << 30, Disk: 20 << 30, CPUs: 4}, Pools: []string{"linux"}, Labels: []string{"ssd"}})
	nd.node(dispatch.Held{})

	// The heartbeat and the node's frames cross real sockets: retry the
	// request until the session state reached the driver.
	var tk client.ReservationTicket
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body, _ := h.call("POST", "/v1/reservations", req)
		if code == http.StatusAccepted {
			if err := json.Unmarshal(body, &tk); err != nil {
				t.Fatal(err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("reservation = %d %s", code, body)
		}
		time.Sleep(5 * time.Millisecond) // polling an external socket peer, not synchronising in-process
	}
	var off *dispatch.Offer
	for off == nil {
		switch m := nd.nodeRead().(type) {
		case *dispatch.Offer:
			off = m
		case *dispatch.Heartbeat, *dispatch.Settings:
		default:
			t.Fatalf("node got %T, want an offer", m)
		}
	}
	nd.node(dispatch.OfferReply{Reservation: off.Reservation, Reply: dispatch.ReplyAccepted, LeaseSecs: 90})
	var g client.ReservationGrant
	h.want(http.StatusCreated, &g, "GET", "/v1/reservations/tickets/"+tk.Ticket+"?wait=30", nil)
	if g.Node != "n-ws" || g.Reservation != off.Reservation {
		t.Fatalf("grant = %+v, want %s on n-ws", g, off.Reservation)
	}
}
