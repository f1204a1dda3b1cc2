package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/vk-ci/vk/hub/pki"
	"github.com/vk-ci/vk/internal/pgtest"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
	"github.com/vk-ci/vk/reqsign"
)

// benchConns are the client's two ways to reach the hub in the
// benchmarks: "per-request" opens a TLS connection (a full handshake) for
// every request, as reqsign.Transport does; "kept" keeps connections
// alive and signs each request afresh over its connection with its
// sequence number, as the relay's hubclient does (reqsign.Pool, AUTH-14).
var benchConns = []string{"per-request", "kept"}

// benchConn makes h's client reach the hub as conn says (see benchConns).
func benchConn(b *testing.B, h *harness, conn string) {
	b.Helper()
	if conn != "kept" {
		return
	}
	tcfg, err := pki.ClientConfig(h.srv.CAPEM(), "127.0.0.1")
	if err != nil {
		b.Fatal(err)
	}
	pool := &reqsign.Pool{Key: h.key, Principal: h.relay, TLSConfig: tcfg, Now: h.clk.Now}
	b.Cleanup(pool.CloseIdleConnections)
	h.hc = &http.Client{Transport: pool}
}

// BenchmarkReserveClaimOutcome measures full reservation cycles over real
// TLS 1.3 with signed requests, per store and per connection mode
// (benchConns: a connection per request, or kept alive):
// POST reservation (202) → the node accepts the offer → GET ticket (201)
// → claim (204) → outcome released (204). Four requests per cycle (four
// TLS handshakes with a connection each); the node is played through the
// driver. "bolt" is the default durable store (fsync per write: request_id answer, claimed
// admission put and delete), "mem" shows the cost without the disk,
// "postgres" is a local PostgreSQL cluster with fsync and synchronous
// commit on (pgtest.Durable), as durable as bolt.
func BenchmarkReserveClaimOutcome(b *testing.B) {
	for _, store := range []string{"bolt", "mem", "postgres"} {
		for _, conn := range benchConns {
			b.Run(store+"/conn="+conn, func(b *testing.B) { benchReserveClaimOutcome(b, store, conn) })
		}
	}
}

func benchReserveClaimOutcome(b *testing.B, store, conn string) {
	var configure func(*Config)
	if store == "postgres" {
		srv := pgtest.Start(b, pgtest.Durable())
		dsn := srv.NewSchema(b)
		configure = func(c *Config) { c.Store = StoreConfig{Kind: StorePostgres, DSN: dsn} }
	}
	h := newHarness(b, configure)
	if store == "mem" {
		h.cfg.Store = StoreConfig{Kind: StoreMem}
		h.restart()
		h.enrol()
	}
	benchConn(b, h, conn)
	h.relayUp(1)
	h.nodeUp(dispatch.Held{})
	for b.Loop() {
		g := h.grant()
		h.want(http.StatusNoContent, nil, "POST", "/v1/reservations/"+g.Admission+"/claim", nil)
		h.want(http.StatusNoContent, nil, "POST", "/v1/reservations/"+g.Admission+"/outcome",
			client.OutcomeRequest{Admission: g.Admission, Outcome: client.OutcomeReleased})
		expectFrame[dispatch.Release](h)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
}

// autoNode accepts every offer and answers every renew, from its own
// goroutine (Send is called on the driver's and must not call back).
type autoNode struct {
	h      *harness
	frames chan dispatch.Message
}

func (a *autoNode) Send(m dispatch.Message) error {
	a.frames <- m
	return nil
}

func (a *autoNode) run(ctx context.Context) {
	d := a.h.srv.Driver()
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-a.frames:
			if off, ok := m.(dispatch.Offer); ok {
				d.NodeFrame(ctx, "n1", &dispatch.OfferReply{Reservation: off.Reservation, Reply: dispatch.ReplyAccepted, LeaseSecs: 90})
			}
		}
	}
}

// BenchmarkReserveClaimOutcomeParallel runs the same cycle from 8
// concurrent request loops (one runner each) against an auto-accepting
// node: the hub's throughput when handshakes and store commits of several
// requests overlap; per connection mode (benchConns).
func BenchmarkReserveClaimOutcomeParallel(b *testing.B) {
	for _, conn := range benchConns {
		b.Run("conn="+conn, func(b *testing.B) { benchReserveClaimOutcomeParallel(b, conn) })
	}
}

func benchReserveClaimOutcomeParallel(b *testing.B, conn string) {
	h := newHarness(b)
	benchConn(b, h, conn)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	an := &autoNode{h: h, frames: make(chan dispatch.Message, 4096)}
	go an.run(ctx)
	const loops = 8
	benchFleet(b, h, an, loops)
	var next atomic.Int32
	b.SetParallelism(loops / 2) // GOMAXPROCS 2 × 4 = 8 loops
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		runner := fmt.Sprintf("p%d", next.Add(1)-1)
		for pb.Next() {
			var tk client.ReservationTicket
			code, body, _ := h.call("POST", "/v1/reservations", client.ReservationRequest{Runner: runner, Queue: true,
				RequestID: client.NewRequestID(), Placement: testPlacement})
			if code != http.StatusAccepted || json.Unmarshal(body, &tk) != nil {
				b.Errorf("reserve = %d %s", code, body)
				return
			}
			var g client.ReservationGrant
			code, body, _ = h.call("GET", "/v1/reservations/tickets/"+tk.Ticket+"?wait=30", nil)
			if code != http.StatusCreated || json.Unmarshal(body, &g) != nil {
				b.Errorf("ticket = %d %s", code, body)
				return
			}
			if code, body, _ = h.call("POST", "/v1/reservations/"+g.Admission+"/claim", nil); code != http.StatusNoContent {
				b.Errorf("claim = %d %s", code, body)
				return
			}
			if code, body, _ = h.call("POST", "/v1/reservations/"+g.Admission+"/outcome",
				client.OutcomeRequest{Admission: g.Admission, Outcome: client.OutcomeReleased}); code != http.StatusNoContent {
				b.Errorf("outcome = %d %s", code, body)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
}

// benchFleet connects a relay with loops polling runners of testPlacement
// and node n1 (64 CPUs, 64 GiB, pool linux) behind node, as the hub's
// benchmarks start.
func benchFleet(b *testing.B, h *harness, node NodeSender, loops int) {
	b.Helper()
	d := h.srv.Driver()
	rep := &client.RelayReport{Concurrent: 0}
	for i := range loops {
		rep.Runners = append(rep.Runners, client.RunnerReport{Name: fmt.Sprintf("p%d", i), Placement: testPlacement, RequestConcurrency: 1, TokenAccepted: true})
	}
	if err := d.RelayConnected(b.Context(), h.relay, h.rsend); err != nil {
		b.Fatal(err)
	}
	if err := d.RelayFrame(b.Context(), h.relay, rep); err != nil {
		b.Fatal(err)
	}
	hb := &client.RelayHeartbeat{}
	for _, r := range rep.Runners {
		hb.Runners = append(hb.Runners, client.RunnerHeartbeat{Name: r.Name, State: client.RunnerPolling})
	}
	d.RelayFrame(b.Context(), h.relay, hb)
	d.NodeConnected(b.Context(), "n1", node, false)
	h.nodeSay(&dispatch.Report{Resources: dispatch.Resources{Mem: 64 << 30, Disk: 400 << 30, CPUs: 64}, Pools: []string{"linux"}, Labels: []string{"ssd"}})
	h.nodeSay(&dispatch.Held{})
}
