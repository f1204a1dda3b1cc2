package sched

import "github.com/tidwall/btree"

// placementQueue is the arbitration queue and node index of one placement (ARB-05):
// waiting tickets and queued jobs of the placement, per class, ordered by
// tenant share then age, and the nodes with room for one envelope, ordered
// by placement preference (PLACE-11).
type placementQueue struct {
	key             string
	pl              Placement // labels sorted
	classes         [nClasses]*btree.BTreeG[*tenantQ]
	tqs             map[tqKey]*tenantQ
	tqList          []*tenantQ // the same, in creation order
	ps              *poolStat  // its pool's
	nodes           *btree.BTreeG[nodeEntry]
	fits            int  // sum of room over indexed nodes (API-13)
	dirty           bool // in Core.dirty
	starved         bool // last pass found no node with room
	headroomBlocked bool // last pass found only headroom for normal work
	rulesRefused    bool // last pass: a job's rules refused nodes with room
	// drains are the automatic drain reservations held for its waiters,
	// in the order placed, at most one per waiter indexed (BS-22)
	drains []*node
	nwait  int // waiters indexed, every class
	// fairHeld counts the fairness drains among drains (fairdrain.go)
	fairHeld int
	// wideWait: its last pass found its wide work waiting for a node
	wideWait bool

	// arbitration pass state (Core.schedule)
	inPass     bool
	skipNormal bool      // headroom found: normal work sits this pass out
	aside      []*waiter // waiters set aside for this pass only
}

type tqKey struct {
	tenant TenantID
	cls    int
}

// tenantQ is one tenant's waiters in one class of one placement.
type tenantQ struct {
	t       *tenant
	p       *placementQueue
	cls     int
	waiters *btree.BTreeG[*waiter]
	inTree  bool
	kShare  float64 // the tenant's weighted dominant share when keyed
	kSeq    uint64  // seq of its oldest waiter when keyed
}

var btOpts = btree.Options{NoLocks: true, Degree: 16}

func tqLess(a, b *tenantQ) bool {
	// the least weighted dominant share first (DECISIONS 13)
	if a.kShare != b.kShare {
		return a.kShare < b.kShare
	}
	if a.kSeq != b.kSeq {
		return a.kSeq < b.kSeq // equal shares: the oldest request first
	}
	return a.t.id < b.t.id
}

func waiterLess(a, b *waiter) bool { return a.seq < b.seq }

func newPlacementQueue(key string, pl Placement) *placementQueue {
	p := &placementQueue{key: key, pl: pl, tqs: map[tqKey]*tenantQ{}}
	for i := range p.classes {
		p.classes[i] = btree.NewBTreeGOptions(tqLess, btOpts)
	}
	p.nodes = btree.NewBTreeGOptions(nodeEntryLess, btOpts)
	return p
}

// tenantQ returns (creating) the queue of tenant t in class cls of p.
func (c *Core) tenantQ(p *placementQueue, t *tenant, cls int) *tenantQ {
	k := tqKey{t.id, cls}
	if q := p.tqs[k]; q != nil {
		return q
	}
	q := &tenantQ{t: t, p: p, cls: cls, waiters: btree.NewBTreeGOptions(waiterLess, btOpts)}
	p.tqs[k] = q
	p.tqList = append(p.tqList, q)
	t.tqs = append(t.tqs, q)
	return q
}

// tqBlocked reports whether the tenant queue must stay out of its class
// tree: ticket classes wait while the tenant holds its cap (ARB-11).
func (c *Core) tqBlocked(q *tenantQ) bool {
	if q.cls == clsDeadline || q.cls == clsReserved {
		return false // jobs: cap checked per job at pick time
	}
	cp := c.pol.tenantCap(q.t.id)
	return cp > 0 && q.t.held >= cp
}

// tqSync puts q into, or takes it out of, its class tree according to its
// waiters and its tenant's cap, refreshing its key.
func (c *Core) tqSync(q *tenantQ) {
	want := q.waiters.Len() > 0 && !c.tqBlocked(q)
	var seq uint64
	if w, ok := q.waiters.Min(); ok {
		seq = w.seq
	}
	var share float64
	if want {
		share = c.share(q.t, q.p.ps)
	}
	if q.inTree {
		if want && q.kShare == share && q.kSeq == seq {
			return
		}
		q.p.classes[q.cls].Delete(q)
		q.inTree = false
	}
	if want {
		q.kShare, q.kSeq = share, seq
		q.p.classes[q.cls].Set(q)
		q.inTree = true
		c.markDirty(q.p)
	}
}

// tenantChanged re-keys every queue of the tenant after its held or policy
// changed.
func (c *Core) tenantChanged(t *tenant) {
	for _, q := range t.tqs {
		c.tqSync(q)
	}
}

func (c *Core) indexWaiter(w *waiter, p *placementQueue, t *tenant, cls int) {
	if w.tq != nil {
		return
	}
	q := c.tenantQ(p, t, cls)
	q.waiters.Set(w)
	w.tq = q
	p.nwait++
	c.tqSync(q)
	if p.wideWait {
		c.markDirty(p) // one more waiter of starved wide work: a drain more
	}
}

func (c *Core) unindexWaiter(w *waiter) {
	q := w.tq
	if q == nil {
		return
	}
	q.waiters.Delete(w)
	w.tq = nil
	q.p.nwait--
	c.tqSync(q)
	if len(q.p.drains) > 0 || q.p.wideWait {
		c.markDirty(q.p) // its drains may have lost their waiter
	}
}

// head returns the first waiter of class cls in p.
func head(p *placementQueue, cls int) *waiter {
	q, ok := p.classes[cls].Min()
	if !ok {
		return nil
	}
	w, _ := q.waiters.Min()
	return w
}

// turn is a request's place in the arbitration order across placements:
// the rank of its class, then its tenant's weighted dominant share, then
// its age (ARB-06..09, DECISIONS 13). The arbitration pass and the
// position of a waiting request ([Core.TicketPosition]) both order by it.
type turn struct {
	rank  int
	share float64
	seq   uint64
}

// first reports whether a goes before b.
func (a turn) first(b turn) bool {
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	if a.share != b.share {
		return a.share < b.share
	}
	return a.seq < b.seq
}

// turnOf is the turn of indexed waiter w in a class of the given rank.
func turnOf(w *waiter, rank int) turn { return turn{rank, w.tq.kShare, w.seq} }

// before reports whether waiter a goes before b within one spec class:
// weighted dominant share, then age (ARB-09, DECISIONS 13).
func before(a, b *waiter) bool { return turnOf(a, 0).first(turnOf(b, 0)) }

// rank is the position of internal class cls in the class order now: the
// two internal classes of normal work share one rank (ARB-06..08).
func (c *Core) rank(cls int) int {
	if cls == clsNormProbe {
		cls = clsNormal
	}
	for i, k := range c.classOrder() {
		if k == cls {
			return i
		}
	}
	return len(orderPlain)
}

// classOrder returns the order classes are served in now (ARB-06..08).
func (c *Core) classOrder() []int {
	if c.normalOwed {
		return orderOwed[:]
	}
	return orderPlain[:]
}

var (
	orderPlain = [...]int{clsDeadline, clsReserved, clsProd, clsProdProbe, clsNormal}
	orderOwed  = [...]int{clsDeadline, clsReserved, clsProd, clsNormal, clsProdProbe}
)

// pick returns the next waiter of p and the internal class it is in, nil
// when none may go. skipNormal drops normal work (headroom found).
func (c *Core) pick(p *placementQueue, skipNormal bool) (*waiter, int) {
	probesOK := c.probesOut < c.pol.ProbeLimit
	for _, cls := range c.classOrder() {
		switch cls {
		case clsProdProbe:
			if !probesOK {
				continue
			}
		case clsNormal:
			if skipNormal {
				continue
			}
			a := head(p, clsNormal)
			var b *waiter
			if probesOK {
				b = head(p, clsNormProbe)
			}
			switch {
			case a == nil && b == nil:
				continue
			case b == nil:
				return a, clsNormal
			case a == nil:
				return b, clsNormProbe
			case before(a, b):
				return a, clsNormal
			default:
				return b, clsNormProbe
			}
		}
		if w := head(p, cls); w != nil {
			return w, cls
		}
	}
	return nil, 0
}

func (c *Core) markDirty(p *placementQueue) {
	if !p.dirty {
		p.dirty = true
		c.dirty.Set(p)
	}
}

func queueLess(a, b *placementQueue) bool { return a.key < b.key }
