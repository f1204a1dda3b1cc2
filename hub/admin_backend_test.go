package hub

import (
	"errors"
	"net/http"
	"testing"

	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

// spec: OPS-01, OPS-02, OPS-03, PLACE-04, ARB-11
func TestAdminBackend(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	h.enrolNode("n1")
	h.relayUp(1)
	h.nodeUp(dispatch.Held{})
	d := h.srv.Driver()

	if err := d.SetCeiling(ctx, "nope", 3); !errors.Is(err, admin.ErrNotFound) {
		t.Fatalf("ceiling of an unknown node: %v", err)
	}
	// OPS-02: a ceiling of 1 leaves room for one envelope.
	if err := d.SetCeiling(ctx, "n1", 1); err != nil {
		t.Fatal(err)
	}
	// A ceiling alone names no pools: the node keeps its own.
	if s := expectFrame[dispatch.Settings](h); s.Ceiling != 1 || s.PoolsSet || s.Pools != nil {
		t.Fatalf("settings = %+v", s)
	}
	var c client.Capacity
	h.want(http.StatusOK, &c, "POST", "/v1/capacity", client.CapacityRequest{Placement: testPlacement})
	if c.Fits != 1 {
		t.Fatalf("fits under ceiling 1 = %d", c.Fits)
	}
	// OPS-01: out of pool linux, the node takes no linux work.
	if err := d.SetPools(ctx, "n1", []string{"gpu"}); err != nil {
		t.Fatal(err)
	}
	if s := expectFrame[dispatch.Settings](h); len(s.Pools) != 1 || s.Pools[0] != "gpu" || !s.PoolsSet {
		t.Fatalf("settings = %+v", s)
	}
	h.want(http.StatusOK, &c, "POST", "/v1/capacity", client.CapacityRequest{Placement: testPlacement})
	if c.Fits != 0 {
		t.Fatalf("fits after leaving the pool = %d", c.Fits)
	}
	nodes, err := d.Nodes(ctx)
	if err != nil || len(nodes) != 1 || nodes[0].ID != "n1" || nodes[0].Ceiling != 1 || nodes[0].Pools[0] != "gpu" || nodes[0].State != "ready" {
		t.Fatalf("nodes = %+v, %v", nodes, err)
	}

	// OPS-03: the policy set through the admin socket survives a restart.
	pol := admin.Policy{ProbeLimit: 5, Tenants: map[string]admin.Tenant{"web": {Weight: 2, Cap: 1, Relays: []string{h.relay}}}}
	if err := d.SetPolicy(ctx, pol); err != nil {
		t.Fatal(err)
	}
	bad := admin.Policy{Tenants: map[string]admin.Tenant{"x": {Runners: []string{"no-slash"}}}}
	if err := d.SetPolicy(ctx, bad); !errors.Is(err, admin.ErrInvalid) {
		t.Fatalf("invalid policy: %v", err)
	}
	h.restart()
	got, err := h.srv.Driver().Policy(ctx)
	if err != nil || got.ProbeLimit != 5 || got.Tenants["web"].Cap != 1 {
		t.Fatalf("policy after restart = %+v, %v", got, err)
	}
	nodes, _ = h.srv.Driver().Nodes(ctx)
	if len(nodes) != 1 || nodes[0].Ceiling != 1 || nodes[0].State != "disconnected" {
		t.Fatalf("nodes after restart = %+v", nodes)
	}
	// The tenant's cap of 1 applies to the relay's runners (ARB-11).
	if err := h.srv.Driver().SetPools(ctx, "n1", []string{"linux"}); err != nil {
		t.Fatal(err)
	}
	if err := h.srv.Driver().SetCeiling(ctx, "n1", admin.NoCeiling); err != nil {
		t.Fatal(err)
	}
	h.relayUp(1)
	h.nodeUp(dispatch.Held{})
	for len(h.node.frames) > 0 {
		<-h.node.frames
	}
	h.claimedFor("r1")
	h.reserveFor("r2")
	h.noFrame() // r2's ticket waits on web's cap
}

// A node's configured name ([node] name, in its report) is the name the
// hub shows, not the host name it enrolled with.
func TestNodeConfiguredName(t *testing.T) {
	h := newHarness(t)
	h.enrolNode("n1")
	h.nodeUp(dispatch.Held{})
	nodes, err := h.srv.Driver().Nodes(t.Context())
	if err != nil || len(nodes) != 1 {
		t.Fatalf("nodes = %+v, %v", nodes, err)
	}
	enrolled := nodes[0].Name
	h.nodeSay(&dispatch.Report{Name: "ci-17", Resources: dispatch.Resources{Mem: 8 << 30, Disk: 40 << 30, CPUs: 8}, Pools: []string{"linux"}})
	nodes, err = h.srv.Driver().Nodes(t.Context())
	if err != nil || len(nodes) != 1 || nodes[0].Name != "ci-17" {
		t.Fatalf("nodes after a report naming ci-17 = %+v, %v (enrolled as %q)", nodes, err, enrolled)
	}
}

// Removing a node that will not come back ends its session, ends its
// jobs lost at once and drops it from the node list.
//
// spec: FAIL-16
func TestNodeRemoved(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	h.enrolNode("n1")
	h.relayUp(1)
	h.nodeUp(dispatch.Held{})
	g := h.claimed()
	v := h.submitOn(g, 71)
	expectFrame[dispatch.Start](h)
	d := h.srv.Driver()
	if err := h.srv.Store().RemovePrincipal(ctx, "n1", testStart); err != nil {
		t.Fatal(err)
	}
	if err := d.NodeRemoved(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	var jv client.JobView
	h.want(http.StatusOK, &jv, "GET", "/v1/jobs/"+v.ID, nil)
	if jv.State != client.JobFinished || jv.Result == nil || jv.Result.Failure != client.FailureLost {
		t.Errorf("job on the removed node = %+v, want finished lost", jv)
	}
	nodes, err := d.Nodes(ctx)
	if err != nil || len(nodes) != 0 {
		t.Errorf("nodes after the removal = %+v, %v; want none", nodes, err)
	}
	// A late frame of its ending session brings nothing back.
	h.nodeSay(&dispatch.Report{Resources: dispatch.Resources{Mem: 8 << 30, Disk: 40 << 30, CPUs: 8}, Pools: []string{"linux"}})
	var c client.Capacity
	h.want(http.StatusOK, &c, "POST", "/v1/capacity", client.CapacityRequest{Placement: testPlacement})
	if c.Fits != 0 {
		t.Errorf("fits after the node was removed = %d, want 0", c.Fits)
	}
}
