package sched

import (
	"cmp"
	"container/heap"
	"slices"
	"time"
)

// Position says where a waiting ticket or queued job stands among the
// requests of its placement, and how long it is expected to wait: the
// numbers behind "why is my job waiting" (for operators' queue views and
// the job view). It is read from the Core's state as it is; nothing is
// changed.
type Position struct {
	// Class is the scheduling class it waits in: "deadline", "reserved",
	// "production", "production probe", "normal" or "normal probe"; ""
	// when its runner has no placement.
	Class string
	// Queued is true while it is in its placement's queue. False when
	// something other than room holds it back (its reason says what, a
	// cap or a backoff): then every queued request of the placement is
	// counted ahead of it.
	Queued bool
	// Ahead is how many waiting requests of the same placement go before
	// it: every request of an earlier class, its own tenant's older ones,
	// and those of other tenants whose weighted dominant share stays
	// below its own tenant's while they are served one by one (age breaks
	// a tie), as the arbitration pass orders them when nothing else
	// changes.
	Ahead int
	// Waiting is how many requests of the placement wait in its queue,
	// itself included.
	Waiting int
	// Wait is the estimated time until it is placed, valid when
	// WaitKnown; see [Core.TicketPosition].
	Wait      time.Duration
	WaitKnown bool
}

// maxEstimateAhead bounds the work of one estimate: with more requests
// ahead the wait is left unknown.
const maxEstimateAhead = 4096

var classNames = [nClasses]string{"deadline", "reserved", "production", "production probe", "normal", "normal probe"}

// TicketPosition returns a ticket's position in its placement's queue and
// its estimated wait; ok false when unknown or ended. An offered or
// granted ticket waits for nothing more than the node's answer or its
// claim: Ahead 0, Wait 0.
//
// The wait is estimated from the Core's own view: every node of the
// placement's pool that may take it frees room as its jobs end, each job
// expected to run the mean of its job name's runtime statistics (of every
// job when its name has none) less what it has run, an offer or
// reservation as long as the mean of every job. Room that frees goes to
// the requests ahead in turn, each then held for the mean of every job.
// The estimate is unknown when the reason is not room (a cap, a backoff,
// the relay, the project's rules), when no job has finished yet so there
// are no statistics, or when more than 4096 requests are ahead.
func (c *Core) TicketPosition(id TicketID) (Position, bool) {
	tk := c.tickets[id]
	if tk == nil || tk.state == tkEnded {
		return Position{}, false
	}
	r := tk.runner
	if r.p == nil {
		return Position{}, true
	}
	cls := c.ticketClass(r)
	if tk.tq != nil {
		cls = tk.tq.cls
	}
	if tk.state != tkQueued {
		return Position{Class: classNames[cls], WaitKnown: true}, true
	}
	return c.position(&tk.waiter, r.p, cls, c.ticketReason(tk)), true
}

// JobPosition is [Core.TicketPosition] for a queued job; a job starting
// or running has Ahead 0 and Wait 0; ok false when unknown or settled.
func (c *Core) JobPosition(id JobID) (Position, bool) {
	jb := c.jobs[id]
	if jb == nil {
		return Position{}, false
	}
	cls := int(jb.cls)
	if jb.state != jobQueued {
		return Position{Class: classNames[cls], WaitKnown: true}, true
	}
	return c.position(&jb.waiter, jb.p, cls, c.jobReason(jb)), true
}

func (c *Core) position(w *waiter, p *placementQueue, cls int, why Reason) Position {
	queued := 0
	for _, o := range p.tqList {
		if o.inTree {
			queued += o.waiters.Len()
		}
	}
	pos := Position{Class: classNames[cls], Waiting: queued}
	if q := w.tq; q != nil && q.inTree {
		pos.Queued, pos.Ahead = true, c.ahead(w, q)
	} else {
		pos.Ahead, pos.Waiting = queued, queued+1
	}
	switch why.Code {
	case ReasonNoRoom, ReasonQueued, ReasonDrain, ReasonRetry:
	default:
		return pos
	}
	if wait, ok := c.estimateWait(p, pos.Ahead); ok {
		if w.retryAt > c.now.UnixNano() {
			wait = max(wait, time.Duration(w.retryAt-c.now.UnixNano()))
		}
		pos.Wait, pos.WaitKnown = wait, true
	}
	return pos
}

// ahead counts the indexed waiters of w's placement that go before w,
// which is in tenant queue q.
func (c *Core) ahead(w *waiter, q *tenantQ) int {
	p := q.p
	own := q.waiters.Len()
	if i, ok := waiterIndex(q, w); ok {
		own = i
	}
	mine := c.rank(q.cls)
	bar := c.shareAfter(q.t, p, own)
	n := own
	for _, o := range p.tqList {
		if o == q || !o.inTree {
			continue
		}
		switch r := c.rank(o.cls); {
		case r < mine:
			n += o.waiters.Len()
		case r > mine:
		case o.t == q.t:
			// the tenant's other queue of the same rank: by age
			o.waiters.Scan(func(x *waiter) bool {
				if x.seq < w.seq {
					n++
					return true
				}
				return false
			})
		default:
			n += c.servedBefore(o, bar, w.seq)
		}
	}
	return n
}

// waiterIndex returns w's index in q's waiters (by age).
func waiterIndex(q *tenantQ, w *waiter) (int, bool) {
	lo, hi := 0, q.waiters.Len()
	for lo < hi {
		mid := (lo + hi) / 2
		x, _ := q.waiters.GetAt(mid)
		switch {
		case x == w:
			return mid, true
		case x.seq < w.seq:
			lo = mid + 1
		default:
			hi = mid
		}
	}
	return 0, false
}

// servedBefore counts the waiters of o that go before a request of
// another tenant whose share when its turn comes is bar and whose age is
// seq: o's j-th waiter goes first while o's tenant's share with j more
// envelopes held is below bar, or equal and the waiter older.
func (c *Core) servedBefore(o *tenantQ, bar float64, seq uint64) int {
	first := func(j int) bool { // o's j-th waiter goes after
		s := c.shareAfter(o.t, o.p, j)
		if s != bar {
			return s > bar
		}
		x, _ := o.waiters.GetAt(j)
		return x.seq > seq
	}
	lo, hi := 0, o.waiters.Len()
	for lo < hi { // the shares only grow with j
		mid := (lo + hi) / 2
		if first(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// shareAfter is tenant t's weighted dominant share in p's pool once it
// holds k more envelopes of p.
func (c *Core) shareAfter(t *tenant, p *placementQueue, k int) float64 {
	cpu, mem := holdIn(t.holds, p.ps)
	env := p.pl.Envelope
	cpu += int64(k) * env.CPUs
	mem += int64(k) * env.MemBytes
	rc, rm := p.ps.refCPU, p.ps.refMem
	if rc <= 0 || rm <= 0 {
		rc, rm = defRefCPU, defRefMem
	}
	return max(float64(cpu)/rc, float64(mem)/rm) / float64(c.pol.tenantWeight(t.id))
}

// estimateWait estimates when room for one more envelope of p is free
// after ahead requests took theirs (see [Core.TicketPosition]).
func (c *Core) estimateWait(p *placementQueue, ahead int) (time.Duration, bool) {
	if ahead > maxEstimateAhead {
		return 0, false
	}
	mean, known := time.Duration(0), c.allStats.Count > 0
	if known {
		mean = c.allStats.Total / time.Duration(c.allStats.Count)
	}
	need := ahead + 1
	var slots durHeap
	for _, n := range c.poolNodes[p.pl.Pool] {
		if matches(n, &p.pl) {
			slots = c.nodeSlots(n, p.pl.Envelope, need, mean, known, slots)
		}
	}
	heap.Init(&slots)
	for range ahead {
		if slots.Len() == 0 {
			return 0, false
		}
		at := heap.Pop(&slots).(time.Duration)
		if known {
			heap.Push(&slots, at+mean)
		}
	}
	if slots.Len() == 0 {
		return 0, false
	}
	return heap.Pop(&slots).(time.Duration), true
}

// nodeSlots appends to out when, from now, node n has room for each of up
// to need more envelopes env: the room it has now, then the room each of
// its offers, reservations and jobs leaves when it is expected to end.
// Work of no known expected length never ends in the estimate.
func (c *Core) nodeSlots(n *node, env Resources, need int, mean time.Duration, known bool, out durHeap) durHeap {
	used, placed := n.used, n.placed
	room := min(roomFor(n, env, used, placed), need)
	for range room {
		out = append(out, 0)
	}
	if room >= need || !n.placeable() || n.closed {
		return out
	}
	type end struct {
		at  time.Duration
		env Resources
	}
	var ends []end
	if known {
		for _, rs := range n.res {
			ends = append(ends, end{mean, rs.env})
		}
	}
	now := c.now.UnixNano()
	for _, jb := range n.jobs {
		st := &c.allStats
		if jb.name != 0 {
			if s, ok := c.stats[c.names[jb.name]]; ok && s.Count > 0 {
				st = s
			}
		}
		if st.Count == 0 {
			continue
		}
		var ran time.Duration
		if at := jb.startedAt(); jb.state == jobRunning && at > 0 && at <= now {
			ran = time.Duration(now - at)
		}
		ends = append(ends, end{expectedLeft(st, ran), jb.env()})
	}
	slices.SortStableFunc(ends, func(a, b end) int { return cmp.Compare(a.at, b.at) })
	for _, e := range ends {
		used, placed = used.sub(e.env), placed-1
		nr := min(roomFor(n, env, used, placed), need)
		for ; room < nr; room++ {
			out = append(out, e.at)
		}
		if room >= need {
			break
		}
	}
	return out
}

// durHeap is a min-heap of durations.
type durHeap []time.Duration

func (h durHeap) Len() int           { return len(h) }
func (h durHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h durHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *durHeap) Push(x any)        { *h = append(*h, x.(time.Duration)) }
func (h *durHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
