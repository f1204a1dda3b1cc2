package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
	"github.com/vk-ci/vk/sched"
)

// The driver implements admin.Backend: the admin socket's view of and
// changes to live state (OPS-01..03).
var _ admin.Backend = (*Driver)(nil)

// Meta keys of operator settings that survive a restart.
const (
	metaPolicy   = "hub.capacity_policy" // JSON PolicyConfig set through the admin socket
	metaNodeSets = "hub.node_settings"   // JSON map node → nodeSettings
)

// nodeSettings are an operator's settings of a node.
type nodeSettings struct {
	// Pools replace the pools the node reports when non-nil (OPS-01).
	Pools []string `json:"pools,omitempty"`
	// PoolsSet tells an empty Pools ("in no pool") from none set.
	PoolsSet bool `json:"pools_set,omitempty"`
	// Ceiling is the hub's concurrency ceiling; 0 none unless Zero
	// (OPS-02).
	Ceiling int `json:"ceiling,omitempty"`
	// Zero: the ceiling is 0, the node takes no new placed work
	// (admin.Backend.SetCeiling's 0). Ceiling is then 0.
	Zero bool `json:"ceiling_zero,omitempty"`
	// Drain: the hub places nothing new on the node (NODE-05).
	Drain bool `json:"drain,omitempty"`
}

// loadOperatorSettings reads the persisted policy and node settings.
func (d *Driver) loadOperatorSettings(ctx context.Context) error {
	if b, err := d.st.GetMeta(ctx, metaPolicy); err == nil {
		var p PolicyConfig
		if err := json.Unmarshal(b, &p); err != nil {
			return fmt.Errorf("hub: stored capacity policy: %w", err)
		}
		// The operator's last `capacity-policy set` wins over the
		// config's policy: say so, or an edit of the file seems lost.
		switch {
		case d.cfg.CapacityPolicyFile != "":
			d.log.Warn("capacity_policy_file is ignored: the policy last set with vk-hub capacity-policy set is in force; "+
				"run vk-hub capacity-policy set on the file to apply it", "file", d.cfg.CapacityPolicyFile)
		case d.cfg.CapacityPolicy != nil:
			d.log.Warn("hub.toml's [capacity_policy] is ignored: the policy last set with vk-hub capacity-policy set is in force; " +
				"run vk-hub capacity-policy set on a file of it to apply it")
		}
		d.policy = &p
	} else if !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("hub: stored capacity policy: %w", err)
	}
	d.nodeSets = map[string]nodeSettings{}
	if b, err := d.st.GetMeta(ctx, metaNodeSets); err == nil {
		if err := json.Unmarshal(b, &d.nodeSets); err != nil {
			return fmt.Errorf("hub: stored node settings: %w", err)
		}
	} else if !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("hub: stored node settings: %w", err)
	}
	return nil
}

func (d *Driver) saveNodeSettings() error {
	b, _ := json.Marshal(d.nodeSets)
	return d.st.PutMeta(d.bg, metaNodeSets, b)
}

// nodeEvent is the core's report of n with the operator's settings
// applied: pools replaced, a drained node reported draining.
func (d *Driver) nodeEvent(n *nodeRec) sched.NodeReport {
	ev := reportToSched(n.id, *n.report, n.state)
	set := d.nodeSets[n.name]
	if set.PoolsSet {
		ev.Pools = slices.Clone(set.Pools)
	}
	if set.Drain && ev.State == sched.NodeReady {
		ev.State = sched.NodeDraining
	}
	return ev
}

// sendSettings tells the node its ceiling, drain and pools
// (dispatch.Settings).
func (d *Driver) sendSettings(n *nodeRec) {
	set := d.nodeSets[n.name]
	d.sendTo(n, dispatch.Settings{Ceiling: set.Ceiling, CeilingZero: set.Zero, Drain: set.Drain, Pools: set.Pools, PoolsSet: set.PoolsSet})
}

// adminCeiling is the node's ceiling as admin.Backend states it.
func (s nodeSettings) adminCeiling() int {
	switch {
	case s.Zero:
		return 0
	case s.Ceiling > 0:
		return s.Ceiling
	default:
		return admin.NoCeiling
	}
}

// ceilingEvent is the core's view of the node's ceiling.
func (s nodeSettings) ceilingEvent(id sched.NodeID) sched.CeilingSet {
	return sched.CeilingSet{Node: id, Ceiling: s.Ceiling, Zero: s.Zero}
}

// Nodes implements admin.Backend.
func (d *Driver) Nodes(ctx context.Context) ([]admin.Node, error) {
	enrolled, err := d.st.ListPrincipals(ctx)
	if err != nil {
		return nil, err
	}
	r := &nodesReq{enrolled: enrolled}
	err = d.ask(ctx, r)
	return r.nodes, err
}

// nodesReq lists the enrolled nodes and those with a session, as the
// admin socket shows them.
type nodesReq struct {
	enrolled []store.Principal
	nodes    []admin.Node
}

func (r *nodesReq) run(d *Driver) {
	views := map[sched.NodeID]sched.NodeView{}
	for _, v := range d.core.Nodes() {
		views[v.ID] = v
	}
	jobs := map[string]int{}
	for _, j := range d.jobs {
		if j.rec.State == store.JobStarting || j.rec.State == store.JobRunning {
			jobs[j.rec.Node]++
		}
	}
	seen := map[string]bool{}
	add := func(id, name string) {
		seen[id] = true
		set := d.nodeSets[id]
		an := admin.Node{ID: id, Name: name, State: "disconnected", Ceiling: set.adminCeiling(), Pools: set.Pools}
		if n := d.nodes[id]; n != nil {
			if n.report != nil && n.report.Name != "" {
				an.Name = n.report.Name // [node] name wins over the join-time host name
			}
			if n.report != nil {
				an.Labels, an.MaxConcurrency = n.report.Labels, n.report.MaxConcurrency
				an.Capacity = client.Envelope{Mem: n.report.Resources.Mem, Disk: n.report.Resources.Disk, CPUs: n.report.Resources.CPUs}
				if !set.PoolsSet {
					an.Pools = n.report.Pools
				}
			}
			switch {
			case n.send == nil && !n.downAt.IsZero():
				an.State = "unreachable"
			case n.send != nil && set.Drain:
				an.State = "draining"
			case n.send != nil:
				an.State = string(n.state)
			}
			an.LastSeen = n.lastSeen
			an.Jobs = jobs[id]
			if v, ok := views[n.id]; ok {
				an.Reservations = max(v.Placed-an.Jobs, 0)
			}
		}
		r.nodes = append(r.nodes, an)
	}
	for _, p := range r.enrolled {
		if p.Kind == store.KindNode && !p.Removed {
			add(p.ID, p.Name)
		}
	}
	for _, id := range sortedKeys(d.nodes) {
		if !seen[id] && d.nodes[id].report != nil {
			add(id, "")
		}
	}
}

// SetPools implements admin.Backend (OPS-01).
func (d *Driver) SetPools(ctx context.Context, node string, pools []string) error {
	return d.changeNode(ctx, &nodeChangeReq{node: node, what: setPools, pools: pools})
}

// SetCeiling implements admin.Backend (OPS-02, PLACE-04, PLACE-07): n > 0
// caps the node, 0 takes no new placed work (what it holds and runs
// carries on), [admin.NoCeiling] removes the hub's ceiling. The core, the
// stored settings and the node (settings frame) all follow.
func (d *Driver) SetCeiling(ctx context.Context, node string, n int) error {
	if n < admin.NoCeiling {
		return fmt.Errorf("%w: ceiling %d", admin.ErrInvalid, n)
	}
	return d.changeNode(ctx, &nodeChangeReq{node: node, what: setCeiling, ceiling: n})
}

// Drain implements admin.Backend: the hub offers and starts nothing new on
// the node (its running jobs finish; held reservations lapse), and tells
// the node in its settings frame (drain), which then refuses new offers
// itself; undraining clears both.
func (d *Driver) Drain(ctx context.Context, node string, on bool) error {
	return d.changeNode(ctx, &nodeChangeReq{node: node, what: setDrain, drain: on})
}

// nodeChangeReq is an operator's change of one of a node's settings.
type nodeChangeReq struct {
	reply
	node    string
	what    nodeSetting
	pools   []string
	ceiling int // admin.NoCeiling, 0 or a ceiling
	drain   bool
}

type nodeSetting int

const (
	setPools nodeSetting = iota
	setCeiling
	setDrain
)

// changeNode applies an operator change to a known node, persists it,
// updates the core and tells the node its settings.
func (d *Driver) changeNode(ctx context.Context, r *nodeChangeReq) error {
	p, err := d.st.GetPrincipal(ctx, r.node)
	if errors.Is(err, store.ErrNotFound) || err == nil && (p.Kind != store.KindNode || p.Removed) {
		return fmt.Errorf("%w: node %s", admin.ErrNotFound, r.node)
	}
	if err != nil {
		return err
	}
	return d.call(ctx, r)
}

func (r *nodeChangeReq) run(d *Driver) {
	set := d.nodeSets[r.node]
	switch r.what {
	case setPools:
		set.Pools, set.PoolsSet = slices.Clone(r.pools), true
	case setCeiling:
		set.Ceiling, set.Zero = max(r.ceiling, 0), r.ceiling == 0
	case setDrain:
		set.Drain = r.drain
	}
	d.nodeSets[r.node] = set
	if r.err = d.saveNodeSettings(); r.err != nil {
		return
	}
	n := d.nodeRecord(r.node)
	// The node hears its new settings before any offer the change allows:
	// offered first, it would refuse them on its old ceiling.
	d.sendSettings(n)
	d.exec(d.step(set.ceilingEvent(n.id)))
	if n.report != nil && n.synced {
		d.exec(d.step(d.nodeEvent(n)))
	}
	d.log.Info("node settings changed", logkey.NodeID, r.node, "pools", set.Pools, "ceiling", set.adminCeiling(), "drain", set.Drain)
}

// Policy implements admin.Backend (OPS-03).
func (d *Driver) Policy(ctx context.Context) (admin.Policy, error) {
	r := &policyReq{}
	err := d.call(ctx, r)
	return r.p, err
}

// policyReq reads a deep copy of the policy in force (through JSON), so
// the caller gets no map of the driver's.
type policyReq struct {
	reply
	p admin.Policy
}

func (r *policyReq) run(d *Driver) {
	if d.policy != nil {
		b, _ := json.Marshal(d.policy)
		r.err = json.Unmarshal(b, &r.p)
	}
}

// SetPolicy implements admin.Backend (OPS-03): converted, validated,
// persisted, then applied to the core and to every runner's tenant. The
// new policy replaces the old one whole: a field it leaves out takes its
// default.
func (d *Driver) SetPolicy(ctx context.Context, ap admin.Policy) error {
	p := ap
	if err := validatePolicy(&p); err != nil {
		return fmt.Errorf("%w: %w", admin.ErrInvalid, err)
	}
	// Converted on a scratch ID table, checked as the core would.
	if err := policyToSched(&p, newIDTable()).Validate(); err != nil {
		return fmt.Errorf("%w: %w", admin.ErrInvalid, err)
	}
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	if err := d.st.PutMeta(ctx, metaPolicy, b); err != nil {
		return err
	}
	d.warnPolicy(ctx, p)
	return d.ask(ctx, setPolicyReq{p})
}

// setPolicyReq puts a checked, persisted policy in force.
type setPolicyReq struct{ p PolicyConfig }

func (r setPolicyReq) run(d *Driver) {
	d.policy = &r.p
	d.exec(d.step(sched.PolicyChanged{Policy: d.schedPolicy()}))
	for _, name := range sortedKeys(d.relays) {
		if rr := d.relays[name]; rr.report != nil {
			d.relayInventory(rr, *rr.report)
		}
	}
	d.log.Info("capacity policy replaced", "tenants", len(r.p.Tenants), "headroom", len(r.p.Headroom))
}

// warnPolicy logs what in p is valid but most likely a mistake: relay
// IDs no enrolled relay has (their runners fall to the default tenant).
func (d *Driver) warnPolicy(ctx context.Context, p PolicyConfig) {
	ps, err := d.st.ListPrincipals(ctx)
	if err != nil {
		return
	}
	var rs []admin.Relay
	for _, pr := range ps {
		if pr.Kind == store.KindRelay {
			rs = append(rs, admin.Relay{ID: pr.ID, Removed: pr.Removed})
		}
	}
	for _, w := range admin.UnknownRelays(p, rs) {
		d.log.Warn("capacity policy: " + w)
	}
}

// RelayRemoved implements admin.Backend: the relay's session ends; its
// requests are refused by the signature check from now on (AUTH-13).
func (d *Driver) RelayRemoved(ctx context.Context, relay string) error {
	r := &relaySenderReq{relay: relay}
	if err := d.ask(ctx, r); err != nil {
		return err
	}
	if e, ok := r.send.(interface {
		End(code client.RelayErrorCode, msg string)
	}); ok {
		e.End(client.RelayErrorUnauthorized, "relay removed by an operator")
	}
	return d.RelayDisconnected(ctx, relay)
}

// relaySenderReq asks for a relay's session sender (nil when none).
type relaySenderReq struct {
	relay string
	send  RelaySender
}

func (r *relaySenderReq) run(d *Driver) {
	if rr := d.relays[r.relay]; rr != nil {
		r.send = rr.send
	}
}

// NodeRemoved implements admin.Backend: the node's session ends (its key
// is refused from now on), the core counts it lost at once (its
// reservations end, its jobs end lost, FAIL-16), and its record and
// operator settings go, so it leaves the node list.
func (d *Driver) NodeRemoved(ctx context.Context, node string) error {
	r := &nodeRemovedReq{node: node}
	if err := d.ask(ctx, r); err != nil {
		return err
	}
	if e, ok := r.send.(interface {
		End(code dispatch.ErrorCode, msg string)
	}); ok {
		e.End(dispatch.ErrorUnauthorized, "node removed by an operator")
	}
	return r.err
}

// nodeRemovedReq forgets a removed node; send is its session's sender,
// for the adapter to end the session.
type nodeRemovedReq struct {
	reply
	node string
	send NodeSender
}

func (r *nodeRemovedReq) run(d *Driver) {
	if _, ok := d.nodeSets[r.node]; ok {
		delete(d.nodeSets, r.node)
		r.err = d.saveNodeSettings()
	}
	n := d.nodes[r.node]
	if n == nil {
		return
	}
	r.send = n.send
	if n.send != nil {
		d.met.add("vk_hub_nodes_connected", -1)
	}
	delete(d.down, r.node)
	delete(d.nodes, r.node)
	d.removed[r.node] = true
	d.exec(d.step(sched.NodeLost{Node: n.id}))
	d.log.Info("node removed by an operator; its jobs end lost", logkey.NodeID, r.node)
}

// ApprovalChanged implements admin.Backend: a server's new status goes to
// its relays at once (RSESS-07). Jobs refused pending approval are not
// held (FAIL-20): they failed already, and a retry in GitLab submits anew.
func (d *Driver) ApprovalChanged(ctx context.Context, a store.Approval) error {
	return d.ask(ctx, approvalReq{a})
}

type approvalReq struct{ a store.Approval }

func (r approvalReq) run(d *Driver) {
	a := r.a
	d.log.Info("approval changed", "instance", a.Instance, "project", a.Project, "state", a.State)
	if a.Project != 0 {
		return
	}
	for _, name := range sortedKeys(d.relays) {
		if rr := d.relays[name]; rr.report != nil && store.InstanceKey(rr.report.GitLabURL) == a.Instance {
			d.sendServerStatus(rr)
		}
	}
}
