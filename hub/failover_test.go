package hub

import (
	"flag"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/pgtest"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

var (
	failoverKills = flag.Int("failover-kills", 2, "leader kills TestFailoverTime measures (docs/benchmarks.md: 20)")
	failoverTTL   = flag.Duration("failover-ttl", 1500*time.Millisecond, "the lease TTL TestFailoverTime runs with (the default TTL is 5s)")
)

// crash stops s as the loss of its machine would: its database becomes
// unreachable (no renew, no release: the lease must expire), and its
// listener and sessions go.
func crash(s *Server, db *pgtest.Proxy) {
	db.Blackhole(true)
	// Closing the sessions waits for each peer's close handshake (a
	// crashed machine sends none): off the measured path.
	go func() {
		s.http.Close()
		s.nodes.Close()
		if r := s.relayServer(); r != nil {
			r.Close()
		}
	}()
}

// TestFailoverTime measures, over -failover-kills kills of the leader,
// the time from the kill to the new leader's first grant: the lease's
// expiry on the database's clock, the standby's next attempt, its
// restore, the nodes' resync over the sessions it already holds, a relay
// session and one reservation offered and accepted. A relay's own retry
// backoff is not in it (the test's relay dials the new leader once it
// leads). Each kill starts the next standby first.
//
// spec: BS-12, BS-13, BS-14, BS-15
func TestFailoverTime(t *testing.T) {
	srv := pgtest.Start(t)
	dsn := srv.NewSchema(t)
	_, schema, _ := strings.Cut(dsn, "search_path=")
	ttl := *failoverTTL
	newHub := func(name string) (*Server, *pgtest.Proxy) {
		proxy := pgtest.NewProxy(t, srv.Addr())
		return startHA(t, haConfig(t, name, pgtest.DSNAt(proxy.Addr(), "postgres")+" search_path="+schema, int(ttl/time.Millisecond))), proxy
	}
	lead, leadDB := newHub("hub-0")
	waitLeading(t, lead, 10*time.Second)
	p := newHAPeers(t, lead.Store())
	nd := p.nodeOn(lead)
	nextOf[dispatch.Settings](t, nd)
	nd.node(haReport)
	nd.node(dispatch.Held{})

	var elected, granted []time.Duration
	for i := 1; i <= *failoverKills; i++ {
		sb, sbDB := newHub(fmt.Sprintf("hub-%d", i))
		nsb := p.nodeOn(sb)
		nsb.node(haReport)
		deadline := time.Now().Add(10 * time.Second)
		for r, _ := sb.router.picture(p.node); r == nil; r, _ = sb.router.picture(p.node) {
			if time.Now().After(deadline) {
				t.Fatal("the standby never got the node's report")
			}
			time.Sleep(5 * time.Millisecond) // polling an external socket peer, not synchronising in-process
		}

		t0 := time.Now()
		crash(lead, leadDB)
		waitLeading(t, sb, 4*ttl+10*time.Second)
		elected = append(elected, time.Since(t0))
		if st := nextOf[dispatch.Settings](t, nsb); st.Epoch != sb.Epoch() {
			t.Fatalf("kill %d: settings epoch %d, leader at %d", i, st.Epoch, sb.Epoch())
		}
		nsb.node(haReport)
		nsb.node(dispatch.Held{})
		p.relayOn(sb)
		tk := reserve(t, p.at(sb))
		off := nextOf[dispatch.Offer](t, nsb)
		nsb.node(dispatch.OfferReply{Reservation: off.Reservation, Reply: dispatch.ReplyAccepted, LeaseSecs: 90})
		var g client.ReservationGrant
		p.at(sb).want(http.StatusCreated, &g, "GET", "/v1/reservations/tickets/"+tk.Ticket+"?wait=30", nil)
		granted = append(granted, time.Since(t0))
		t.Logf("kill %d: new leader at epoch %d after %v, first grant after %v", i, sb.Epoch(),
			elected[i-1].Round(time.Millisecond), granted[i-1].Round(time.Millisecond))
		// The deposed leader reaches the database again: its writes are
		// refused (fenced), and its cleanup can finish.
		leadDB.Blackhole(false)
		lead, leadDB, nd = sb, sbDB, nsb
	}
	_ = nd
	if len(granted) == 0 {
		return
	}
	slices.Sort(elected)
	slices.Sort(granted)
	med := func(d []time.Duration) time.Duration { return d[len(d)/2].Round(time.Millisecond) }
	t.Logf("%d kills, ttl %v: new leader median %v worst %v; first grant median %v worst %v", len(granted), ttl,
		med(elected), elected[len(elected)-1].Round(time.Millisecond), med(granted), granted[len(granted)-1].Round(time.Millisecond))
	// The lease expires at most a TTL after the last renew; the standby
	// tries every third of a TTL; then restore and one placement (3 s of
	// slack for a loaded machine). With the default 5 s TTL this is the
	// 10 s goal (BS-12).
	if limit := ttl*4/3 + 3*time.Second; granted[len(granted)-1] > limit {
		t.Errorf("worst failover %v, want at most %v", granted[len(granted)-1], limit)
	}
}
