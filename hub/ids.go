package hub

import "github.com/vk-ci/vk/sched"

// runnerKey names a runner: its relay's principal ID and its name there.
type runnerKey struct{ relay, name string }

// idTable mints the core's small integer IDs for the hub's string IDs
// (relays, runners, nodes, tenants) and maps them back. IDs are per hub
// start; nothing stores them. Owned by the driver goroutine.
type idTable struct {
	relays  idMap[string, sched.RelayID]
	runners idMap[runnerKey, sched.RunnerID]
	nodes   idMap[string, sched.NodeID]
	tenants idMap[string, sched.TenantID]
}

// idMap is one kind of ID in an [idTable]: it mints IDs 1, 2, … for keys
// in the order it first sees them and maps both ways. Its zero value is
// not usable; call [newIDMap].
type idMap[K comparable, ID ~uint32] struct {
	ids  map[K]ID // key → ID
	keys map[ID]K // ID → key; the zero ID is never minted
}

func newIDMap[K comparable, ID ~uint32]() idMap[K, ID] {
	return idMap[K, ID]{ids: map[K]ID{}, keys: map[ID]K{}}
}

// id returns k's ID, minting the next one if k is new (minted true).
func (m idMap[K, ID]) id(k K) (id ID, minted bool) {
	if id, ok := m.ids[k]; ok {
		return id, false
	}
	id = ID(len(m.ids) + 1)
	m.ids[k], m.keys[id] = id, k
	return id, true
}

func newIDTable() *idTable {
	return &idTable{
		relays:  newIDMap[string, sched.RelayID](),
		runners: newIDMap[runnerKey, sched.RunnerID](),
		nodes:   newIDMap[string, sched.NodeID](),
		tenants: newIDMap[string, sched.TenantID](),
	}
}

func (t *idTable) relay(name string) sched.RelayID {
	id, _ := t.relays.id(name)
	return id
}

// runner returns the runner's ID and whether it was minted just now.
func (t *idTable) runner(relay, name string) (sched.RunnerID, bool) {
	return t.runners.id(runnerKey{relay, name})
}

func (t *idTable) node(name string) sched.NodeID {
	id, _ := t.nodes.id(name)
	return id
}

// nodeName is the principal ID of the node the core calls id ("" if
// none).
func (t *idTable) nodeName(id sched.NodeID) string { return t.nodes.keys[id] }

func (t *idTable) tenant(name string) sched.TenantID {
	id, _ := t.tenants.id(name)
	return id
}

// runnerOf is the relay and name of the runner the core calls id (zero
// if none).
func (t *idTable) runnerOf(id sched.RunnerID) runnerKey { return t.runners.keys[id] }
