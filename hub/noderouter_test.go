package hub

import (
	"testing"

	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/proto/dispatch"
	"github.com/vk-ci/vk/reqsign"
)

// TestLeaderKeepsOneReport checks that a leading hub keeps each node's
// last report once, in the driver: the router, which keeps the picture
// while a standby, holds none, and what the operator sees (admin nodes)
// is the report the node sent. TestHotStandby checks the hand-over at a
// takeover.
//
// spec: BS-14
func TestLeaderKeepsOneReport(t *testing.T) {
	h := newHarness(t)
	key, err := reqsign.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	nd := dialPeer(t, h, "/v1/node/session", "n9", key, store.KindNode, true)
	nd.node(dispatch.Hello{Versions: dispatch.NodeVersions, Node: "n9"})
	if w, ok := nd.nodeRead().(*dispatch.Welcome); !ok {
		t.Fatalf("node welcome = %#v", w)
	}
	nd.node(dispatch.Report{Resources: dispatch.Resources{Mem: 8 << 30, Disk: 40 << 30, CPUs: 6}, Pools: []string{"linux"}, Labels: []string{"ssd"}})
	nd.node(dispatch.Held{})
	nd.node(dispatch.Heartbeat{State: dispatch.NodeReady})
	// An offer to the node means the driver has handled its report and
	// held, and the router every frame before.
	h.relayUp(1)
	h.reserve()
	if off, ok := nd.nodeRead().(*dispatch.Offer); !ok {
		t.Fatalf("node read %#v, want an offer", off)
	}
	if r, hb := h.srv.router.picture("n9"); r != nil || hb != nil {
		t.Errorf("the leader's router keeps report %+v and heartbeat %+v beside the driver's", r, hb)
	}
	nodes, err := h.srv.Driver().Nodes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, n := range nodes {
		if n.ID == "n9" {
			found = true
			if n.Capacity.CPUs != 6 || n.State != string(dispatch.NodeReady) {
				t.Errorf("admin view of n9 = %+v, want the reported 6 CPUs, ready", n)
			}
		}
	}
	if !found {
		t.Errorf("admin nodes = %+v, want n9", nodes)
	}
}

// picture returns a standby's copy of a node's latest report and
// heartbeat (nil when it has none, and once this instance leads).
func (r *nodeRouter) picture(node string) (*dispatch.Report, *dispatch.Heartbeat) {
	r.mu.Lock()
	defer r.mu.Unlock()
	x := r.nodes[node]
	if x == nil {
		return nil, nil
	}
	return x.report, x.heartbeat
}
