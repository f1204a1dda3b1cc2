package hub

import (
	"net/http"
	"strings"
	"testing"

	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

// Pools are the operator's (`vk-hub nodes pools`); labels are the node's
// own, declared in its config and reported in its inventory. A node that
// reports none (an older node) fits only placements that ask for none;
// once it reports the label, it fits the labelled placement too. And the
// operator's pools, not the node's report, decide pool membership.
//
// spec: PLACE-02, OPS-01
func TestLabelsFromInventoryPoolsFromOperator(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	h.enrolNode("n1")
	h.relayUp(1)
	d := h.srv.Driver()
	if err := d.NodeConnected(ctx, "n1", h.node, false); err != nil {
		t.Fatal(err)
	}
	res := dispatch.Resources{Mem: 8 << 30, Disk: 40 << 30, CPUs: 8}
	h.nodeSay(&dispatch.Report{Resources: res, Pools: []string{"linux"}}) // no labels
	h.nodeSay(&dispatch.Held{})
	plain := client.Placement{Pool: "linux", Envelope: testPlacement.Envelope}
	fits := func(p client.Placement) int {
		var c client.Capacity
		h.want(http.StatusOK, &c, "POST", "/v1/capacity", client.CapacityRequest{Placement: p})
		return c.Fits
	}
	if got := fits(testPlacement); got != 0 {
		t.Errorf("labelled placement on a node reporting no labels: fits %d, want 0", got)
	}
	if got := fits(plain); got != 4 {
		t.Errorf("unlabelled placement: fits %d, want 4", got)
	}
	h.nodeSay(&dispatch.Report{Resources: res, Pools: []string{"linux"}, Labels: []string{"ssd"}})
	if got := fits(testPlacement); got != 4 {
		t.Errorf("labelled placement once the node reports ssd: fits %d, want 4", got)
	}
	// The operator moves the node out of linux: its report of linux no
	// longer counts.
	if err := d.SetPools(ctx, "n1", []string{"gpu"}); err != nil {
		t.Fatal(err)
	}
	h.nodeSay(&dispatch.Report{Resources: res, Pools: []string{"linux"}, Labels: []string{"ssd"}})
	if got := fits(plain); got != 0 {
		t.Errorf("pool linux after the operator set gpu: fits %d, want 0", got)
	}
	if got := fits(client.Placement{Pool: "gpu", Envelope: testPlacement.Envelope}); got != 4 {
		t.Errorf("pool gpu set by the operator: fits %d, want 4", got)
	}
}

// The queue (`vk-hub queue`, the UI's Queue page) lists a waiting ticket
// with its tenant, runner, readable placement and wait reason.
func TestQueueListsWaitingTicket(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	h.enrolNode("n1")
	h.relayUp(1)
	h.nodeUp(dispatch.Held{})
	if err := h.srv.Driver().SetCeiling(ctx, "n1", 0); err != nil {
		t.Fatal(err)
	}
	tk := h.reserve()
	q, err := h.srv.Driver().Queue(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(q) != 1 {
		t.Fatalf("queue = %+v, want the one ticket", q)
	}
	w := q[0]
	if w.Kind != admin.WaitTicket || w.ID != tk || w.Runner != "r1" || w.Relay != h.relay || w.Tenant != DefaultTenant ||
		w.Placement != "linux [ssd] mem=2G cpus=2 disk=10G" || !strings.HasPrefix(w.Reason, "waiting: ") {
		t.Errorf("queue entry = %+v", w)
	}
}

// The queue says what an operator needs to act on: how long a ticket has
// waited, that a pool every node of which has ceiling 0 is closed by an
// operator, and runners that ask for nothing while their GitLab server
// waits for approval.
func TestQueueSaysWhy(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	h.enrolNode("n1")
	h.relayUp(1)
	h.nodeUp(dispatch.Held{})
	d := h.srv.Driver()
	if err := d.SetCeiling(ctx, "n1", 0); err != nil {
		t.Fatal(err)
	}
	expectFrame[dispatch.Settings](h)
	h.reserve()
	q, err := d.Queue(ctx)
	if err != nil || len(q) != 1 {
		t.Fatalf("queue = %+v, %v", q, err)
	}
	if q[0].Since.IsZero() {
		t.Errorf("ticket since = %v, want when it was asked", q[0].Since)
	}
	if !strings.Contains(q[0].Reason, "ceiling 0") || !strings.Contains(q[0].Reason, "pool linux") {
		t.Errorf("reason = %q, want it to say the pool's nodes have ceiling 0", q[0].Reason)
	}
	// r2's relay says it waits for the server's approval.
	hb := &client.RelayHeartbeat{Runners: []client.RunnerHeartbeat{{Name: "r1", State: client.RunnerPolling}, {Name: "r2", State: client.RunnerServerPending}}}
	if err := d.RelayFrame(ctx, h.relay, hb); err != nil {
		t.Fatal(err)
	}
	q, err = d.Queue(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var runner *admin.Waiting
	for i := range q {
		if q[i].Kind == admin.WaitRunner {
			runner = &q[i]
		}
	}
	if runner == nil || runner.Runner != "r2" || !strings.Contains(runner.Reason, "pending approval") {
		t.Errorf("queue = %+v, want r2 waiting on its server's approval", q)
	}
}
