package hub

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/pki"
	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/hub/store/pgstore"
	"github.com/vk-ci/vk/internal/pgtest"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
	"github.com/vk-ci/vk/reqsign"
)

// haConfig is a hub on PostgreSQL at dsn under store.lease.
func haConfig(t *testing.T, instance, dsn string, ttlMillis int) Config {
	c := DefaultConfig()
	c.Addr = "127.0.0.1:0"
	c.StateDir = t.TempDir()
	c.ImmediateWaitMillis = 0
	c.CapacityPolicy = &PolicyConfig{ProbeLimit: 64}
	c.Store = StoreConfig{Kind: StorePostgres, DSN: dsn, Lease: true, LeaseTTLMillis: ttlMillis, Instance: instance}
	return c
}

func startHA(t *testing.T, cfg Config) *Server {
	t.Helper()
	s, err := Start(t.Context(), cfg, testlog.New(t).With("hub", cfg.Store.Instance), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	return s
}

// waitLeading waits (at most limit) for s to lead and returns how long
// it took.
func waitLeading(t *testing.T, s *Server, limit time.Duration) time.Duration {
	t.Helper()
	t0 := time.Now()
	select {
	case <-s.Leading():
		return time.Since(t0)
	case <-s.done:
		t.Fatalf("%s stopped instead of leading", s.cfg.Store.Instance)
	case <-time.After(limit):
		t.Fatalf("%s not leading within %v", s.cfg.Store.Instance, limit)
	}
	return 0
}

func healthOf(t *testing.T, s *Server) Health {
	t.Helper()
	tcfg, _ := pki.ClientConfig(s.CAPEM(), "127.0.0.1")
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tcfg}}
	resp, err := hc.Get(s.URL() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h Health
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || json.Unmarshal(b, &h) != nil {
		t.Fatalf("/healthz = %d %s", resp.StatusCode, b)
	}
	return h
}

// haPeers is one relay's signed client and a node's key, enrolled in the
// shared database, and a harness view of each hub for calls and dials.
type haPeers struct {
	t     *testing.T
	rkey  ed25519.PrivateKey
	nkey  ed25519.PrivateKey
	relay string
	node  string
}

func newHAPeers(t *testing.T, st store.Store) *haPeers {
	p := &haPeers{t: t, relay: "relay-1", node: "n1"}
	p.rkey, _ = reqsign.GenerateKey()
	p.nkey, _ = reqsign.GenerateKey()
	for _, pr := range []store.Principal{
		{ID: p.relay, Kind: store.KindRelay, PublicKey: p.rkey.Public().(ed25519.PublicKey), Created: time.Now()},
		{ID: p.node, Kind: store.KindNode, PublicKey: p.nkey.Public().(ed25519.PublicKey), Created: time.Now()},
	} {
		if err := st.CreatePrincipal(t.Context(), pr); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// at is a harness on s signing as the relay (for call, want, dialPeer).
func (p *haPeers) at(s *Server) *harness {
	tcfg, err := pki.ClientConfig(s.CAPEM(), "127.0.0.1")
	if err != nil {
		p.t.Fatal(err)
	}
	return &harness{t: p.t, srv: s, relay: p.relay, key: p.rkey,
		hc: &http.Client{Transport: &reqsign.Transport{Key: p.rkey, Principal: p.relay, TLSConfig: tcfg, Now: time.Now}}}
}

// nodeOn dials the node's session to s and reads its welcome.
func (p *haPeers) nodeOn(s *Server) *wsPeer {
	nd := dialPeer(p.t, p.at(s), "/v1/node/session", p.node, p.nkey, store.KindNode, false)
	nd.node(dispatch.Hello{Versions: dispatch.NodeVersions, Node: p.node})
	if w, ok := nd.nodeRead().(*dispatch.Welcome); !ok || w.HeartbeatSecs <= 0 {
		p.t.Fatalf("node welcome = %#v", w)
	}
	return nd
}

// relayOn opens the relay's session to s: report (runner r1), approved,
// heartbeat.
func (p *haPeers) relayOn(s *Server) *wsPeer {
	rl := dialPeer(p.t, p.at(s), client.RouteRelaySession[len("GET "):], p.relay, p.rkey, store.KindRelay, false)
	rl.relay(client.RelayHello{Versions: client.RelayClientVersions, Relay: p.relay}, true)
	if w, ok := rl.relayRead().(*client.RelayWelcome); !ok {
		p.t.Fatalf("relay welcome = %#v", w)
	}
	rl.relay(client.RelayReport{Concurrent: 4, Runners: []client.RunnerReport{{Name: "r1", Placement: testPlacement, RequestConcurrency: 1}}}, false)
	if st, ok := rl.relayRead().(*client.ServerStatus); !ok || st.Status != client.ApprovalApproved {
		p.t.Fatalf("server status = %#v", st)
	}
	rl.relay(client.RelayHeartbeat{Runners: []client.RunnerHeartbeat{{Name: "r1", State: client.RunnerPolling}}}, false)
	return rl
}

var haReport = dispatch.Report{Resources: dispatch.Resources{Mem: 4 << 30, Disk: 20 << 30, CPUs: 4}, Pools: []string{"linux"}, Labels: []string{"ssd"}}

// nextOf reads node frames until one of type T, skipping heartbeats.
func nextOf[T any](t *testing.T, nd *wsPeer) *T {
	t.Helper()
	for {
		m := nd.nodeRead()
		if v, ok := any(m).(*T); ok {
			return v
		}
		if _, ok := m.(*dispatch.Heartbeat); !ok {
			t.Fatalf("node got %T %+v, want %T", m, m, *new(T))
		}
	}
}

// reserve asks h's hub for a reservation until it is queued (the
// relay's and node's frames cross real sockets first).
func reserve(t *testing.T, h *harness) client.ReservationTicket {
	t.Helper()
	req := client.ReservationRequest{Runner: "r1", Queue: true, RequestID: client.NewRequestID(), Placement: testPlacement}
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body, _ := h.call("POST", "/v1/reservations", req)
		if code == http.StatusAccepted {
			var tk client.ReservationTicket
			if err := json.Unmarshal(body, &tk); err != nil {
				t.Fatal(err)
			}
			return tk
		}
		if time.Now().After(deadline) {
			t.Fatalf("reservation = %d %s", code, body)
		}
		time.Sleep(5 * time.Millisecond) // polling an external socket peer, not synchronising in-process
	}
}

// A standby holds node sessions and builds the fleet picture from their
// reports, sends no command and answers the client API 503 unavailable
// naming the leader; /healthz says which it is. When the leader goes,
// the standby takes the lease, restores from the store, hands the node
// sessions it already holds to its driver, tells each node its epoch and
// places work on them with that epoch, no node reconnecting.
//
// spec: BS-10, BS-13, BS-14, BS-15, NSESS-11, NSESS-24
func TestHotStandby(t *testing.T) {
	srv := pgtest.Start(t)
	dsn := srv.NewSchema(t)
	a := startHA(t, haConfig(t, "hub-a", dsn, 1500))
	waitLeading(t, a, 10*time.Second)
	b := startHA(t, haConfig(t, "hub-b", dsn, 1500))
	p := newHAPeers(t, a.Store())

	if h := healthOf(t, a); h.Role != "leader" || h.Epoch != 1 {
		t.Fatalf("hub-a /healthz = %+v, want leader at epoch 1", h)
	}
	if h := healthOf(t, b); h.Role != "standby" || h.Epoch != 1 || h.Leader != a.URL() {
		t.Fatalf("hub-b /healthz = %+v, want standby at epoch 1 naming %s", h, a.URL())
	}
	req := client.ReservationRequest{Runner: "r1", Queue: true, RequestID: client.NewRequestID(), Placement: testPlacement}
	if e := p.at(b).wantErr(http.StatusServiceUnavailable, client.CodeUnavailable, "POST", "/v1/reservations", req); e.Leader != a.URL() {
		t.Fatalf("standby's 503 names leader %q, want %q", e.Leader, a.URL())
	}

	na, nb := p.nodeOn(a), p.nodeOn(b)
	if st := nextOf[dispatch.Settings](t, na); st.Epoch != 1 {
		t.Fatalf("leader's settings carry epoch %d, want 1", st.Epoch)
	}
	for _, nd := range []*wsPeer{na, nb} {
		nd.node(haReport)
		nd.node(dispatch.Held{})
	}
	hb := dispatch.Heartbeat{State: dispatch.NodeReady, Jobs: 0}
	nb.node(hb)
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, h := b.router.picture(p.node)
		if r != nil && r.Resources.CPUs == 4 && h != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("standby's picture of n1: report %+v, heartbeat %+v", r, h)
		}
		time.Sleep(5 * time.Millisecond) // polling an external socket peer, not synchronising in-process
	}
	if b.Driver() != nil {
		t.Fatal("the standby runs a driver")
	}

	stopAt := time.Now()
	if err := a.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Logf("hub-b leading %v after hub-a released the lease", waitLeading(t, b, 10*time.Second).Round(time.Millisecond))
	if b.Epoch() != 2 {
		t.Fatalf("hub-b leads at epoch %d, want 2", b.Epoch())
	}
	// The node's session to hub-b was up all along: it hears the new
	// epoch on it and resends its report and held there.
	if st := nextOf[dispatch.Settings](t, nb); st.Epoch != 2 {
		t.Fatalf("new leader's settings carry epoch %d, want 2", st.Epoch)
	}
	nb.node(haReport)
	nb.node(dispatch.Held{})
	if h := healthOf(t, b); h.Role != "leader" || h.Epoch != 2 || h.Nodes != 1 {
		t.Fatalf("hub-b /healthz = %+v, want leader at epoch 2 with 1 node", h)
	}
	p.relayOn(b)
	tk := reserve(t, p.at(b))
	off := nextOf[dispatch.Offer](t, nb)
	if off.Epoch != 2 {
		t.Fatalf("offer carries epoch %d, want 2", off.Epoch)
	}
	// Leading, the driver keeps the node's report; the router dropped its
	// standby copy at the takeover.
	if r, h := b.router.picture(p.node); r != nil || h != nil {
		t.Errorf("hub-b's router still keeps n1's report %+v and heartbeat %+v beside the driver's", r, h)
	}
	nb.node(dispatch.OfferReply{Reservation: off.Reservation, Reply: dispatch.ReplyAccepted, LeaseSecs: 90})
	var g client.ReservationGrant
	p.at(b).want(http.StatusCreated, &g, "GET", "/v1/reservations/tickets/"+tk.Ticket+"?wait=30", nil)
	if g.Node != p.node {
		t.Fatalf("grant = %+v, want on %s", g, p.node)
	}
	t.Logf("first grant by the new leader %v after the old one stopped", time.Since(stopAt).Round(time.Millisecond))
}

// ttlMillis is the lease TTL of the tests whose leader reaches the
// database through a proxy.
const ttlMillis = 1500

// leaderBehindProxy starts a throwaway PostgreSQL and hub-a leading on
// it through a proxy the test can black-hole; dsn (and schema) reach the
// same database directly, for a second instance.
func leaderBehindProxy(t *testing.T) (srv *pgtest.Server, dsn, schema string, proxy *pgtest.Proxy, a *Server) {
	t.Helper()
	srv = pgtest.Start(t)
	dsn = srv.NewSchema(t)
	_, schema, _ = strings.Cut(dsn, "search_path=")
	proxy = pgtest.NewProxy(t, srv.Addr())
	a = startHA(t, haConfig(t, "hub-a", pgtest.DSNAt(proxy.Addr(), "postgres")+" search_path="+schema, ttlMillis))
	waitLeading(t, a, 10*time.Second)
	return srv, dsn, schema, proxy, a
}

// A leader cut off from the database stops before its lease can have
// expired; a standby takes the lease once it expired on the database's
// clock; the deposed leader's writes are refused.
//
// spec: BS-10, BS-11, BS-12
func TestLeaseTakeover(t *testing.T) {
	srv, dsn, schema, proxy, a := leaderBehindProxy(t)
	b := startHA(t, haConfig(t, "hub-b", dsn, ttlMillis))
	if got := srv.Exec(t, "postgres", "SELECT holder || ' ' || epoch FROM "+schema+".vk_lease"); got != "hub-a 1" {
		t.Fatalf("lease %q, want hub-a 1", got)
	}
	select {
	case <-b.Leading():
		t.Fatal("hub-b leads while hub-a holds the lease")
	case <-time.After(2 * ttlMillis * time.Millisecond): // a bound on a non-event, not a synchronisation
	}
	cutAt := time.Now()
	proxy.Blackhole(true)
	select {
	case <-a.done:
		if !a.lostLease.Load() {
			t.Fatal("hub-a stopped, but not for its lost lease")
		}
		t.Logf("hub-a stopped %v after its database was black-holed (ttl %d ms)", time.Since(cutAt).Round(time.Millisecond), ttlMillis)
	case <-time.After(5 * ttlMillis * time.Millisecond):
		t.Fatal("hub-a still leading 5 TTLs after losing its database")
	}
	waitLeading(t, b, 10*time.Second)
	took := time.Since(cutAt)
	t.Logf("hub-b leading %v after hub-a was cut off (ttl %d ms)", took.Round(time.Millisecond), ttlMillis)
	// The lease expires at most a TTL after hub-a's last renew, hub-b
	// retries every third of it (3 s of slack for a loaded machine).
	if limit := ttlMillis*time.Millisecond*4/3 + 3*time.Second; took > limit {
		t.Errorf("takeover took %v, want at most %v", took, limit)
	}
	if got := srv.Exec(t, "postgres", "SELECT holder || ' ' || epoch FROM "+schema+".vk_lease"); got != "hub-b 2" {
		t.Fatalf("lease %q, want hub-b 2", got)
	}
	proxy.Blackhole(false)
	if _, err := b.Store().AppendAudit(t.Context(), store.AuditEntry{Time: time.Now(), Actor: "test", Action: "probe"}); err != nil {
		t.Fatalf("the new leader's write: %v", err)
	}
	_, err := a.Store().AppendAudit(t.Context(), store.AuditEntry{Time: time.Now(), Actor: "test", Action: "late"})
	if !errors.Is(err, pgstore.ErrFenced) {
		t.Fatalf("deposed hub's write once another holds the lease: %v, want ErrFenced", err)
	}
}

// A leader that dies in the middle of a fenced write leaves its
// transaction holding the lease row FOR SHARE; the hub's sessions set
// idle_in_transaction_session_timeout to a third of the TTL, so the
// database ends that transaction and a standby's takeover is not held
// back until TCP keepalives notice the dead peer (hours by default).
//
// spec: BS-12
func TestTakeoverPastDeadTransaction(t *testing.T) {
	srv := pgtest.Start(t)
	dsn := srv.NewSchema(t)
	_, schema, _ := strings.Cut(dsn, "search_path=")
	const ttl = 1500 * time.Millisecond
	proxy := pgtest.NewProxy(t, srv.Addr())
	dead, err := pgstore.Open(t.Context(), idleTxTimeout(pgtest.DSNAt(proxy.Addr(), "postgres")+" search_path="+schema, ttl/3), pgstore.Options{Fenced: true})
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	la := pgstore.NewLease(dead.Pool(), pgstore.LeaseConfig{Holder: "dead", TTL: ttl})
	if _, _, ok, err := la.TryAcquire(t.Context()); !ok || err != nil {
		t.Fatalf("first acquire: %v %v", ok, err)
	}
	tx, err := dead.Pool().Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(t.Context(), "SELECT epoch FROM vk_lease WHERE name = 'leader' FOR SHARE"); err != nil {
		t.Fatal(err)
	}
	proxy.Blackhole(true) // the holder's machine is gone mid-transaction
	defer proxy.Blackhole(false)
	cutAt := time.Now()

	live, err := pgstore.Open(t.Context(), dsn, pgstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	lb := pgstore.NewLease(live.Pool(), pgstore.LeaseConfig{Holder: "live", TTL: ttl})
	for {
		ctx, cancel := context.WithTimeout(t.Context(), ttl/3)
		_, _, ok, _ := lb.TryAcquire(ctx)
		cancel()
		if ok {
			break
		}
		if time.Since(cutAt) > 10*ttl {
			t.Fatalf("no takeover %v after the holder died mid-transaction", time.Since(cutAt))
		}
	}
	took := time.Since(cutAt)
	t.Logf("takeover %v after the holder died mid-transaction (ttl %v)", took.Round(time.Millisecond), ttl)
	if limit := ttl + ttl/3 + 3*time.Second; took > limit {
		t.Errorf("takeover took %v, want at most %v", took, limit)
	}
}

// A leader cut off from the database stops (it lost the lease) and its
// shutdown then ends within a bound although the database still does
// not answer, so that its process exits and its supervisor can start it
// again as a standby. Before the store's close was bounded, pgx's
// goodbye on each pooled connection waited 15 s for the silent database,
// one connection after another (a minute in the HA soak's run 17).
//
// spec: BS-11
func TestShutdownWithDatabaseUnreachable(t *testing.T) {
	_, _, _, proxy, a := leaderBehindProxy(t)
	proxy.Blackhole(true)
	defer proxy.Blackhole(false)
	select {
	case <-a.done:
	case <-time.After(5 * ttlMillis * time.Millisecond):
		t.Fatal("hub-a still leading 5 TTLs after losing its database")
	}
	stopped := make(chan error, 1)
	t0 := time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		stopped <- a.Shutdown(ctx)
	}()
	// The grace (2 s) plus the store's CloseWait, with a loaded machine's
	// slack; unbounded, it is 15 s per pooled connection.
	limit := 2*time.Second + pgstore.CloseWait + 5*time.Second
	select {
	case err := <-stopped:
		t.Logf("hub-a shut down %v after it was asked, its database unreachable: %v", time.Since(t0).Round(time.Millisecond), err)
	case <-time.After(limit):
		t.Fatalf("hub-a's shutdown has not returned %v after it was asked, its database unreachable", limit)
	}
}

// hangingClose is a store whose Close never returns while its gate is
// shut, as a part of a shutdown stuck on a database that does not answer.
type hangingClose struct {
	store.Store
	gate chan struct{}
}

func (h hangingClose) Close() error {
	<-h.gate
	return h.Store.Close()
}

// Run's shutdown is bounded: when a part of it never ends, Run returns
// once AbandonAfter has passed, with an error that says so, so that the
// process exits and its supervisor can start it again.
func TestRunAbandonsAStuckShutdown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := DefaultConfig()
	c.Addr = addr
	c.StateDir = t.TempDir()
	c.ShutdownGraceSecs = 1
	gate := make(chan struct{})
	defer close(gate)
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() {
		ran <- run(ctx, c, testlog.New(t), Options{AbandonAfter: time.Second,
			WrapStore: func(st store.Store) store.Store { return hangingClose{st, gate} }})
	}()
	for { // until the hub listens: then its shutdown, not its start, is what ends
		if conn, err := net.Dial("tcp", addr); err == nil {
			conn.Close()
			break
		}
		select {
		case err := <-ran:
			t.Fatalf("Run returned before it listened: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	cancel()
	select {
	case err := <-ran:
		if err == nil || !strings.Contains(err.Error(), "shutdown still unfinished") {
			t.Fatalf("Run with a stuck shutdown returned %v, want the abandoned shutdown's error", err)
		}
		t.Logf("Run: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Run has not returned 30 s after its context ended, its shutdown stuck")
	}
}
