package sessionclient_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/sessionclient"
	"github.com/vk-ci/vk/internal/sessionclient/sessiontest"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/internal/wsconn"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

var (
	errVersion    = errors.New("test: version refused")
	errRefused    = errors.New("test: refused")
	errProtocol   = errors.New("test: protocol")
	errStopped    = errors.New("test: stopped")
	errNotUp      = errors.New("test: not connected")
	errTooNew     = errors.New("test: above version")
	errBadDeliver = errors.New("test: refused on delivery")
)

// msg is the test kind's frame: one flat JSON object.
type msg struct {
	Type          string                `json:"type"`
	Seq           uint64                `json:"seq,omitempty"`
	N             int                   `json:"n,omitempty"`
	Handle        string                `json:"handle,omitempty"`
	Version       int                   `json:"version,omitempty"`
	HeartbeatSecs int                   `json:"heartbeat_secs,omitempty"`
	Resumed       bool                  `json:"resumed,omitempty"`
	LastSeq       uint64                `json:"last_seq,omitempty"`
	Resume        *sessionclient.Resume `json:"resume,omitempty"`
	Code          string                `json:"code,omitempty"`
}

type versions struct{ min, max int }

func (v versions) Contains(n int) bool { return v.min <= n && n <= v.max }

// kind is a test Kind: "data" frames flow both ways, "new" frames need
// version 2 (Admit), "bad" frames are refused on delivery, "hello" is
// unexpected from the hub.
type kind struct {
	delivered chan int
	connected chan bool
	downs     chan error
	onUp      func(resumed bool) error
}

func newKind() *kind {
	return &kind{delivered: make(chan int, 1000), connected: make(chan bool, 100), downs: make(chan error, 100)}
}

func (k *kind) Hello(r *sessionclient.Resume) ([]byte, error) {
	return json.Marshal(msg{Type: "hello", Resume: r})
}
func (k *kind) Encode(seq uint64, m *msg) ([]byte, error) {
	c := *m
	c.Seq = seq
	return json.Marshal(c)
}
func (k *kind) Decode(b []byte) (uint64, *msg, error) {
	var m msg
	if err := json.Unmarshal(b, &m); err != nil {
		return 0, nil, err
	}
	return m.Seq, &m, nil
}
func (k *kind) Type(m *msg) string { return m.Type }
func (k *kind) Welcome(m *msg) (msg, sessionclient.Welcome, bool) {
	if m.Type != "welcome" {
		return msg{}, sessionclient.Welcome{}, false
	}
	return *m, sessionclient.Welcome{Handle: m.Handle, Version: m.Version, HeartbeatSecs: m.HeartbeatSecs, Resumed: m.Resumed, LastSeq: m.LastSeq}, true
}
func (k *kind) Refusal(m *msg) error {
	switch {
	case m.Type != "error":
		return nil
	case m.Code == "version":
		return errVersion
	}
	return fmt.Errorf("%w: %s", errRefused, m.Code)
}
func (k *kind) Keepalive(m *msg) bool { return m.Type == "keepalive" }
func (k *kind) Inbound(m *msg) bool   { return m.Type == "data" || m.Type == "new" || m.Type == "bad" }
func (k *kind) Admit(m *msg, version int) (string, error) {
	if m.Type == "new" && version < 2 {
		return "too new", errTooNew
	}
	return "", nil
}
func (k *kind) Deliver(m *msg, _ int) (string, error) {
	if m.Type == "bad" {
		return "bad frame", errBadDeliver
	}
	k.delivered <- m.N
	return "", nil
}
func (k *kind) Sendable(m *msg, version int) error {
	if m.Type == "new" && version != 0 && version < 2 {
		return errTooNew
	}
	return nil
}
func (k *kind) Connected(_ msg, resumed bool) error {
	var err error
	if k.onUp != nil {
		err = k.onUp(resumed)
	}
	k.connected <- resumed
	return err
}
func (k *kind) Heartbeat() *msg        { return &msg{Type: "heartbeat"} }
func (k *kind) Disconnected(err error) { k.downs <- err }

// hub is a scripted hub: each accepted connection is handed to the test.
type hub struct {
	*sessiontest.Server
	conns chan *wsconn.Conn
	done  chan struct{}
}

func startHub(t *testing.T) *hub {
	h := &hub{conns: make(chan *wsconn.Conn, 10), done: make(chan struct{})}
	h.Server = sessiontest.Start(t, "/v1/test/session", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _, err := wsconn.Accept(w, r, func(*http.Request) (string, error) { return "p1", nil }, &wsconn.Options{PingInterval: -1})
		if err != nil {
			return
		}
		h.conns <- c
		select {
		case <-c.Done():
		case <-h.done:
			c.CloseNow()
		}
	}))
	t.Cleanup(func() { close(h.done) })
	return h
}

func read(t *testing.T, c *wsconn.Conn) msg {
	t.Helper()
	b, err := c.ReadFrame(t.Context())
	if err != nil {
		t.Fatalf("hub read: %v", err)
	}
	var m msg
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func write(t *testing.T, c *wsconn.Conn, m msg) {
	t.Helper()
	b, _ := json.Marshal(m)
	if err := c.WriteFrame(t.Context(), b); err != nil {
		t.Fatalf("hub write: %v", err)
	}
}

// welcome reads the hello on the next connection and answers w.
func (h *hub) welcome(t *testing.T, w msg) (*wsconn.Conn, msg) {
	t.Helper()
	c := sessiontest.Recv(t, h.conns, "connection")
	hello := read(t, c)
	if hello.Type != "hello" {
		t.Fatalf("first frame %+v, want hello", hello)
	}
	w.Type = "welcome"
	if w.HeartbeatSecs == 0 {
		w.HeartbeatSecs = 3600
	}
	write(t, c, w)
	return c, hello
}

type setup struct {
	resumable bool
	queue     int
	versions  versions
}

func start(t *testing.T, s setup) (*hub, *kind, *sessionclient.Client[*msg, msg], *clock.Fake) {
	t.Helper()
	h := startHub(t)
	k := newKind()
	fc := clock.NewFake(t0)
	if s.queue == 0 {
		s.queue = 100
	}
	if s.versions == (versions{}) {
		s.versions = versions{1, 2}
	}
	c := sessionclient.New(sessionclient.Config{
		URL: h.URL, Principal: "p1", Key: testKey(), TLSConfig: h.ClientTLS(t), Conn: wsconn.Options{PingInterval: -1},
		Versions: s.versions, Resumable: s.resumable, QueueFrames: s.queue,
		Errors:     sessionclient.Errors{Version: errVersion, Protocol: errProtocol, Stopped: errStopped, NotConnected: errNotUp},
		VersionMsg: "version refused", OverflowMsg: "queue full",
		Clock: fc, Rand: func() float64 { return 0.5 }, Log: testlog.New(t),
	}, k)
	return h, k, c, fc
}

// redial lets the client's backoff timer fire once it is armed.
func redial(t *testing.T, fc *clock.Fake) {
	t.Helper()
	sessiontest.WaitFor(t, "backoff timer", func() bool { return fc.Pending() >= 1 })
	fc.Advance(wsconn.MaxBackoff * 2)
}

func closeReason(t *testing.T, c *wsconn.Conn) (wsconn.StatusCode, string) {
	t.Helper()
	_, err := c.ReadFrame(t.Context())
	if err == nil {
		t.Fatal("hub read a frame, want the client's close")
	}
	return wsconn.CloseStatus(err), wsconn.CloseReason(err)
}

// Each frame the hub sends that the client must not process ends the
// connection with 1002 and a reason, and Disconnected gets the kind's
// error: the shared reader's checks run in order (decode, keepalive,
// error frame, inbound, Admit, seq, Deliver). spec: NSESS-02
func TestReaderEndsConnection(t *testing.T) {
	for _, tc := range []struct {
		name      string
		resumable bool
		frames    []string // raw frames after the welcome (version 1)
		reason    string   // "" when the hub ends it (error frame)
		want      error
		delivered []int
	}{
		{"undecodable", false, []string{`{"type":`}, "undecodable frame", errProtocol, nil},
		{"unexpected", false, []string{`{"type":"hello"}`}, "unexpected frame", errProtocol, nil},
		{"above version", false, []string{`{"type":"new","seq":1}`}, "too new", errTooNew, nil},
		{"refused on delivery", false, []string{`{"type":"data","seq":1,"n":1}`, `{"type":"bad","seq":2}`}, "bad frame", errBadDeliver, []int{1}},
		{"seq gap", false, []string{`{"type":"data","seq":2,"n":2}`}, "seq gap", errProtocol, nil},
		{"one-shot repeat is a gap", false, []string{`{"type":"data","seq":1,"n":1}`, `{"type":"data","seq":1,"n":1}`}, "seq gap", errProtocol, []int{1}},
		{"resumable repeat is skipped", true, []string{`{"type":"data","seq":1,"n":1}`, `{"type":"keepalive"}`, `{"type":"data","seq":1,"n":1}`, `{"type":"data","seq":2,"n":2}`, `{"type":"data","seq":4,"n":4}`}, "seq gap", errProtocol, []int{1, 2}},
		{"error frame", false, []string{`{"type":"data","seq":1,"n":1}`, `{"type":"error","code":"limits"}`}, "", errRefused, []int{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, k, c, _ := start(t, setup{resumable: tc.resumable})
			sessiontest.Run(t, c.Run)
			conn, _ := h.welcome(t, msg{Handle: "h1", Version: 1})
			sessiontest.Recv(t, k.connected, "Connected")
			for _, f := range tc.frames {
				if err := conn.WriteFrame(t.Context(), []byte(f)); err != nil {
					t.Fatal(err)
				}
			}
			if tc.reason != "" {
				if code, reason := closeReason(t, conn); code != wsconn.StatusProtocolError || reason != tc.reason {
					t.Fatalf("client closed with %d %q, want 1002 %q", code, reason, tc.reason)
				}
			}
			if err := sessiontest.Recv(t, k.downs, "Disconnected"); !errors.Is(err, tc.want) {
				t.Fatalf("Disconnected(%v), want %v", err, tc.want)
			}
			var got []int
			for len(k.delivered) > 0 {
				got = append(got, <-k.delivered)
			}
			if !slices.Equal(got, tc.delivered) {
				t.Fatalf("delivered %v, want %v", got, tc.delivered)
			}
		})
	}
}

// A welcome outside the offered range, or without a heartbeat period,
// ends the connection as "bad welcome" before Connected.
func TestBadWelcome(t *testing.T) {
	for _, w := range []msg{{Handle: "h", Version: 3}, {Handle: "h", Version: 1, HeartbeatSecs: -1}} {
		h, k, c, _ := start(t, setup{})
		sessiontest.Run(t, c.Run)
		conn, _ := h.welcome(t, w)
		if code, reason := closeReason(t, conn); code != wsconn.StatusProtocolError || reason != "bad welcome" {
			t.Fatalf("welcome %+v: client closed with %d %q", w, code, reason)
		}
		if len(k.connected) != 0 || c.Version() != 0 {
			t.Fatalf("welcome %+v: connected %d, version %d", w, len(k.connected), c.Version())
		}
	}
}

// A resumable client queues while disconnected, resumes naming its handle
// and last processed hub seq, and writes again what the hub has not
// processed (STYLE C6); when the hub asks for frames no longer held it
// closes "cannot resume" and asks for a new session.
func TestResume(t *testing.T) {
	h, k, c, fc := start(t, setup{resumable: true, queue: 4})
	sessiontest.Run(t, c.Run)
	conn, hello := h.welcome(t, msg{Handle: "h1", Version: 2})
	if hello.Resume != nil {
		t.Fatalf("first hello resumes %+v", hello.Resume)
	}
	if resumed := sessiontest.Recv(t, k.connected, "Connected"); resumed {
		t.Fatal("first session resumed")
	}
	write(t, conn, msg{Type: "data", Seq: 1, N: 1})
	write(t, conn, msg{Type: "data", Seq: 2, N: 2})
	sessiontest.Recv(t, k.delivered, "delivery")
	sessiontest.Recv(t, k.delivered, "delivery")
	for i := 1; i <= 2; i++ {
		if err := c.Send(&msg{Type: "data", N: i}); err != nil {
			t.Fatal(err)
		}
		if m := read(t, conn); m.Seq != uint64(i) || m.N != i {
			t.Fatalf("hub got %+v, want seq %d", m, i)
		}
	}
	h.CutAll()
	sessiontest.Recv(t, k.downs, "Disconnected")
	if err := c.Send(&msg{Type: "data", N: 3}); err != nil { // queued while disconnected
		t.Fatalf("Send while disconnected: %v", err)
	}
	if c.Version() != 2 {
		t.Fatalf("Version() = %d while disconnected, want the last session's 2", c.Version())
	}

	// The hub processed node seq 1: seq 2 and 3 are written again.
	redial(t, fc)
	conn, hello = h.welcome(t, msg{Handle: "h1", Version: 2, Resumed: true, LastSeq: 1})
	if hello.Resume == nil || *hello.Resume != (sessionclient.Resume{Handle: "h1", LastSeq: 2}) {
		t.Fatalf("resume hello %+v, want h1 last 2", hello.Resume)
	}
	if resumed := sessiontest.Recv(t, k.connected, "Connected"); !resumed {
		t.Fatal("resumed session reported as new")
	}
	for i := 2; i <= 3; i++ {
		if m := read(t, conn); m.Seq != uint64(i) || m.N != i {
			t.Fatalf("hub got %+v after resume, want seq %d", m, i)
		}
	}
	write(t, conn, msg{Type: "data", Seq: 2, N: 2}) // replayed: skipped
	write(t, conn, msg{Type: "data", Seq: 3, N: 3})
	if n := sessiontest.Recv(t, k.delivered, "delivery"); n != 3 {
		t.Fatalf("delivered %d after resume, want 3 (2 was processed)", n)
	}

	// The hub wants seq 100: not held. The client gives up on resuming.
	h.CutAll()
	sessiontest.Recv(t, k.downs, "Disconnected")
	redial(t, fc)
	conn, hello = h.welcome(t, msg{Handle: "h1", Version: 2, Resumed: true, LastSeq: 100})
	if hello.Resume == nil || hello.Resume.LastSeq != 3 {
		t.Fatalf("hello %+v, want resume after hub seq 3", hello.Resume)
	}
	if code, reason := closeReason(t, conn); code != wsconn.StatusNormal || reason != "cannot resume" {
		t.Fatalf("client closed with %d %q, want 1000 cannot resume", code, reason)
	}
	redial(t, fc)
	conn, hello = h.welcome(t, msg{Handle: "h2", Version: 1})
	if hello.Resume != nil {
		t.Fatalf("hello after a failed resume resumes %+v", hello.Resume)
	}
	if resumed := sessiontest.Recv(t, k.connected, "Connected"); resumed || c.Handle() != "h2" {
		t.Fatalf("resumed %v handle %q, want a new session h2", resumed, c.Handle())
	}
	if err := c.Send(&msg{Type: "data", N: 9}); err != nil {
		t.Fatal(err)
	}
	if m := read(t, conn); m.Seq != 1 || m.N != 9 {
		t.Fatalf("hub got %+v on the new session, want seq 1", m)
	}
	if err := c.Send(&msg{Type: "new"}); !errors.Is(err, errTooNew) {
		t.Fatalf("Send above the version = %v, want Sendable's error", err)
	}
}

// Overflowing the queue: a one-shot client drops the session; a
// resumable one keeps it but asks for a new session next time. The
// Connected hook runs before the writer starts, so the overflow is
// deterministic.
func TestOverflow(t *testing.T) {
	t.Run("one-shot", func(t *testing.T) {
		h, k, c, fc := start(t, setup{queue: 1})
		var sendErrs []error
		k.onUp = func(bool) error {
			sendErrs = []error{c.Send(&msg{Type: "data", N: 1}), c.Send(&msg{Type: "data", N: 2})}
			return nil
		}
		if err := c.Send(&msg{Type: "data"}); !errors.Is(err, errNotUp) {
			t.Fatalf("Send before a session = %v, want NotConnected", err)
		}
		sessiontest.Run(t, c.Run)
		h.welcome(t, msg{Handle: "h1", Version: 1})
		sessiontest.Recv(t, k.connected, "Connected")
		if sendErrs[0] != nil || !errors.Is(sendErrs[1], wsconn.ErrOverflow) {
			t.Fatalf("Send errors %v, want nil then overflow", sendErrs)
		}
		sessiontest.Recv(t, k.downs, "Disconnected")
		sessiontest.WaitFor(t, "version reset", func() bool { return c.Version() == 0 })
		redial(t, fc)
		h.welcome(t, msg{Handle: "h2", Version: 1})
		sessiontest.Recv(t, k.connected, "second Connected")
	})
	t.Run("resumable", func(t *testing.T) {
		h, k, c, fc := start(t, setup{resumable: true, queue: 1})
		k.onUp = func(resumed bool) error {
			if !resumed {
				c.Send(&msg{Type: "data", N: 1})
				if err := c.Send(&msg{Type: "data", N: 2}); !errors.Is(err, wsconn.ErrOverflow) {
					t.Errorf("second Send = %v, want overflow", err)
				}
			}
			return nil
		}
		sessiontest.Run(t, c.Run)
		conn, _ := h.welcome(t, msg{Handle: "h1", Version: 1})
		sessiontest.Recv(t, k.connected, "Connected")
		if m := read(t, conn); m.N != 1 {
			t.Fatalf("hub got %+v, want the first frame", m)
		}
		h.CutAll()
		sessiontest.Recv(t, k.downs, "Disconnected")
		redial(t, fc)
		_, hello := h.welcome(t, msg{Handle: "h2", Version: 1})
		if hello.Resume != nil {
			t.Fatalf("hello after an overflow resumes %+v", hello.Resume)
		}
	})
}

// A Connected error ends the connection without Disconnected; Send after
// Run fails with Stopped. spec: RSESS-01
func TestConnectedErrorAndStop(t *testing.T) {
	h, k, c, fc := start(t, setup{})
	errUp := errors.New("test: report failed")
	var once sync.Once
	k.onUp = func(bool) error {
		var err error
		once.Do(func() { err = errUp })
		return err
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	h.welcome(t, msg{Handle: "h1", Version: 1})
	sessiontest.Recv(t, k.connected, "Connected")
	redial(t, fc) // redialed although Disconnected was not called
	h.welcome(t, msg{Handle: "h2", Version: 1})
	sessiontest.Recv(t, k.connected, "second Connected")
	if len(k.downs) != 0 {
		t.Fatalf("Disconnected called %d times after a Connected error", len(k.downs))
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	if err := c.Send(&msg{Type: "data"}); !errors.Is(err, errStopped) {
		t.Fatalf("Send after Run = %v, want Stopped", err)
	}
}

func testKey() ed25519.PrivateKey {
	s := make([]byte, ed25519.SeedSize)
	s[0] = 3
	return ed25519.NewKeyFromSeed(s)
}
