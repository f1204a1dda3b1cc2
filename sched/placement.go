package sched

import (
	"math"
	"slices"
)

// nodeEntry is a node's place in one placement's node index, ordered by
// load, then most room, then node ID (PLACE-11).
type nodeEntry struct {
	load float64
	room int
	id   NodeID
	n    *node
}

func nodeEntryLess(a, b nodeEntry) bool {
	if a.load != b.load {
		return a.load < b.load
	}
	if a.room != b.room {
		return a.room > b.room
	}
	return a.id < b.id
}

const unbounded = math.MaxInt32

// placeable reports whether the node may receive offers and starts.
func (n *node) placeable() bool {
	return n.serving() && n.drainFor == 0 && n.autoDrain == nil
}

// serving reports whether the node serves work at all: known, reachable,
// ready and without a local runner. Drain marks do not matter here: a
// drained node still counts in its pools' utilization.
func (n *node) serving() bool {
	return n.known && n.reachable && n.state == NodeReady && !n.local
}

// nodeCap is min(ceiling, max_concurrency), 0 meaning none (PLACE-04).
func (n *node) nodeCap() int {
	switch {
	case n.ceiling > 0 && n.maxConc > 0:
		return min(n.ceiling, n.maxConc)
	case n.ceiling > 0:
		return n.ceiling
	default:
		return n.maxConc
	}
}

// roomFor returns how many envelopes env still fit on n given used and
// placed (PLACE-05, PLACE-13): memory, disk and cap bound it.
func roomFor(n *node, env Resources, used Resources, placed int) int {
	if !n.placeable() || n.closed {
		return 0
	}
	room := unbounded
	if cp := n.nodeCap(); cp > 0 {
		room = cp - placed
	}
	if env.MemBytes > 0 {
		room = min(room, int((n.capacity.MemBytes-used.MemBytes)/env.MemBytes))
	}
	if env.DiskBytes > 0 {
		room = min(room, int((n.capacity.DiskBytes-used.DiskBytes)/env.DiskBytes))
	}
	return max(room, 0)
}

// loadFor is PLACE-12's load for a placement with the given room.
func loadFor(n *node, room int) float64 {
	var l float64
	if n.placed+room > 0 {
		l = float64(n.placed) / float64(n.placed+room)
	}
	if n.capacity.CPUs > 0 {
		l = max(l, float64(n.used.CPUs)/float64(n.capacity.CPUs))
		if n.hasLoad {
			l = max(l, n.load1/float64(n.capacity.CPUs))
		}
	}
	return l
}

// matches reports whether node n serves placement pl (pool and labels).
func matches(n *node, pl *Placement) bool {
	if _, ok := slices.BinarySearch(n.pools, pl.Pool); !ok {
		return false
	}
	return labelsSubset(pl.Labels, n.labels)
}

// nodeChanging takes n out of every index and headroom sum; call before
// mutating anything room or load depends on, then nodeChanged.
func (c *Core) nodeChanging(n *node) {
	for i := range n.queues {
		x := &n.queues[i]
		if x.in {
			x.p.nodes.Delete(x.ent)
			x.p.fits -= x.ent.room
			x.in = false
		}
	}
	for i, e := range n.headroomEntries {
		c.headroom[e].fleetRoom -= n.headroomRoom[i]
		n.headroomRoom[i] = 0
	}
	if n.inUtilization {
		n.inUtilization = false
		for _, pool := range n.pools {
			c.poolStat(pool).add(n, -1)
		}
	}
}

// nodeChanged puts n back into its indexes with fresh keys and marks the
// placements it has room for as needing a pass.
func (c *Core) nodeChanged(n *node) {
	for i := range n.queues {
		x := &n.queues[i]
		p := x.p
		room := roomFor(n, p.pl.Envelope, n.used, n.placed)
		if room <= 0 {
			continue
		}
		e := nodeEntry{load: loadFor(n, room), room: room, id: n.id, n: n}
		x.ent, x.in = e, true
		p.nodes.Set(e)
		p.fits += room
		c.markDirty(p)
	}
	for i, e := range n.headroomEntries {
		r := roomFor(n, c.headroom[e].pl.Envelope, n.used, n.placed)
		n.headroomRoom[i] = r
		c.headroom[e].fleetRoom += r
	}
	if n.drainFor != 0 {
		// room freed on a drained node is for its reserved job only
		if jb := c.jobs[n.drainFor]; jb != nil && jb.p != nil {
			c.markDirty(jb.p)
		}
	}
	if n.autoDrain != nil {
		c.markDirty(n.autoDrain) // for the placement's first waiter only
	}
	if n.serving() {
		n.inUtilization = true
		for _, pool := range n.pools {
			c.poolStat(pool).add(n, +1)
		}
	}
	for _, pool := range n.pools {
		c.poolCapChanged(c.poolStat(pool))
	}
	if c.snapNodes != nil {
		c.snapNodes.Set(c.nodeView(n))
	}
}

// attachNode recomputes which placements and headroom entries n belongs to.
func (c *Core) attachNode(n *node) {
	c.nodeChanging(n)
	n.queues = n.queues[:0]
	for _, pool := range n.pools {
		for _, p := range c.poolQueues[pool] {
			if matches(n, &p.pl) && !slices.ContainsFunc(n.queues, func(x queueMembership) bool { return x.p == p }) {
				n.queues = append(n.queues, queueMembership{p: p})
			}
		}
	}
	n.headroomEntries, n.headroomRoom = n.headroomEntries[:0], n.headroomRoom[:0]
	for i := range c.headroom {
		if matches(n, &c.headroom[i].pl) {
			n.headroomEntries = append(n.headroomEntries, i)
			n.headroomRoom = append(n.headroomRoom, 0)
		}
	}
	c.nodeChanged(n)
}

// queueFor returns (creating) the queue of a placement; a new placement is
// attached to every node of its pool once.
func (c *Core) queueFor(pl Placement) *placementQueue {
	pl.Labels = sortedSet(pl.Labels)
	key := pl.Key()
	if p := c.queues[key]; p != nil {
		return p
	}
	p := newPlacementQueue(key, pl)
	p.ps = c.poolStat(pl.Pool)
	c.queues[key] = p
	list := append(c.poolQueues[pl.Pool], p)
	slices.SortFunc(list, func(a, b *placementQueue) int {
		if a.key < b.key {
			return -1
		}
		return 1
	})
	c.poolQueues[pl.Pool] = list
	for _, n := range c.poolNodes[pl.Pool] {
		c.attachNode(n)
	}
	return p
}

// alloc adds (sign +1) or removes (-1) one allocation of env on n.
func (c *Core) alloc(n *node, env Resources, sign int) {
	c.nodeChanging(n)
	if sign > 0 {
		n.used = n.used.add(env)
		n.placed++
	} else {
		n.used = n.used.sub(env)
		n.placed--
	}
	c.nodeChanged(n)
}

// headroomBlocks reports whether placing env on n as normal work would eat
// into some headroom entry (ARB-15..17).
func (c *Core) headroomBlocks(n *node, env Resources) bool {
	for i, e := range n.headroomEntries {
		r0 := n.headroomRoom[i]
		if r0 == 0 {
			continue // ARB-17: no room for the entry here, no restriction
		}
		h := &c.headroom[e]
		r1 := roomFor(n, h.pl.Envelope, n.used.add(env), n.placed+1)
		if d := r0 - r1; d > 0 && h.fleetRoom-d < h.slots {
			return true
		}
	}
	return false
}

// maxScan bounds how many index entries one placement decision may skip
// (refused nodes, headroom, rules) before it gives up for this pass.
const maxScan = 256

// whyNoNode says why pickNode found no node for a waiter.
type whyNoNode uint8

const (
	noRoom       whyNoNode = iota // no indexed node has room (or one was found)
	allTried                      // every node with room already refused this waiter
	onlyHeadroom                  // the nodes with room are kept for headroom
	rulesForbid                   // the job's placement rules refuse the nodes with room
	keptForWide                   // the nodes with room are kept whole for waiting wide work
)

// pickNode returns the node for waiter w of class cls in p, or why none.
func (c *Core) pickNode(p *placementQueue, w *waiter, cls int) (*node, whyNoNode) {
	var found *node
	skipped, hd, rules, whole, scanned := 0, 0, 0, 0, 0
	keep := isNormalClass(cls) && len(p.ps.wideWaiting) > 0
	var jb *job
	var rs []PlacementRule
	if w.jb != nil {
		jb = w.jb
		pp, _ := c.pol.project(jb.runnerTenant(), jb.project)
		rs = pp.Rules
	}
	visit := func(e nodeEntry) bool {
		scanned++
		if scanned > maxScan {
			return false
		}
		if w.skip[e.id] {
			skipped++
			return true
		}
		if len(rs) > 0 && !rulesAllow(rs, jb.ref, e.id, e.n.pools) {
			rules++
			return true
		}
		if isNormalClass(cls) && c.headroomBlocks(e.n, p.pl.Envelope) {
			hd++
			return true
		}
		if keep && c.keptWhole(e.n, p) {
			whole++
			return true
		}
		found = e.n
		return false
	}
	if c.packing(p) {
		p.nodes.Reverse(visit) // BS-21: most loaded (least room) first
	} else {
		p.nodes.Scan(visit)
	}
	switch {
	case found != nil:
		return found, noRoom
	case skipped > 0 && scanned <= maxScan:
		return nil, allTried
	case rules > 0:
		return nil, rulesForbid
	case hd > 0:
		return nil, onlyHeadroom
	case whole > 0:
		return nil, keptForWide
	}
	return nil, noRoom
}
