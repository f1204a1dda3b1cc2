package session_test

import (
	"crypto/ed25519"
	"testing"

	hubsession "github.com/vk-ci/vk/hub/session"
	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/node/session"
	"github.com/vk-ci/vk/proto/dispatch"

	"github.com/vk-ci/vk/hub/pki"
)

// next returns the agent's next message of type T, skipping others
// (settings frames the hubs send on their own).
func next[T any](t *testing.T, ch chan dispatch.Message, what string) *T {
	t.Helper()
	for {
		m := recv(t, ch, what)
		if v, ok := any(m).(*T); ok {
			return v
		}
	}
}

// With several hub instances the node holds a session to each and sends
// every report and held to all; it follows the instance whose commands
// carry the newest lease epoch, starts over with a new leader as after a
// new session (report, held), and refuses a deposed leader's commands
// (an older epoch), answering its offer refused.
//
// spec: BS-11, BS-13, BS-15, NSESS-04, NSESS-11, NSESS-24
func TestFleetFollowsNewestEpoch(t *testing.T) {
	keys := lookup{"n1": nodeKey().Public().(ed25519.PublicKey)}
	ha, hb := startHub(t, hubsession.Config{}, keys), startHub(t, hubsession.Config{}, keys)
	tcfg, err := pki.ClientConfig(append(append([]byte{}, ha.Bundle.CACertPEM...), hb.Bundle.CACertPEM...), "")
	if err != nil {
		t.Fatal(err)
	}
	a := newAgent()
	c, err := session.New(session.Config{URL: ha.URL, URLs: []string{hb.URL}, NodeID: "n1", Key: nodeKey(), TLSConfig: tcfg,
		Clock: clock.NewFake(t0), Rand: func() float64 { return 0.5 }, Logger: testlog.New(t)}, a)
	if err != nil {
		t.Fatal(err)
	}
	a.c = c
	run(t, c)
	sa, sb := recv(t, ha.up, "NodeUp on hub-a"), recv(t, hb.up, "NodeUp on hub-b")
	recv(t, a.connected, "first welcome")
	// Both instances get the report, whichever session the agent followed
	// first (the other gets the report the agent sent last).
	for _, h := range []*hub{ha, hb} {
		next[dispatch.Report](t, h.msgs, "report")
	}

	// hub-a leads at epoch 1.
	if err := sa.Send(dispatch.Settings{Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	if st := next[dispatch.Settings](t, a.msgs, "settings of epoch 1"); st.Epoch != 1 {
		t.Fatalf("settings epoch %d", st.Epoch)
	}
	sa.Send(dispatch.Offer{Reservation: "r-1", LeaseSecs: 30, Epoch: 1})
	if o := next[dispatch.Offer](t, a.msgs, "offer of epoch 1"); o.Reservation != "r-1" {
		t.Fatalf("offer %+v", o)
	}

	// hub-b takes over at epoch 2: the node starts over with it.
	drain := func(ch chan dispatch.Welcome) {
		for len(ch) > 0 {
			<-ch
		}
	}
	drain(a.connected)
	sb.Send(dispatch.Settings{Epoch: 2})
	if w := recv(t, a.connected, "a new session with the new leader"); w.Resumed {
		t.Fatal("the switch to a new leader reads as a resumed session")
	}
	next[dispatch.Held](t, hb.msgs, "held to the new leader")
	next[dispatch.Held](t, ha.msgs, "held to every instance")
	if st := next[dispatch.Settings](t, a.msgs, "settings of epoch 2"); st.Epoch != 2 {
		t.Fatalf("settings epoch %d", st.Epoch)
	}

	// The deposed hub-a's offer is refused, and answered refused to it.
	sa.Send(dispatch.Offer{Reservation: "r-stale", LeaseSecs: 30, Epoch: 1})
	if r := next[dispatch.OfferReply](t, ha.msgs, "the stale offer's refusal"); r.Reservation != "r-stale" || r.Reply != dispatch.ReplyRefused {
		t.Fatalf("deposed leader got %+v, want r-stale refused", r)
	}
	if c.Refused() != 1 {
		t.Fatalf("Refused() = %d, want 1", c.Refused())
	}
	sb.Send(dispatch.Offer{Reservation: "r-2", LeaseSecs: 30, Epoch: 2})
	if o := next[dispatch.Offer](t, a.msgs, "offer of epoch 2"); o.Reservation != "r-2" {
		t.Fatalf("agent got offer %s, want r-2 (r-stale must be refused)", o.Reservation)
	}
	// The agent's answer goes to the leader it follows.
	c.Send(dispatch.OfferReply{Reservation: "r-2", Reply: dispatch.ReplyAccepted, LeaseSecs: 30})
	if r := next[dispatch.OfferReply](t, hb.msgs, "the reply to the new leader"); r.Reservation != "r-2" {
		t.Fatalf("new leader got %+v", r)
	}
}
