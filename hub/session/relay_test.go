package session

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/wsconn"
	"github.com/vk-ci/vk/proto/client"
)

type rawRelay struct {
	t testing.TB
	c *wsconn.Conn
}

func dialRelay(t testing.TB, h *hub, id string, key ed25519.PrivateKey) *rawRelay {
	t.Helper()
	c, err := wsconn.Dial(t.Context(), h.relayURL(), key, id, h.cliTLS, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return &rawRelay{t: t, c: c}
}

func (r *rawRelay) send(f client.RelayFrame) {
	r.t.Helper()
	b, err := client.EncodeRelayFrame(f)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := r.c.WriteFrame(r.t.Context(), b); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rawRelay) recv() (client.RelayFrame, error) {
	ctx, cancel := context.WithTimeout(r.t.Context(), 20*time.Second)
	defer cancel()
	b, err := r.c.ReadFrame(ctx)
	if err != nil {
		return client.RelayFrame{}, err
	}
	return client.DecodeRelayFrame(b)
}

func (r *rawRelay) mustRecv() client.RelayFrame {
	r.t.Helper()
	f, err := r.recv()
	if err != nil {
		r.t.Fatalf("relay recv: %v", err)
	}
	return f
}

func runners(n, rc int) []client.RunnerReport {
	out := make([]client.RunnerReport, n)
	for i := range out {
		out[i] = client.RunnerReport{Name: fmt.Sprint("r", i), RequestConcurrency: rc}
	}
	return out
}

// spec: RSESS-01, RSESS-07, RSESS-10
// A relay session: negotiated at the newest version both speak, report and heartbeat delivered in
// order, server status sent back with a seq.
func TestRelaySessionExchange(t *testing.T) {
	h := startHub(t, Config{})
	key := testKey(3)
	h.look.add(KindRelay, "relay-1", key)
	r := dialRelay(t, h, "relay-1", key)
	r.send(client.RelayFrame{Msg: client.RelayHello{Versions: client.RelayClientVersions, Relay: "relay-1"}})
	w, ok := r.mustRecv().Msg.(*client.RelayWelcome)
	if !ok || w.Version != client.RelayVersion || w.HeartbeatSecs != DefaultRelayHeartbeatSecs || w.Handle == "" {
		t.Fatalf("welcome = %+v", w)
	}
	s := h.rec.next(t, "up").rs
	if !s.NewWorkAllowed() {
		t.Fatal("current relay refused new work")
	}
	r.send(client.RelayFrame{Seq: 1, Msg: client.RelayReport{Concurrent: 4, Runners: runners(64, 128)}})
	r.send(client.RelayFrame{Seq: 2, Msg: client.RelayHeartbeat{Runners: []client.RunnerHeartbeat{{Name: "r0", State: client.RunnerServerPending}}}})
	if m := h.rec.next(t, "msg").rmsg.(*client.RelayReport); len(m.Runners) != 64 {
		t.Fatalf("report = %+v", m)
	}
	if m := h.rec.next(t, "msg").rmsg.(*client.RelayHeartbeat); m.Runners[0].State != client.RunnerServerPending {
		t.Fatalf("heartbeat = %+v", m)
	}
	if err := s.Send(client.ServerStatus{Status: client.ApprovalApproved}); err != nil {
		t.Fatal(err)
	}
	f := r.mustRecv()
	if st, ok := f.Msg.(*client.ServerStatus); !ok || f.Seq != 1 || st.Status != client.ApprovalApproved {
		t.Fatalf("hub frame = seq %d %+v", f.Seq, f.Msg)
	}
}

// spec: RSESS-09
// An inventory over the limits ends the relay's session.
func TestRelayLimits(t *testing.T) {
	tests := []struct {
		name    string
		runners []client.RunnerReport
	}{
		{"65 runners", runners(65, 1)},
		{"request_concurrency 129", append(runners(3, 1), client.RunnerReport{Name: "big", RequestConcurrency: 129})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := startHub(t, Config{})
			key := testKey(3)
			h.look.add(KindRelay, "relay-1", key)
			r := dialRelay(t, h, "relay-1", key)
			r.send(client.RelayFrame{Msg: client.RelayHello{Versions: client.RelayClientVersions, Relay: "relay-1"}})
			r.mustRecv()
			h.rec.next(t, "up")
			r.send(client.RelayFrame{Seq: 1, Msg: client.RelayReport{Runners: tt.runners}})
			e, ok := r.mustRecv().Msg.(*client.RelayError)
			if !ok || e.Code != client.RelayErrorLimits {
				t.Fatalf("hub answered %+v, want limits error", e)
			}
			if _, err := r.recv(); wsconn.CloseStatus(err) != wsconn.StatusPolicyViolation {
				t.Fatalf("close = %v, want 1008", err)
			}
			if down := h.rec.next(t, "down"); !errors.Is(down.err, ErrLimits) {
				t.Fatalf("down = %v", down.err)
			}
			h.unregistered(t, KindRelay, "relay-1")
		})
	}
}

// spec: RSESS-10, RSESS-11, RSESS-12
// The hub speaks 1 to the newest version: a version-1 relay keeps a
// session but is refused new work; a relay with no common version is
// refused naming both ranges; a hub speaking only 1 refuses vk-gitlab's
// range.
func TestRelayVersions(t *testing.T) {
	h := startHub(t, Config{})
	key := testKey(3)
	h.look.add(KindRelay, "relay-1", key)

	r := dialRelay(t, h, "relay-1", key)
	r.send(client.RelayFrame{Msg: client.RelayHello{Versions: client.VersionRange{Min: 1, Max: 1}, Relay: "relay-1"}})
	if w, ok := r.mustRecv().Msg.(*client.RelayWelcome); !ok || w.Version != 1 {
		t.Fatalf("v1 relay: %+v", w)
	}
	s := h.rec.next(t, "up").rs
	if s.NewWorkAllowed() {
		t.Fatal("v1 relay allowed new work")
	}
	if err := s.Send(client.Update{Release: "9"}); !errors.Is(err, ErrProtocol) {
		t.Fatalf("update to v1 = %v, want ErrProtocol", err)
	}
	if err := s.Send(client.ServerStatus{Status: client.ApprovalPending}); err != nil {
		t.Fatalf("status to v1 = %v", err)
	}

	r2 := dialRelay(t, h, "relay-1", key)
	future := client.VersionRange{Min: client.RelayVersion + 1, Max: client.RelayVersion + 2}
	r2.send(client.RelayFrame{Msg: client.RelayHello{Versions: future, Relay: "relay-1"}})
	e, ok := r2.mustRecv().Msg.(*client.RelayError)
	hubRange := fmt.Sprintf("1..%d", client.RelayVersion)
	relayRange := fmt.Sprintf("%d..%d", future.Min, future.Max)
	if !ok || e.Code != client.RelayErrorVersion || !strings.Contains(e.Message, hubRange) || !strings.Contains(e.Message, relayRange) {
		t.Fatalf("refusal = %+v, want version error naming %s and %s", e, hubRange, relayRange)
	}

	old := startHub(t, Config{RelayVersions: client.VersionRange{Min: 1, Max: 1}})
	old.look.add(KindRelay, "relay-1", key)
	r3 := dialRelay(t, old, "relay-1", key)
	r3.send(client.RelayFrame{Msg: client.RelayHello{Versions: client.RelayClientVersions, Relay: "relay-1"}})
	e, ok = r3.mustRecv().Msg.(*client.RelayError)
	if !ok || e.Code != client.RelayErrorVersion || e.Versions == nil || e.Versions.Max != 1 || !strings.Contains(e.Message, "must be upgraded") {
		t.Fatalf("old hub refusal = %+v", e)
	}
}

func TestCheckRelayLimits(t *testing.T) {
	tests := []struct {
		n, rc int
		bad   bool
	}{{0, 0, false}, {64, 128, false}, {65, 1, true}, {1, 129, true}}
	for _, tt := range tests {
		err := CheckRelayLimits(&client.RelayReport{Runners: runners(tt.n, tt.rc)})
		if errors.Is(err, ErrLimits) != tt.bad {
			t.Errorf("CheckRelayLimits(%d runners, rc %d) = %v", tt.n, tt.rc, err)
		}
	}
}

// spec: RSESS-01
// A relay's new session replaces its old one, which is told so.
func TestRelaySessionReplaced(t *testing.T) {
	h := startHub(t, Config{})
	key := testKey(3)
	h.look.add(KindRelay, "relay-1", key)
	r1 := dialRelay(t, h, "relay-1", key)
	r1.send(client.RelayFrame{Msg: client.RelayHello{Versions: client.RelayClientVersions, Relay: "relay-1"}})
	r1.mustRecv()
	first := h.rec.next(t, "up").rs
	old := make(chan client.RelayFrame, 1)
	go func() { f, _ := r1.recv(); old <- f; r1.recv() }()
	r2 := dialRelay(t, h, "relay-1", key)
	r2.send(client.RelayFrame{Msg: client.RelayHello{Versions: client.RelayClientVersions, Relay: "relay-1"}})
	r2.mustRecv()
	if e, ok := (<-old).Msg.(*client.RelayError); !ok || e.Code != client.RelayErrorReplaced {
		t.Fatalf("old session told %+v", e)
	}
	if down := h.rec.next(t, "down"); down.rs != first || !errors.Is(down.err, ErrReplaced) {
		t.Fatalf("down %v", down.err)
	}
	if up := h.rec.next(t, "up"); up.rs == first || h.relays.Session("relay-1") != up.rs {
		t.Fatal("registry does not hold the new session")
	}
}
