package sched

import (
	"time"

	"github.com/tidwall/btree"
)

// Snapshot is a point-in-time, read-only view of the Core's node indexes
// (BS-05): every node's accounting by ID, and each placement's node index
// in placement order (PLACE-11) with its fits. It is cloned from the Core's
// B-trees copy-on-write (tidwall/btree Copy), so taking one costs O(1) per
// index, and the Core's later writes copy only the tree paths they touch.
//
// A Snapshot holds values only, never the Core's records: it may be read
// from any goroutine, concurrently with the Core's Step (which stays on
// its own goroutine, the single writer), and by several readers at once. It
// never changes after [Core.Snapshot] returned it.
type Snapshot struct {
	// At is the time of the last Step before the snapshot.
	At time.Time

	nodes *btree.BTreeG[NodeView]
	pls   map[string]placementSnap
	util  map[string]float64
}

type placementSnap struct {
	pl    Placement
	nodes *btree.BTreeG[nodeEntry]
	fits  int
}

// RankedNode is one entry of a placement's node index: a node with room
// for at least one envelope, its PLACE-12 load for that placement and how
// many envelopes fit (Room).
type RankedNode struct {
	ID   NodeID
	Load float64
	Room int
}

func nodeViewLess(a, b NodeView) bool { return a.ID < b.ID }

// Snapshot returns a point-in-time view of the node indexes (BS-05). It
// costs O(1) per placement (a handful) plus, on the first call only, the
// building of the node table by ID (O(nodes)); from then on the Core keeps
// that table current as nodes change, so later snapshots are O(1) clones.
// Snapshot does not change what the Core decides. Call it where Step is
// called (the Core is not safe for concurrent use); hand the result to any
// goroutine.
func (c *Core) Snapshot() *Snapshot {
	if c.snapNodes == nil {
		c.snapNodes = btree.NewBTreeGOptions(nodeViewLess, btOpts)
		for _, n := range c.nodes {
			c.snapNodes.Set(c.nodeView(n))
		}
	}
	s := &Snapshot{At: c.now, nodes: c.snapNodes.Copy(),
		pls: make(map[string]placementSnap, len(c.queues)), util: make(map[string]float64, len(c.pstat))}
	for k, p := range c.queues {
		s.pls[k] = placementSnap{pl: p.pl, nodes: p.nodes.Copy(), fits: p.fits}
	}
	for pool, ps := range c.pstat {
		s.util[pool] = ps.utilization()
	}
	return s
}

// Len returns how many nodes the snapshot knows.
func (s *Snapshot) Len() int { return s.nodes.Len() }

// Node returns one node's accounting; ok false when unknown.
func (s *Snapshot) Node(id NodeID) (NodeView, bool) {
	return s.nodes.Get(NodeView{ID: id})
}

// Nodes calls yield for every node in ID order until it returns false.
func (s *Snapshot) Nodes(yield func(NodeView) bool) { s.nodes.Scan(yield) }

// Ranked calls yield for the nodes with room for pl's envelope, in the
// order the Core prefers them when spreading (least loaded first,
// PLACE-11), until yield returns false. ok is false when no runner uses
// the placement (the Core keeps no index for it).
func (s *Snapshot) Ranked(pl Placement, yield func(RankedNode) bool) (ok bool) {
	pl.Labels = sortedSet(pl.Labels)
	ps, ok := s.pls[pl.Key()]
	if !ok {
		return false
	}
	ps.nodes.Scan(func(e nodeEntry) bool { return yield(RankedNode{ID: e.id, Load: e.load, Room: e.room}) })
	return true
}

// Fits returns how many envelopes of pl the indexed nodes could take at
// the snapshot's time (API-13), and false when no runner uses pl.
func (s *Snapshot) Fits(pl Placement) (int, bool) {
	pl.Labels = sortedSet(pl.Labels)
	ps, ok := s.pls[pl.Key()]
	return ps.fits, ok
}

// Utilization returns a pool's utilization at the snapshot's time (see
// [Core.Utilization]).
func (s *Snapshot) Utilization(pool string) float64 { return s.util[pool] }
