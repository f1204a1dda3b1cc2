package sched

import (
	"cmp"
	"container/heap"
	"slices"
	"time"
)

// Position says where a waiting ticket or queued job stands among the
// requests competing for the same room, and how long it is expected to
// wait: the numbers behind "why is my job waiting" (for operators' queue
// views and the job view). It is read from the Core's state as it is;
// nothing is changed.
//
// The requests competing with it are those of its own placement and of
// every other placement whose queue shares a node of the fleet with it
// where both envelopes fit (the node's pools and labels serve both, and
// its memory and disk hold either envelope): room that frees on such a node goes to
// whichever of them is first in the one arbitration order across
// placements, class, then weighted dominant share, then age (DECISIONS
// 13).
type Position struct {
	// Class is the scheduling class it waits in: "deadline", "reserved",
	// "production", "production probe", "normal" or "normal probe"; ""
	// when its runner has no placement.
	Class string
	// Queued is true while it is in its placement's queue. False when
	// something other than room holds it back (its reason says what, a
	// cap or a backoff): then every queued competing request is counted
	// ahead of it.
	Queued bool
	// Ahead is how many waiting competing requests go before it: every
	// request of an earlier class, and of its own class those whose
	// tenant's weighted dominant share, while the requests are served one
	// by one, stays below its own tenant's when its turn comes (age breaks
	// a tie; a tenant's own requests thus go by age), as the arbitration
	// pass orders them when nothing else changes.
	Ahead int
	// SamePlacement is how many of Ahead are of its own placement.
	SamePlacement int
	// Waiting is how many competing requests wait in their queues, itself
	// included.
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

// TicketPosition returns a ticket's position among the requests competing
// for its room (see [Position]) and its estimated wait; ok false when unknown or ended. An offered or
// granted ticket waits for nothing more than the node's answer or its
// claim: Ahead 0, Wait 0.
//
// The wait is estimated from the Core's own view: every node of the
// placement's pool that may take it frees room as its jobs end, each job
// expected to run the mean of its job name's runtime statistics (of every
// job when its name has none) less what it has run, an offer or
// reservation as long as the mean of every job. Room that frees goes to
// the requests ahead in turn (those of other placements too, each counted
// as taking one envelope of this placement's room), each then held for
// the mean of every job.
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
	l := c.lineOf(p)
	pos := Position{Class: classNames[cls]}
	same := 0
	for _, o := range l.qs {
		pos.Waiting += o.waiters.Len()
		if o.p == p {
			same += o.waiters.Len()
		}
	}
	if q := w.tq; q != nil && q.inTree {
		pos.Queued = true
		pos.Ahead, pos.SamePlacement = c.ahead(&l, w, q)
	} else {
		pos.Ahead, pos.SamePlacement, pos.Waiting = pos.Waiting, same, pos.Waiting+1
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

// line is what competes with the requests of one placement for room: the
// tenant queues in their class trees of every competing placement (see
// [Position]), also by tenant.
type line struct {
	qs       []*tenantQ
	byTenant map[*tenant][]*tenantQ
}

// lineOf returns the line of p's requests.
func (c *Core) lineOf(p *placementQueue) line {
	l := line{byTenant: map[*tenant][]*tenantQ{}}
	for _, o := range c.competing(p) {
		for _, q := range o.tqList {
			if q.inTree {
				l.qs = append(l.qs, q)
				l.byTenant[q.t] = append(l.byTenant[q.t], q)
			}
		}
	}
	return l
}

// competing returns p and every placement that shares with p a node both
// fit on: a node of the fleet (reported and not lost, whatever its state
// now: room that frees there later is competed for all the same) that
// serves both placements and whose memory and disk hold either envelope.
func (c *Core) competing(p *placementQueue) []*placementQueue {
	out := []*placementQueue{p}
	for _, n := range c.poolNodes[p.pl.Pool] {
		if !n.known || !matches(n, &p.pl) || !fitsEmpty(n, p.pl.Envelope) {
			continue
		}
		for _, m := range n.queues {
			if !slices.Contains(out, m.p) && fitsEmpty(n, m.p.pl.Envelope) {
				out = append(out, m.p)
			}
		}
		if len(out) == len(c.queues) {
			break // every placement competes: no node can add one
		}
	}
	return out
}

// fitsEmpty reports whether env fits on n when n holds nothing.
func fitsEmpty(n *node, env Resources) bool {
	return env.MemBytes <= n.capacity.MemBytes && env.DiskBytes <= n.capacity.DiskBytes
}

// ahead counts the requests of line l that go before w, which is in
// tenant queue q: all of them, and those of w's own placement.
func (c *Core) ahead(l *line, w *waiter, q *tenantQ) (all, same int) {
	mine := c.rank(q.cls)
	at := turn{mine, c.shareAt(l, q, mine, w.seq), w.seq}
	for _, o := range l.qs {
		k := 0
		switch r := c.rank(o.cls); {
		case r < mine:
			k = o.waiters.Len()
		case r == mine:
			k = c.goFirst(l, o, r, at)
		}
		all += k
		if o.p == q.p {
			same += k
		}
	}
	return all, same
}

// goFirst counts the waiters of o, of a class of rank r, that go before
// the request whose turn is at. o's waiters go by age and its tenant's
// share only grows as they are served, so those that go first are a
// prefix of them.
func (c *Core) goFirst(l *line, o *tenantQ, r int, at turn) int {
	lo, hi := 0, o.waiters.Len()
	for lo < hi {
		mid := (lo + hi) / 2
		x, _ := o.waiters.GetAt(mid)
		if (turn{r, c.shareAt(l, o, r, x.seq), x.seq}).first(at) {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// shareAt is the weighted dominant share, in o's pool, of o's tenant when
// its request of age seq in o (of a class of rank r) comes up: what it
// holds there now plus the envelopes of its older requests of the same
// rank in l's queues of that pool, which go before it.
func (c *Core) shareAt(l *line, o *tenantQ, r int, seq uint64) float64 {
	cpu, mem := holdIn(o.t.holds, o.p.ps)
	for _, x := range l.byTenant[o.t] {
		if x.p.ps != o.p.ps || c.rank(x.cls) != r {
			continue
		}
		k := int64(olderThan(x, seq))
		env := x.p.pl.Envelope
		cpu += k * env.CPUs
		mem += k * env.MemBytes
	}
	return c.shareOf(o.t, o.p.ps, cpu, mem)
}

// olderThan counts q's waiters older than seq.
func olderThan(q *tenantQ, seq uint64) int {
	lo, hi := 0, q.waiters.Len()
	for lo < hi {
		mid := (lo + hi) / 2
		if x, _ := q.waiters.GetAt(mid); x.seq < seq {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
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
