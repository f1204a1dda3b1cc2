package sim

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/tidwall/btree"
)

// event is one scheduled callback of the virtual-time engine.
type event struct {
	at  time.Duration
	seq uint64
	fn  func()
}

// engine is a virtual clock and an event heap ordered by (time, sequence):
// events at the same instant run in the order they were scheduled, so a
// run is a pure function of its inputs.
type engine struct {
	now  time.Duration
	seq  uint64
	heap []event
	n    uint64 // events run
}

func (e *engine) at(t time.Duration, fn func()) {
	if t < e.now {
		t = e.now
	}
	e.seq++
	e.heap = append(e.heap, event{t, e.seq, fn})
	e.up(len(e.heap) - 1)
}

func (e *engine) after(d time.Duration, fn func()) { e.at(e.now+d, fn) }

func (e *engine) less(i, j int) bool {
	a, b := &e.heap[i], &e.heap[j]
	return a.at < b.at || (a.at == b.at && a.seq < b.seq)
}

func (e *engine) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !e.less(i, p) {
			break
		}
		e.heap[i], e.heap[p] = e.heap[p], e.heap[i]
		i = p
	}
}

func (e *engine) down(i int) {
	n := len(e.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && e.less(r, l) {
			m = r
		}
		if !e.less(m, i) {
			return
		}
		e.heap[i], e.heap[m] = e.heap[m], e.heap[i]
		i = m
	}
}

func (e *engine) pop() event {
	ev := e.heap[0]
	last := len(e.heap) - 1
	e.heap[0] = e.heap[last]
	e.heap[last] = event{}
	e.heap = e.heap[:last]
	if last > 0 {
		e.down(0)
	}
	return ev
}

// run executes events until none is left, the next is past until, or done
// reports true (checked every event). It checks ctx every 4096 events.
func (e *engine) run(ctx context.Context, until time.Duration, done func() bool) error {
	for len(e.heap) > 0 && e.heap[0].at <= until {
		ev := e.pop()
		e.now = ev.at
		ev.fn()
		e.n++
		if e.n&4095 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if done != nil && done() {
			return nil
		}
	}
	return nil
}

// res is an amount of resources in the simulator's units.
type res struct {
	cpus, memGiB, diskGiB int64
}

func (a res) fits(in res) bool {
	return a.cpus <= in.cpus && a.memGiB <= in.memGiB && a.diskGiB <= in.diskGiB
}
func (a res) add(b res) res { return res{a.cpus + b.cpus, a.memGiB + b.memGiB, a.diskGiB + b.diskGiB} }
func (a res) sub(b res) res { return res{a.cpus - b.cpus, a.memGiB - b.memGiB, a.diskGiB - b.diskGiB} }

// simNode is one node of the fleet model: its capacity and what its ledger
// has set aside (reservations and running jobs).
type simNode struct {
	id       int
	tmpl     int
	capacity res
	used     res
	maxConc  int
	count    int // reservations + jobs on it
	pool     string
	labels   []string
}

func (n *simNode) free() res { return n.capacity.sub(n.used) }

// admits is the node's ledger check: accept if it fits.
func (n *simNode) admits(env res) bool {
	return env.fits(n.free()) && (n.maxConc == 0 || n.count < n.maxConc)
}

// nodeKey orders nodes by most free vCPUs, then ID.
type nodeKey struct {
	free int64
	id   int
}

// freeIndex finds nodes with room for the baselines: the node with the most
// free vCPUs that fits (LeastAllocated, Kubernetes' default scoring and a
// host-pulls-when-it-has-room model alike).
type freeIndex struct {
	t     *btree.BTreeG[nodeKey]
	nodes []*simNode
}

func newFreeIndex(nodes []*simNode) *freeIndex {
	f := &freeIndex{t: btree.NewBTreeGOptions(func(a, b nodeKey) bool {
		return a.free > b.free || (a.free == b.free && a.id < b.id)
	}, btree.Options{NoLocks: true}), nodes: nodes}
	for _, n := range nodes {
		f.t.Set(nodeKey{n.free().cpus, n.id})
	}
	return f
}

// find returns a node of pool that admits env, or nil. It looks at no more
// than 256 nodes.
func (f *freeIndex) find(env res, pool string) *simNode {
	var found *simNode
	seen := 0
	f.t.Scan(func(k nodeKey) bool {
		if k.free < env.cpus || seen >= 256 {
			return false
		}
		seen++
		n := f.nodes[k.id]
		if n.pool == pool && n.admits(env) {
			found = n
			return false
		}
		return true
	})
	return found
}

// take and give change a node's usage and keep the index in order.
func (f *freeIndex) take(n *simNode, env res) {
	f.t.Delete(nodeKey{n.free().cpus, n.id})
	n.used = n.used.add(env)
	n.count++
	f.t.Set(nodeKey{n.free().cpus, n.id})
}

func (f *freeIndex) give(n *simNode, env res) {
	f.t.Delete(nodeKey{n.free().cpus, n.id})
	n.used = n.used.sub(env)
	n.count--
	f.t.Set(nodeKey{n.free().cpus, n.id})
}

// world is what one policy's run shares: the engine, the scenario, the
// sampled jobs, the fleet, a PRNG and the meter.
type world struct {
	eng    engine
	s      *Scenario
	jobs   []Job
	nodes  []*simNode
	rng    *rand.Rand
	m      *meter
	env    []res // per template
	window time.Duration
	end    time.Duration
}

func newWorld(s *Scenario, jobs []Job, seed uint64, label string) *world {
	w := &world{s: s, jobs: jobs, rng: seedFor(seed, "policy/"+label, 0), window: s.Duration.Duration,
		end: s.Duration.Duration + s.Drain.Duration}
	for ti, t := range s.Nodes {
		for range t.Count {
			w.nodes = append(w.nodes, &simNode{id: len(w.nodes), tmpl: ti,
				capacity: res{int64(t.CPUs), int64(t.MemGiB), int64(t.DiskGiB)}, maxConc: t.MaxConcurrency,
				pool: t.Pool, labels: t.Labels})
		}
	}
	for _, j := range s.Jobs {
		w.env = append(w.env, res{int64(j.CPUs), int64(j.MemGiB), int64(j.DiskGiB)})
	}
	var total int64
	for _, n := range w.nodes {
		total += n.capacity.cpus
	}
	w.m = newMeter(s, jobs, total)
	return w
}

// gitlabQueues is GitLab's pending-job queue per runner (template): a job
// arrives there and is handed, oldest first, to whichever request of a
// matching runner comes next (BS-26: demand, not a specific job).
//
// Long polling is modelled as Workhorse does it
// (reference/gitlab-runner-api.md §3.4): each runner's queue has a
// version, re-rolled whenever a job is queued for it, and a runner's
// requests carry the version of its last empty answer from Rails
// (X-GitLab-Last-Update). Workhorse holds a request whose version is
// current until the version changes or the long poll runs out, and then
// answers 204 itself: a held request is never handed a job. The runner's
// next request carries the old version, so Workhorse passes it to Rails,
// which hands out the job. A request without a version (none seen yet) or
// with an old one goes to Rails at once.
type gitlabQueues struct {
	q       [][]int
	waiters [][]*glWaiter
	ver     []int // per runner: its queue's version, bumped by every job queued
	seen    []int // per runner: the version of its last empty answer from Rails, -1 none
}

// glWaiter is a job request held open by GitLab's long polling.
type glWaiter struct {
	done   bool
	answer func() // Workhorse's 204 after the answer's way back
}

func newGitlabQueues(n int) gitlabQueues {
	g := gitlabQueues{q: make([][]int, n), waiters: make([][]*glWaiter, n), ver: make([]int, n), seen: make([]int, n)}
	for i := range g.seen {
		g.seen[i] = -1
	}
	return g
}

func (g *gitlabQueues) push(tmpl, job int) {
	g.q[tmpl] = append(g.q[tmpl], job)
	g.changed(tmpl)
}

// changed re-rolls runner tmpl's queue version: Workhorse answers every
// request it holds for the runner 204.
func (g *gitlabQueues) changed(tmpl int) {
	g.ver[tmpl]++
	for _, w := range g.waiters[tmpl] {
		if !w.done {
			w.done = true
			w.answer()
		}
	}
	g.waiters[tmpl] = g.waiters[tmpl][:0]
}

// request answers a job request of runner tmpl arriving at GitLab now.
// Rails answers at once, with the oldest queued job or empty; with long
// polling (longPoll > 0) a request whose version is current is held by
// Workhorse instead and answered empty when the queue changes (after back,
// the time a held answer takes to reach the runner) or after longPoll.
// cb's held says Workhorse answered (a 204 without X-GitLab-Last-Update);
// a held request never gets a job.
func (g *gitlabQueues) request(e *engine, tmpl int, longPoll, back time.Duration, cb func(job int, ok, held bool)) {
	if longPoll <= 0 || g.seen[tmpl] != g.ver[tmpl] {
		j, ok := g.pop(tmpl)
		if !ok {
			g.seen[tmpl] = g.ver[tmpl]
		}
		cb(j, ok, false)
		return
	}
	w := &glWaiter{}
	w.answer = func() { e.after(back, func() { cb(0, false, true) }) }
	g.waiters[tmpl] = append(g.waiters[tmpl], w)
	e.after(longPoll, func() {
		if !w.done {
			w.done = true
			cb(0, false, true)
		}
	})
}

func (g *gitlabQueues) pop(tmpl int) (int, bool) {
	if len(g.q[tmpl]) == 0 {
		return 0, false
	}
	j := g.q[tmpl][0]
	g.q[tmpl] = g.q[tmpl][1:]
	return j, true
}

// scheduleArrivals puts every job's arrival on the engine.
func (w *world) scheduleArrivals(arrive func(j int)) {
	// one event per distinct instant keeps the heap small for fan-outs
	for i := 0; i < len(w.jobs); {
		k := i
		for k < len(w.jobs) && w.jobs[k].Arrive == w.jobs[i].Arrive {
			k++
		}
		lo, hi := i, k
		w.eng.at(w.jobs[i].Arrive, func() {
			for j := lo; j < hi; j++ {
				w.m.arrived(w.eng.now, j)
				arrive(j)
			}
		})
		i = k
	}
}

// runUntilDone runs the engine until every job ended (finished or failed)
// or the drain limit passed.
func (w *world) runUntilDone(ctx context.Context) error {
	err := w.eng.run(ctx, w.end, func() bool { return w.m.ended == len(w.jobs) })
	at := w.eng.now
	if err == nil && w.m.ended < len(w.jobs) {
		// the run reached its end with jobs still running or waiting:
		// they ran or waited up to it, not only to the last event before
		at = max(at, w.end)
	}
	w.m.close(at)
	return err
}

// requeue puts job back at the head of runner tmpl's queue (a request that
// died with its manager never took it); GitLab re-rolls the runner's queue
// version as for a new job.
func (g *gitlabQueues) requeue(tmpl, job int) {
	g.q[tmpl] = append([]int{job}, g.q[tmpl]...)
	g.changed(tmpl)
}
