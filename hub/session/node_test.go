package session

import (
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/vk-ci/vk/internal/wsconn"
	"github.com/vk-ci/vk/proto/dispatch"
	"github.com/vk-ci/vk/reqsign"
)

func welcomeOf(t testing.TB, f dispatch.Frame) *dispatch.Welcome {
	t.Helper()
	w, ok := f.Msg.(*dispatch.Welcome)
	if !ok {
		t.Fatalf("hub answered %T %+v, want welcome", f.Msg, f.Msg)
	}
	return w
}

// spec: NSESS-01, NSESS-03, NSESS-11, AUTH-06
// A node connects, negotiates the newest common version, receives the
// stated intervals, and frames flow both ways with seqs.
func TestNodeSessionExchange(t *testing.T) {
	h := startHub(t, Config{})
	key := testKey(1)
	h.look.add(KindNode, "n1", key)
	n, err := dialNode(t, h, "n1", key)
	if err != nil {
		t.Fatal(err)
	}
	w := welcomeOf(t, n.hello("n1", dispatch.NodeVersions, nil))
	if w.Version != dispatch.Version || w.Resumed || w.Handle == "" || w.HeartbeatSecs != 5 || w.UnreachableAfterSecs != 15 {
		t.Fatalf("welcome = %+v, want version %d, heartbeat 5, unreachable 15", w, dispatch.Version)
	}
	up := h.rec.next(t, "up")
	s := up.s
	if up.resumed || s.Handle() != w.Handle || s.Version() != dispatch.Version || !s.Connected() {
		t.Fatalf("NodeUp session %+v resumed=%v", s.State(), up.resumed)
	}
	if h.nodes.Session("n1") != s {
		t.Fatal("registry does not hold the session")
	}

	n.send(dispatch.Frame{Seq: 1, Msg: dispatch.Report{Host: "h1", Resources: dispatch.Resources{CPUs: 8}}})
	n.send(dispatch.Frame{Seq: 2, Msg: dispatch.Held{}})
	n.send(dispatch.Frame{Msg: dispatch.Keepalive{}})
	n.send(dispatch.Frame{Seq: 3, Msg: dispatch.Heartbeat{State: dispatch.NodeReady, Jobs: 1}})
	if m := h.rec.next(t, "msg").msg.(*dispatch.Report); m.Host != "h1" || m.Resources.CPUs != 8 {
		t.Fatalf("report = %+v", m)
	}
	if _, ok := h.rec.next(t, "msg").msg.(*dispatch.Held); !ok {
		t.Fatal("second message is not held")
	}
	if m := h.rec.next(t, "msg").msg.(*dispatch.Heartbeat); m.Jobs != 1 {
		t.Fatalf("heartbeat = %+v", m)
	}
	if st := s.State(); st.LastIn != 3 || st.LastHeartbeat.IsZero() {
		t.Fatalf("state after 3 frames = %+v", st)
	}

	if err := s.Send(dispatch.Offer{Reservation: "r1", LeaseSecs: 30}); err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&dispatch.Settings{Ceiling: 4}); err != nil {
		t.Fatal(err)
	}
	f := n.mustRecv()
	if o, ok := f.Msg.(*dispatch.Offer); !ok || f.Seq != 1 || o.Reservation != "r1" {
		t.Fatalf("first hub frame = seq %d %+v", f.Seq, f.Msg)
	}
	f = n.mustRecv()
	if st, ok := f.Msg.(*dispatch.Settings); !ok || f.Seq != 2 || st.Ceiling != 4 {
		t.Fatalf("second hub frame = seq %d %+v", f.Seq, f.Msg)
	}
	if err := s.Send(dispatch.Keepalive{}); !errors.Is(err, ErrProtocol) {
		t.Fatalf("Send(keepalive) = %v, want ErrProtocol", err)
	}
}

// spec: AUTH-06, AUTH-14
// Bad signatures, removed or unknown nodes, relay keys, and signatures
// replayed on another connection are answered 401 and never upgraded.
func TestNodeSessionUnauthorized(t *testing.T) {
	h := startHub(t, Config{})
	good, other := testKey(1), testKey(2)
	h.look.add(KindNode, "n1", good)
	h.look.add(KindNode, "gone", good)
	h.look.remove(KindNode, "gone")
	h.look.add(KindRelay, "r1", other)

	tests := []struct {
		name, id string
		key      []byte
	}{
		{"bad signature", "n1", other},
		{"removed node", "gone", good},
		{"unknown node", "n9", good},
		{"relay key on the node session", "r1", other},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := dialNode(t, h, tt.id, tt.key)
			var de *wsconn.DialError
			if !errors.As(err, &de) || de.Status != http.StatusUnauthorized || de.Code != "unauthorized" {
				t.Fatalf("dial = %v, want 401 unauthorized", err)
			}
		})
	}

	t.Run("replayed on another connection", func(t *testing.T) {
		// Sign an upgrade over one connection, send it on another.
		var captured http.Header
		tr := &reqsign.Transport{Key: good, Principal: "n1", TLSConfig: h.cliTLS}
		capture := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := tr.RoundTrip(r)
			if resp != nil {
				captured = resp.Request.Header.Clone()
			}
			return resp, err
		})
		c, _, err := websocket.Dial(t.Context(), h.nodeURL(), &websocket.DialOptions{HTTPClient: &http.Client{Transport: capture}})
		if err != nil {
			t.Fatal(err)
		}
		c.CloseNow()
		replay := http.Header{}
		for _, k := range []string{reqsign.HeaderPrincipal, reqsign.HeaderTime, reqsign.HeaderSignature} {
			if captured.Get(k) == "" {
				t.Fatalf("no %s captured", k)
			}
			replay.Set(k, captured.Get(k))
		}
		plain := &http.Client{Transport: &http.Transport{TLSClientConfig: h.cliTLS.Clone()}}
		_, resp, err := websocket.Dial(t.Context(), h.nodeURL(), &websocket.DialOptions{HTTPClient: plain, HTTPHeader: replay})
		if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("replayed upgrade: %v %v, want 401", resp, err)
		}
	})

	t.Run("hello names another node", func(t *testing.T) {
		n, err := dialNode(t, h, "n1", good)
		if err != nil {
			t.Fatal(err)
		}
		f := n.hello("n2", dispatch.NodeVersions, nil)
		if e, ok := f.Msg.(*dispatch.ErrorFrame); !ok || e.Code != dispatch.ErrorUnauthorized {
			t.Fatalf("answer = %+v, want unauthorized error", f.Msg)
		}
	})
	// None of the attempts reached the driver (the replay's legitimate
	// first dial never said hello).
	select {
	case e := <-h.rec.events:
		t.Fatalf("unexpected handler event %+v", e)
	default:
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// spec: NSESS-03, NSESS-01
// A node whose range shares no version with the hub's is refused with an
// error naming both ranges (DECISIONS 3); a node offering at most 2 never
// gets a session, hence never a job.
func TestNodeVersionRefused(t *testing.T) {
	h := startHub(t, Config{})
	key := testKey(1)
	h.look.add(KindNode, "n1", key)
	for _, vr := range []dispatch.Range{{Min: 1, Max: 2}, {Min: 2, Max: 2}, {Min: 7, Max: 9}, {Min: 3, Max: 1}} {
		n, err := dialNode(t, h, "n1", key)
		if err != nil {
			t.Fatal(err)
		}
		f := n.hello("n1", vr, nil)
		e, ok := f.Msg.(*dispatch.ErrorFrame)
		if !ok || e.Code != dispatch.ErrorVersion || e.Versions == nil || *e.Versions != dispatch.HubVersions {
			t.Fatalf("range %v: answer %+v, want version error with the hub's range", vr, f.Msg)
		}
		if !strings.Contains(e.Message, dispatch.HubVersions.String()) || !strings.Contains(e.Message, vr.String()) {
			t.Fatalf("range %v: message %q does not name both ranges", vr, e.Message)
		}
		if _, err := n.recv(); wsconn.CloseStatus(err) != wsconn.StatusPolicyViolation {
			t.Fatalf("range %v: close = %v, want 1008", vr, err)
		}
	}
	if h.nodes.Len() != 0 {
		t.Fatalf("%d sessions after refusals", h.nodes.Len())
	}
}

// spec: NSESS-23
// A frame over 1 MiB ends the session with a reason.
func TestNodeOversizeFrame(t *testing.T) {
	h := startHub(t, Config{})
	key := testKey(1)
	h.look.add(KindNode, "n1", key)
	// A bare WebSocket (signed like any node) so the test can put a frame
	// on the wire that wsconn's writer would refuse.
	tr := &reqsign.Transport{Key: key, Principal: "n1", TLSConfig: h.cliTLS}
	ctx := t.Context()
	c, _, err := websocket.Dial(ctx, h.nodeURL(), &websocket.DialOptions{HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	c.SetReadLimit(-1)
	c.Write(ctx, websocket.MessageText, mustEncode(t, dispatch.Frame{Msg: dispatch.Hello{Node: "n1", Versions: dispatch.NodeVersions}}))
	if _, b, err := c.Read(ctx); err != nil || !strings.Contains(string(b), `"welcome"`) {
		t.Fatalf("welcome: %s %v", b, err)
	}
	up := h.rec.next(t, "up")
	pad := strings.Repeat("x", dispatch.MaxFrameBytes)
	big := []byte(`{"type":"report","seq":1,"host":"` + pad + `","resources":{"mem":"1G","disk":"1G","cpus":1}}`)
	go c.Write(ctx, websocket.MessageText, big)
	down := h.rec.next(t, "down")
	if !errors.Is(down.err, ErrTooLarge) || !errors.Is(up.s.Ended(), ErrTooLarge) {
		t.Fatalf("down err %v, ended %v; want ErrTooLarge", down.err, up.s.Ended())
	}
	_, _, err = c.Read(ctx)
	if websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
		t.Fatalf("node sees %v, want close 1009", err)
	}
	h.unregistered(t, KindNode, "n1")
}

// spec: NSESS-02, NSESS-24
// Frames that break the protocol end the session with an error frame of
// code protocol.
func TestNodeProtocolErrors(t *testing.T) {
	tests := []struct {
		name  string
		frame []byte
	}{
		{"seq gap", mustEncode(t, dispatch.Frame{Seq: 5, Msg: dispatch.Heartbeat{State: dispatch.NodeReady}})},
		{"hub-to-node message", mustEncode(t, dispatch.Frame{Seq: 1, Msg: dispatch.Offer{Reservation: "r"}})},
		{"second hello", mustEncode(t, dispatch.Frame{Msg: dispatch.Hello{Node: "n1", Versions: dispatch.NodeVersions}})},
		{"undecodable", []byte(`{"type":"report","seq":"one"}`)},
		{"unknown type", []byte(`{"type":"gossip","seq":1}`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := startHub(t, Config{})
			key := testKey(1)
			h.look.add(KindNode, "n1", key)
			n, err := dialNode(t, h, "n1", key)
			if err != nil {
				t.Fatal(err)
			}
			welcomeOf(t, n.hello("n1", dispatch.NodeVersions, nil))
			h.rec.next(t, "up")
			if err := n.c.WriteFrame(t.Context(), tt.frame); err != nil {
				t.Fatal(err)
			}
			f, err := n.recv()
			if err != nil {
				t.Fatal(err)
			}
			if e, ok := f.Msg.(*dispatch.ErrorFrame); !ok || e.Code != dispatch.ErrorProtocol {
				t.Fatalf("hub answered %+v, want protocol error", f.Msg)
			}
			if _, err := n.recv(); wsconn.CloseStatus(err) != wsconn.StatusProtocolError {
				t.Fatalf("close = %v, want 1002", err)
			}
			if down := h.rec.next(t, "down"); !errors.Is(down.err, ErrProtocol) {
				t.Fatalf("down err = %v", down.err)
			}
		})
	}
}

func mustEncode(t testing.TB, f dispatch.Frame) []byte {
	t.Helper()
	b, err := dispatch.Encode(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// spec: NSESS-11, NSESS-24
// A new session of the same node replaces the old one: the old one is
// told "replaced", the driver sees it down before the new one up.
func TestNodeSessionReplaced(t *testing.T) {
	h := startHub(t, Config{})
	key := testKey(1)
	h.look.add(KindNode, "n1", key)
	n1, _ := dialNode(t, h, "n1", key)
	w1 := welcomeOf(t, n1.hello("n1", dispatch.NodeVersions, nil))
	first := h.rec.next(t, "up").s
	oldFrames := make(chan dispatch.Frame, 1)
	go func() { f, _ := n1.recv(); oldFrames <- f; n1.recv() }() // then answer the close

	n2, _ := dialNode(t, h, "n1", key)
	w2 := welcomeOf(t, n2.hello("n1", dispatch.NodeVersions, nil))
	if w2.Handle == w1.Handle || w2.Resumed {
		t.Fatalf("second welcome %+v, want a new session", w2)
	}
	if e := (<-oldFrames).Msg.(*dispatch.ErrorFrame); e.Code != dispatch.ErrorReplaced {
		t.Fatalf("old session told %+v", e)
	}
	down := h.rec.next(t, "down")
	up := h.rec.next(t, "up")
	if down.s != first || !errors.Is(down.err, ErrReplaced) || up.s == first || up.resumed {
		t.Fatalf("down %v (%v) then up %v", down.s.Handle(), down.err, up.s.Handle())
	}
	if err := first.Send(dispatch.Renew{Reservation: "r"}); !errors.Is(err, ErrEnded) {
		t.Fatalf("Send on replaced session = %v", err)
	}
	if h.nodes.Session("n1") != up.s {
		t.Fatal("registry holds the old session")
	}
}

// spec: NSESS-24
// A cut connection resumes: the hub names the last node seq it processed,
// queues what the driver sent meanwhile, and drops replays.
func TestNodeSessionResume(t *testing.T) {
	h := startHub(t, Config{})
	key := testKey(1)
	h.look.add(KindNode, "n1", key)
	n, _ := dialNode(t, h, "n1", key)
	w := welcomeOf(t, n.hello("n1", dispatch.NodeVersions, nil))
	s := h.rec.next(t, "up").s
	n.send(dispatch.Frame{Seq: 1, Msg: dispatch.Report{}})
	n.send(dispatch.Frame{Seq: 2, Msg: dispatch.Held{}})
	h.rec.next(t, "msg")
	h.rec.next(t, "msg")
	s.Send(dispatch.Offer{Reservation: "r1"})
	if f := n.mustRecv(); f.Seq != 1 {
		t.Fatalf("hub seq %d", f.Seq)
	}

	h.cutAll()
	if down := h.rec.next(t, "down"); down.s != s || s.Ended() != nil {
		t.Fatalf("down after cut: %v, ended %v", down.err, s.Ended())
	}
	// Sent while detached: queued for the resume.
	if err := s.Send(dispatch.Release{Reservation: "r1"}); err != nil {
		t.Fatal(err)
	}

	n2, _ := dialNode(t, h, "n1", key)
	// The node processed hub seq 1 only.
	w2 := welcomeOf(t, n2.hello("n1", dispatch.NodeVersions, &dispatch.Resume{Handle: w.Handle, LastSeq: 1}))
	if !w2.Resumed || w2.Handle != w.Handle || w2.LastSeq != 2 {
		t.Fatalf("resume welcome %+v, want resumed with last seq 2", w2)
	}
	if up := h.rec.next(t, "up"); up.s != s || !up.resumed {
		t.Fatalf("resume up: same session %v, resumed %v", up.s == s, up.resumed)
	}
	if f := n2.mustRecv(); f.Seq != 2 {
		t.Fatalf("after resume hub sent seq %d, want 2", f.Seq)
	} else if _, ok := f.Msg.(*dispatch.Release); !ok {
		t.Fatalf("after resume hub sent %T", f.Msg)
	}
	// The node replays seq 2 (already processed) then continues at 3.
	n2.send(dispatch.Frame{Seq: 2, Msg: dispatch.Held{}})
	n2.send(dispatch.Frame{Seq: 3, Msg: dispatch.Heartbeat{State: dispatch.NodeReady, Jobs: 3}})
	if m, ok := h.rec.next(t, "msg").msg.(*dispatch.Heartbeat); !ok || m.Jobs != 3 {
		t.Fatalf("after resume delivered %+v, want the heartbeat only", m)
	}
	if st := s.State(); st.Duplicates != 1 || st.LastIn != 3 {
		t.Fatalf("state = %+v", st)
	}

	// A resume naming an unknown handle gets a new session.
	h.cutAll()
	h.rec.next(t, "down")
	n3, _ := dialNode(t, h, "n1", key)
	w3 := welcomeOf(t, n3.hello("n1", dispatch.NodeVersions, &dispatch.Resume{Handle: "nope", LastSeq: 9}))
	if w3.Resumed || w3.Handle == w.Handle {
		t.Fatalf("welcome %+v, want a new session", w3)
	}
	if up := h.rec.next(t, "up"); up.s == s || up.resumed {
		t.Fatal("unknown handle resumed the old session")
	}
	if !errors.Is(s.Ended(), ErrReplaced) {
		t.Fatalf("old session ended %v, want replaced", s.Ended())
	}
}

// spec: NSESS-24
// The outbound queue is bounded: overflowing it ends the session.
func TestNodeSendOverflow(t *testing.T) {
	h := startHub(t, Config{QueueFrames: 4})
	key := testKey(1)
	h.look.add(KindNode, "n1", key)
	n, _ := dialNode(t, h, "n1", key)
	welcomeOf(t, n.hello("n1", dispatch.NodeVersions, nil))
	s := h.rec.next(t, "up").s
	h.cutAll()
	h.rec.next(t, "down")
	var err error
	for i := 0; i < 10 && err == nil; i++ {
		err = s.Send(dispatch.Renew{Reservation: "r", LeaseSecs: i + 1})
	}
	if !errors.Is(err, ErrQueueFull) || !errors.Is(s.Ended(), ErrQueueFull) {
		t.Fatalf("Send = %v, ended %v; want ErrQueueFull", err, s.Ended())
	}
	if err := s.Send(dispatch.Renew{Reservation: "r"}); !errors.Is(err, ErrEnded) {
		t.Fatalf("Send after overflow = %v", err)
	}
}

// Shutdown tells every node to redial later.
func TestNodeServerClose(t *testing.T) {
	h := startHub(t, Config{})
	key := testKey(1)
	h.look.add(KindNode, "n1", key)
	n, _ := dialNode(t, h, "n1", key)
	welcomeOf(t, n.hello("n1", dispatch.NodeVersions, nil))
	h.rec.next(t, "up")
	got := make(chan dispatch.Frame, 1)
	go func() { f, _ := n.recv(); got <- f; n.recv() }() // then answer the close
	h.nodes.Close()
	if e, ok := (<-got).Msg.(*dispatch.ErrorFrame); !ok || e.Code != dispatch.ErrorShutdown {
		t.Fatalf("node told %+v, want shutdown", e)
	}
	h.rec.next(t, "down")
}

// spec: AUTH-06
// The driver ends the session of a node removed while connected; the node
// is told why and later dials are refused 401.
func TestNodeSessionEndRemoved(t *testing.T) {
	h := startHub(t, Config{})
	key := testKey(1)
	h.look.add(KindNode, "n1", key)
	n, _ := dialNode(t, h, "n1", key)
	welcomeOf(t, n.hello("n1", dispatch.NodeVersions, nil))
	s := h.rec.next(t, "up").s
	got := make(chan dispatch.Frame, 1)
	go func() { f, _ := n.recv(); got <- f; n.recv() }() // then answer the close
	h.look.remove(KindNode, "n1")
	s.End(dispatch.ErrorUnauthorized, "node removed by an operator")
	if e, ok := (<-got).Msg.(*dispatch.ErrorFrame); !ok || e.Code != dispatch.ErrorUnauthorized || !strings.Contains(e.Message, "removed") {
		t.Fatalf("node told %+v", e)
	}
	if down := h.rec.next(t, "down"); !errors.Is(down.err, ErrEnded) {
		t.Fatalf("down = %v", down.err)
	}
	h.unregistered(t, KindNode, "n1")
	if _, err := dialNode(t, h, "n1", key); !errors.Is(err, wsconn.ErrUnauthorized) {
		t.Fatalf("dial after removal = %v, want 401", err)
	}
}

// The driver sees a session's Down before the next session's Up, even
// when the node's new hello arrives while the old connection's reader is
// between letting go of its link and announcing Down: a fresh session
// (replace) and a resume (drop) both wait for that Down, and so does a
// fresh session after one the hub ended itself (an error frame, as when
// an output chunk was not stored): that one must stay in the registry
// until its Down is announced, or the next hello finds no session to
// wait for. Up first would leave the driver thinking a connected node is
// gone, and every frame it sends that node dropped.
func TestNodeDownBeforeNextUp(t *testing.T) {
	for _, tc := range []struct {
		name        string
		resume, end bool
	}{
		{"connection cut, new session", false, false},
		{"connection cut, resumed", true, false},
		{"ended by the hub, new session", false, true},
	} {
		resume := tc.resume
		t.Run(tc.name, func(t *testing.T) {
			h := startHub(t, Config{})
			key := testKey(1)
			h.look.add(KindNode, "n1", key)
			entered, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			free := func() { once.Do(func() { close(release) }) }
			t.Cleanup(free) // a failed test must not leave the reader blocked (Close waits for it)
			var first atomic.Pointer[NodeSession]
			var enterOnce sync.Once
			h.rec.onDown = func(s *NodeSession) {
				if s == first.Load() {
					enterOnce.Do(func() { close(entered) })
					<-release
				}
			}
			n1, _ := dialNode(t, h, "n1", key)
			w := welcomeOf(t, n1.hello("n1", dispatch.NodeVersions, nil))
			first.Store(h.rec.next(t, "up").s)
			if tc.end {
				go func() { n1.recv(); n1.recv() }() // the error frame, then the close
				first.Load().End(dispatch.ErrorOther, "output not stored")
			} else {
				h.cutAll()
			}
			<-entered // the old reader has detached; its Down is held
			go func() {
				n2, err := dialNode(t, h, "n1", key)
				if err != nil {
					return
				}
				var res *dispatch.Resume
				if resume {
					res = &dispatch.Resume{Handle: w.Handle}
				}
				n2.send(dispatch.Frame{Msg: dispatch.Hello{Versions: dispatch.NodeVersions, Node: "n1", Resume: res}})
			}()
			// Nothing may reach the driver before the old Down. (A bounded
			// wait for what must not happen: it cannot fail wrongly, only
			// miss a bug on a very slow machine.)
			select {
			case e := <-h.rec.events:
				t.Fatalf("%s of the next session while the old one's Down is pending", e.kind)
			case <-time.After(300 * time.Millisecond):
			}
			free()
			if down := h.rec.next(t, "down"); down.s != first.Load() {
				t.Fatal("down of another session")
			}
			up := h.rec.next(t, "up")
			if up.resumed != resume {
				t.Errorf("up resumed = %v, want %v", up.resumed, resume)
			}
		})
	}
}

// A peer that upgrades and then sends nothing gets, once the hello
// deadline passes, an error frame of code protocol and close 1002, as
// docs/sessions.md says; nothing is registered.
//
// spec: NSESS-24
func TestNoHelloErrorFrame(t *testing.T) {
	h := startHub(t, Config{HelloTimeout: 50 * time.Millisecond})
	key := testKey(1)
	h.look.add(KindNode, "n1", key)
	n, err := dialNode(t, h, "n1", key)
	if err != nil {
		t.Fatal(err)
	}
	f, err := n.recv()
	if err != nil {
		t.Fatalf("no frame before the close: %v", err)
	}
	if e, ok := f.Msg.(*dispatch.ErrorFrame); !ok || e.Code != dispatch.ErrorProtocol || !strings.Contains(e.Message, "no hello") {
		t.Fatalf("hub sent %+v, want a protocol error saying no hello", f.Msg)
	}
	if _, err := n.recv(); wsconn.CloseStatus(err) != wsconn.StatusProtocolError {
		t.Fatalf("close = %v, want 1002", err)
	}
	if h.nodes.Len() != 0 {
		t.Fatal("a session without hello was registered")
	}
}

// Connections waiting for their hello are capped per server: past the
// cap an upgrade answers 503 unavailable before upgrading; once one of
// them ends, a new one is accepted.
func TestPendingHellosCapped(t *testing.T) {
	h := startHub(t, Config{MaxPendingHellos: 2, HelloTimeout: time.Hour})
	key := testKey(1)
	h.look.add(KindNode, "n1", key)
	var waiting []*rawNode
	for range 2 {
		n, err := dialNode(t, h, "n1", key)
		if err != nil {
			t.Fatal(err)
		}
		waiting = append(waiting, n)
	}
	_, err := dialNode(t, h, "n1", key)
	var re *wsconn.DialError
	if !errors.As(err, &re) || re.Status != http.StatusServiceUnavailable || re.Code != "unavailable" {
		t.Fatalf("third pending upgrade: %v, want 503", err)
	}
	// One of the two says hello: its slot frees, a new upgrade succeeds.
	welcomeOf(t, waiting[0].hello("n1", dispatch.NodeVersions, nil))
	h.rec.next(t, "up")
	if _, err := dialNode(t, h, "n1", key); err != nil {
		t.Fatalf("upgrade after a slot freed: %v", err)
	}
}
