package session

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/sessionclient/sessiontest"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/internal/wsconn"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

// lookup is an in-memory PrincipalLookup.
type lookup struct {
	mu sync.Mutex
	m  map[string]Principal // kind/id
}

func (l *lookup) add(kind Kind, id string, key ed25519.PrivateKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]Principal{}
	}
	l.m[string(kind)+"/"+id] = Principal{Key: key.Public().(ed25519.PublicKey)}
}

func (l *lookup) remove(kind Kind, id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.m[string(kind)+"/"+id]
	p.Removed = true
	l.m[string(kind)+"/"+id] = p
}

func (l *lookup) LookupPrincipal(_ context.Context, kind Kind, id string) (Principal, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.m[string(kind)+"/"+id]
	if !ok {
		return Principal{}, fmt.Errorf("%w: %s %s", ErrUnknownPrincipal, kind, id)
	}
	return p, nil
}

// event is one handler call, in the order the driver saw it.
type event struct {
	kind    string // up, msg, down
	node    string
	s       *NodeSession
	rs      *RelaySession
	resumed bool
	msg     dispatch.Message
	rmsg    client.RelayMessage
	err     error
}

// recorder plays the hub core: it records every handler call.
type recorder struct {
	events chan event
	onUp   func(s *NodeSession)
	onDown func(s *NodeSession) // called before the down is recorded
}

func newRecorder() *recorder { return &recorder{events: make(chan event, 4096)} }

func (r *recorder) NodeUp(s *NodeSession, h *dispatch.Hello, resumed bool) {
	if r.onUp != nil {
		r.onUp(s)
	}
	r.events <- event{kind: "up", node: s.Node(), s: s, resumed: resumed}
}
func (r *recorder) NodeMessage(s *NodeSession, m dispatch.Message) {
	r.events <- event{kind: "msg", node: s.Node(), s: s, msg: m}
}
func (r *recorder) NodeDown(s *NodeSession, err error) {
	if r.onDown != nil {
		r.onDown(s)
	}
	r.events <- event{kind: "down", node: s.Node(), s: s, err: err}
}
func (r *recorder) RelayUp(s *RelaySession, h *client.RelayHello) {
	r.events <- event{kind: "up", node: s.Relay(), rs: s}
}
func (r *recorder) RelayMessage(s *RelaySession, m client.RelayMessage) {
	r.events <- event{kind: "msg", node: s.Relay(), rs: s, rmsg: m}
}
func (r *recorder) RelayDown(s *RelaySession, err error) {
	r.events <- event{kind: "down", node: s.Relay(), rs: s, err: err}
}

func (r *recorder) next(t testing.TB, kind string) event {
	t.Helper()
	select {
	case e := <-r.events:
		if e.kind != kind {
			t.Fatalf("handler event %s (%v %v %v), want %s", e.kind, e.msg, e.rmsg, e.err, kind)
		}
		return e
	case <-time.After(20 * time.Second):
		t.Fatalf("no %s event in 20 s", kind)
	}
	return event{}
}

// hub is a NodeServer and a RelayServer on loopback TLS 1.3 with the
// hub's own CA (hub/pki), served by sessiontest (which tracks the
// accepted connections for cutting).
type hub struct {
	nodes  *NodeServer
	relays *RelayServer
	rec    *recorder
	look   *lookup
	srv    *sessiontest.Server
	cliTLS *tls.Config
}

func startHub(t testing.TB, cfg Config) *hub {
	t.Helper()
	h := &hub{rec: newRecorder(), look: &lookup{}}
	cfg.Lookup = h.look
	if cfg.Logger == nil {
		cfg.Logger = testlog.New(t)
	}
	h.nodes = NewNodeServer(cfg, h.rec)
	h.relays = NewRelayServer(cfg, h.rec)
	mux := http.NewServeMux()
	mux.Handle("GET /v1/node/session", h.nodes)
	mux.Handle("GET /v1/gitlab/session", h.relays)
	h.srv = sessiontest.Start(t, "", mux)
	h.cliTLS = h.srv.ClientTLS(t)
	t.Cleanup(func() { // before the server closes
		h.nodes.Close()
		h.relays.Close()
	})
	return h
}

// unregistered fails t unless the principal's session leaves the
// registry within 5 s. An ended session leaves it just after its Down is
// announced (server.ServeHTTP), so a test that saw the Down waits the
// few instructions between the two; a session that stays fails.
func (h *hub) unregistered(t testing.TB, kind Kind, id string) {
	t.Helper()
	registered := func() bool { return h.nodes.Session(id) != nil }
	if kind == KindRelay {
		registered = func() bool { return h.relays.Session(id) != nil }
	}
	deadline := time.Now().Add(5 * time.Second)
	for registered() {
		if time.Now().After(deadline) {
			t.Fatalf("the ended %s session of %s is still registered after 5 s", kind, id)
		}
		runtime.Gosched()
	}
}

// cutAll closes every accepted TCP connection under the hub's feet.
func (h *hub) cutAll() { h.srv.CutAll() }

func (h *hub) nodeURL() string  { return h.srv.URL + "/v1/node/session" }
func (h *hub) relayURL() string { return h.srv.URL + "/v1/gitlab/session" }

func testKey(seed byte) ed25519.PrivateKey {
	s := make([]byte, ed25519.SeedSize)
	s[0] = seed
	return ed25519.NewKeyFromSeed(s)
}

// rawNode is a hand-driven node: frames in and out, no session logic.
type rawNode struct {
	t testing.TB
	c *wsconn.Conn
}

func dialNode(t testing.TB, h *hub, id string, key ed25519.PrivateKey) (*rawNode, error) {
	c, err := wsconn.Dial(t.Context(), h.nodeURL(), key, id, h.cliTLS, nil)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.CloseNow() })
	return &rawNode{t: t, c: c}, nil
}

func (n *rawNode) send(f dispatch.Frame) {
	n.t.Helper()
	b, err := dispatch.Encode(f)
	if err != nil {
		n.t.Fatal(err)
	}
	if err := n.c.WriteFrame(n.t.Context(), b); err != nil {
		n.t.Fatal(err)
	}
}

func (n *rawNode) recv() (dispatch.Frame, error) {
	ctx, cancel := context.WithTimeout(n.t.Context(), 20*time.Second)
	defer cancel()
	b, err := n.c.ReadFrame(ctx)
	if err != nil {
		return dispatch.Frame{}, err
	}
	return dispatch.Decode(b)
}

func (n *rawNode) mustRecv() dispatch.Frame {
	n.t.Helper()
	f, err := n.recv()
	if err != nil {
		n.t.Fatalf("node recv: %v", err)
	}
	return f
}

// hello sends a hello and returns the hub's answer.
func (n *rawNode) hello(id string, vr dispatch.Range, resume *dispatch.Resume) dispatch.Frame {
	n.t.Helper()
	n.send(dispatch.Frame{Msg: dispatch.Hello{Versions: vr, Node: id, Resume: resume}})
	return n.mustRecv()
}
