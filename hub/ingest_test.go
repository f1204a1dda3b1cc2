package hub

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
	"github.com/vk-ci/vk/sched"
)

// dropNode is a node session that discards what the hub sends it.
type dropNode struct{}

func (dropNode) Send(dispatch.Message) error { return nil }

// coreNodesReq reads the core's view of every node on the driver's
// goroutine.
type coreNodesReq struct{ views []sched.NodeView }

func (r *coreNodesReq) run(d *Driver) { r.views = d.core.Nodes() }

// spec: BS-09
// A thousand nodes' reports reach the hub's picture of the fleet and cost
// no store write: three rounds of a change-driven report (each node's
// capacity changes) and two heartbeats per node (half the nodes go
// draining and back), 9,000 frames in all, after which every node's last
// report and state are what the core and the admin view hold, and the
// store's file is byte for byte what it was before the first round.
func TestIngestThousandNodes(t *testing.T) {
	const nodes, rounds = 1000, 3
	h := newHarness(t)
	ctx := t.Context()
	d := h.srv.Driver()
	name := func(i int) string { return fmt.Sprintf("node-%04d", i) }
	report := func(i, round int) *dispatch.Report {
		return &dispatch.Report{Resources: dispatch.Resources{CPUs: 8 + round, Mem: client.Size(16+i%4) << 30, Disk: 100 << 30},
			Pools: []string{"linux"}, Labels: []string{fmt.Sprintf("r%d", round)}}
	}
	say := func(i int, m dispatch.Message) {
		if err := d.NodeFrame(ctx, name(i), m); err != nil {
			t.Fatalf("%s: %T: %v", name(i), m, err)
		}
	}
	for i := range nodes {
		if err := d.NodeConnected(ctx, name(i), dropNode{}, false); err != nil {
			t.Fatal(err)
		}
		say(i, report(i, 0))
		say(i, &dispatch.Held{})
		say(i, &dispatch.Heartbeat{State: dispatch.NodeReady})
	}
	dbFile := filepath.Join(h.dir, "hub.db")
	sum := func() [32]byte {
		b, err := os.ReadFile(dbFile)
		if err != nil {
			t.Fatal(err)
		}
		return sha256.Sum256(b)
	}
	before := sum()

	load := 0.5
	for round := 1; round <= rounds; round++ {
		for i := range nodes {
			say(i, report(i, round))
			state := dispatch.NodeReady
			if i%2 == 0 && round < rounds {
				state = dispatch.NodeDraining
			}
			load += 0.01
			say(i, &dispatch.Heartbeat{State: state, Load1: &load})
			say(i, &dispatch.Heartbeat{State: state, Jobs: 0})
		}
	}

	r := &coreNodesReq{}
	if err := d.ask(ctx, r); err != nil {
		t.Fatal(err)
	}
	capacity := map[int64]int{}
	for _, v := range r.views {
		capacity[v.Capacity.CPUs]++
	}
	if capacity[8+rounds] != nodes {
		t.Fatalf("core capacities by CPUs %v, want all %d nodes at %d CPUs (the last report)", capacity, nodes, 8+rounds)
	}
	views, err := d.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	applied := 0
	for _, v := range views {
		var i int
		if _, err := fmt.Sscanf(v.ID, "node-%04d", &i); err != nil {
			continue
		}
		want := report(i, rounds)
		if v.State != string(dispatch.NodeReady) || v.Capacity.CPUs != int(want.Resources.CPUs) || v.Capacity.Mem != want.Resources.Mem ||
			len(v.Labels) != 1 || v.Labels[0] != want.Labels[0] {
			t.Fatalf("%s: state %s, capacity %+v, labels %v; want ready and the last report's %+v, %v", v.ID, v.State, v.Capacity, v.Labels, want.Resources, want.Labels)
		}
		applied++
	}
	if applied != nodes {
		t.Fatalf("admin view lists %d of the %d nodes", applied, nodes)
	}
	if after := sum(); !bytes.Equal(before[:], after[:]) {
		t.Fatal("the store's file changed while the hub ingested node reports and heartbeats")
	}
}
