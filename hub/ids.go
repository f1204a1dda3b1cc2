package hub

import "github.com/vk-ci/vk/sched"

// runnerKey names a runner: its relay's principal ID and its name there.
type runnerKey struct{ relay, name string }

// idTable mints the core's small integer IDs for the hub's string IDs
// (relays, runners, nodes, tenants) and maps them back. IDs are per hub
// start; nothing stores them. Owned by the driver goroutine.
type idTable struct {
	relays      map[string]sched.RelayID
	relayNames  map[sched.RelayID]string
	runners     map[runnerKey]sched.RunnerID
	runnerKeys  map[sched.RunnerID]runnerKey
	nodes       map[string]sched.NodeID
	nodeNames   map[sched.NodeID]string
	tenants     map[string]sched.TenantID
	tenantNames map[sched.TenantID]string
}

func newIDTable() *idTable {
	return &idTable{
		relays: map[string]sched.RelayID{}, relayNames: map[sched.RelayID]string{},
		runners: map[runnerKey]sched.RunnerID{}, runnerKeys: map[sched.RunnerID]runnerKey{},
		nodes: map[string]sched.NodeID{}, nodeNames: map[sched.NodeID]string{},
		tenants: map[string]sched.TenantID{}, tenantNames: map[sched.TenantID]string{},
	}
}

func (t *idTable) relay(name string) sched.RelayID {
	if id, ok := t.relays[name]; ok {
		return id
	}
	id := sched.RelayID(len(t.relays) + 1)
	t.relays[name], t.relayNames[id] = id, name
	return id
}

// runner returns the runner's ID and whether it was minted just now.
func (t *idTable) runner(relay, name string) (sched.RunnerID, bool) {
	k := runnerKey{relay, name}
	if id, ok := t.runners[k]; ok {
		return id, false
	}
	id := sched.RunnerID(len(t.runners) + 1)
	t.runners[k], t.runnerKeys[id] = id, k
	return id, true
}

func (t *idTable) node(name string) sched.NodeID {
	if id, ok := t.nodes[name]; ok {
		return id
	}
	id := sched.NodeID(len(t.nodes) + 1)
	t.nodes[name], t.nodeNames[id] = id, name
	return id
}

func (t *idTable) tenant(name string) sched.TenantID {
	if id, ok := t.tenants[name]; ok {
		return id
	}
	id := sched.TenantID(len(t.tenants) + 1)
	t.tenants[name], t.tenantNames[id] = id, name
	return id
}
