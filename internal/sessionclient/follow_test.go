package sessionclient_test

import (
	"encoding/json"
	"net"
	"net/http"
	"testing"

	"github.com/vk-ci/vk/hub/pki"
	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/sessionclient"
	"github.com/vk-ci/vk/internal/sessionclient/sessiontest"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/internal/wsconn"
)

// A hub instance that refuses the upgrade as a standby, naming the
// leader, is left for the leader at once, without a backoff, and the
// redials after a lost session go to the leader followed.
//
// spec: BS-12, RSESS-01
func TestFollowsLeaderOnUpgrade(t *testing.T) {
	leader := startHub(t)
	standby := sessiontest.Start(t, "/v1/test/session", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		json.NewEncoder(w).Encode(map[string]any{"error": "standby", "code": "unavailable", "leader": leader.Origin})
	}))
	tcfg, err := pki.ClientConfig(append(append([]byte{}, standby.Bundle.CACertPEM...), leader.Bundle.CACertPEM...), "")
	if err != nil {
		t.Fatal(err)
	}
	k := newKind()
	fc := clock.NewFake(t0)
	c := sessionclient.New(sessionclient.Config{
		URL: standby.URL, Principal: "p1", Key: testKey(), TLSConfig: tcfg, Conn: wsconn.Options{PingInterval: -1},
		Versions: versions{1, 2}, QueueFrames: 10,
		Errors:     sessionclient.Errors{Version: errVersion, Protocol: errProtocol, Stopped: errStopped, NotConnected: errNotUp},
		VersionMsg: "version refused", OverflowMsg: "queue full",
		Clock: fc, Rand: func() float64 { return 0.5 }, Log: testlog.New(t),
	}, k)
	sessiontest.Run(t, c.Run)
	conn, _ := leader.welcome(t, msg{Version: 1, Handle: "h1"})
	sessiontest.Recv(t, k.connected, "connected to the leader")
	if standby.Dials() != 1 || leader.Dials() != 1 {
		t.Fatalf("dials: standby %d, leader %d; want 1 and 1", standby.Dials(), leader.Dials())
	}
	// The session is lost: the redial goes to the leader followed.
	conn.CloseNow()
	sessiontest.Recv(t, k.downs, "disconnected")
	redial(t, fc)
	leader.welcome(t, msg{Version: 1, Handle: "h2"})
	sessiontest.Recv(t, k.connected, "reconnected to the leader")
	if standby.Dials() != 1 || leader.Dials() != 2 {
		t.Fatalf("dials: standby %d, leader %d; want 1 and 2", standby.Dials(), leader.Dials())
	}
}

// A client given several instances whose first cannot be reached dials
// the next one after its backoff, and keeps dialling that one while it
// answers: a relay whose first-listed hub died still reaches the others.
//
// spec: BS-12, RSESS-01
func TestNextInstanceWhenUnreachable(t *testing.T) {
	dead := deadURL(t)
	live := startHub(t)
	k := newKind()
	fc := clock.NewFake(t0)
	c := sessionclient.New(sessionclient.Config{
		URL: dead, Others: []string{live.URL}, Principal: "p1", Key: testKey(), TLSConfig: live.ClientTLS(t),
		Conn: wsconn.Options{PingInterval: -1}, Versions: versions{1, 2}, QueueFrames: 10,
		Errors:     sessionclient.Errors{Version: errVersion, Protocol: errProtocol, Stopped: errStopped, NotConnected: errNotUp},
		VersionMsg: "version refused", OverflowMsg: "queue full",
		Clock: fc, Rand: func() float64 { return 0.5 }, Log: testlog.New(t),
	}, k)
	sessiontest.Run(t, c.Run)
	redial(t, fc) // the first dial found nothing at dead
	conn, _ := live.welcome(t, msg{Version: 1, Handle: "h1"})
	sessiontest.Recv(t, k.connected, "connected to the second instance")
	conn.CloseNow()
	sessiontest.Recv(t, k.downs, "disconnected")
	redial(t, fc)
	live.welcome(t, msg{Version: 1, Handle: "h2"})
	sessiontest.Recv(t, k.connected, "reconnected to the second instance")
	if live.Dials() != 2 {
		t.Fatalf("the live instance saw %d dials, want 2", live.Dials())
	}
}

// deadURL is a session URL on a loopback port nothing listens on.
func deadURL(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "wss://" + addr + "/v1/test/session"
}

// A hub instance that refuses the upgrade with 503 and names no leader
// (a standby during a failover's leaderless seconds) is redialled every
// second, not after a backoff that doubles: the session to the new leader
// comes back within a second of its election.
//
// spec: BS-12, RSESS-01
func TestRedialsLeaderlessStandbyEverySecond(t *testing.T) {
	standby := sessiontest.Start(t, "/v1/test/session", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		json.NewEncoder(w).Encode(map[string]any{"error": "standby; no leader", "code": "unavailable", "retry_after_secs": 1})
	}))
	k := newKind()
	fc := clock.NewFake(t0)
	c := sessionclient.New(sessionclient.Config{
		URL: standby.URL, Principal: "p1", Key: testKey(), TLSConfig: standby.ClientTLS(t),
		Conn: wsconn.Options{PingInterval: -1}, Versions: versions{1, 2}, QueueFrames: 10,
		Errors:     sessionclient.Errors{Version: errVersion, Protocol: errProtocol, Stopped: errStopped, NotConnected: errNotUp},
		VersionMsg: "version refused", OverflowMsg: "queue full",
		Clock: fc, Rand: func() float64 { return 0.5 }, Log: testlog.New(t),
	}, k)
	sessiontest.Run(t, c.Run)
	for n := int64(1); n <= 6; n++ {
		sessiontest.WaitFor(t, "a dial and its backoff timer", func() bool { return standby.Dials() == n && fc.Pending() >= 1 })
		fc.Advance(wsconn.MinBackoff) // Rand 0.5: the jitter's factor is exactly 1
	}
	sessiontest.WaitFor(t, "the seventh dial", func() bool { return standby.Dials() == 7 })
}
