package sim

import (
	"context"
	"time"
)

// shapeQueues holds waiting jobs (or pods) FIFO per template. Jobs of one
// template are alike, so when a template's head does not fit, none of its
// jobs does: scanning heads is a full backfill scan.
type shapeQueues struct {
	q    [][]int
	head []int
	n    int
}

func newShapeQueues(n int) *shapeQueues {
	return &shapeQueues{q: make([][]int, n), head: make([]int, n)}
}

func (s *shapeQueues) push(tmpl, j int) { s.q[tmpl] = append(s.q[tmpl], j); s.n++ }

func (s *shapeQueues) peek(tmpl int) (int, bool) {
	if s.head[tmpl] >= len(s.q[tmpl]) {
		return 0, false
	}
	return s.q[tmpl][s.head[tmpl]], true
}

func (s *shapeQueues) pop(tmpl int) {
	s.head[tmpl]++
	s.n--
	if s.head[tmpl] > 1024 && s.head[tmpl]*2 > len(s.q[tmpl]) {
		s.q[tmpl] = append([]int(nil), s.q[tmpl][s.head[tmpl]:]...)
		s.head[tmpl] = 0
	}
}

// remove drops job j wherever it is (rare: a pod timing out).
func (s *shapeQueues) remove(tmpl, j int) bool {
	q := s.q[tmpl]
	for i := s.head[tmpl]; i < len(q); i++ {
		if q[i] == j {
			copy(q[i:], q[i+1:])
			s.q[tmpl] = q[:len(q)-1]
			s.n--
			return true
		}
	}
	return false
}

// order is the ID the backfill scans by: jobs by arrival (their ID), pods
// by creation.
type orderFn func(j int) int

// backfill places, oldest head first, every waiting item that fits now;
// with hol (head of line) it stops at the first head that does not fit.
func backfill(w *world, sq *shapeQueues, idx *freeIndex, hol bool, order orderFn, place func(j, tmpl int, n *simNode)) {
	blocked := make([]bool, len(sq.q))
	for sq.n > 0 {
		best, bestTmpl := -1, -1
		for t := range sq.q {
			if blocked[t] {
				continue
			}
			if j, ok := sq.peek(t); ok && (best < 0 || order(j) < order(best)) {
				best, bestTmpl = j, t
			}
		}
		if best < 0 {
			return
		}
		n := idx.find(w.env[bestTmpl], w.s.Jobs[bestTmpl].Pool)
		if n == nil {
			if hol {
				return
			}
			blocked[bestTmpl] = true
			continue
		}
		sq.pop(bestTmpl)
		idx.take(n, w.env[bestTmpl])
		place(best, bestTmpl, n)
	}
}

// runPull models hosts pulling from one shared queue when they have room
// (seed 003's Redis design): pull-fifo stops at a head that fits nowhere
// (head-of-line blocking, BS-20's "utilization below 70%"); greedy-backfill
// takes any job that fits, oldest first. A pulled job starts after the
// host's next poll (uniform within poll_interval) and a GitLab round trip;
// the room is held from the pull.
func runPull(ctx context.Context, w *world, greedy bool) error {
	sq := newShapeQueues(len(w.s.Jobs))
	idx := newFreeIndex(w.nodes)
	var dispatch func()
	pending := false
	dispatch = func() {
		pending = false
		backfill(w, sq, idx, !greedy, func(j int) int { return j }, func(j, tmpl int, n *simNode) {
			env := w.env[tmpl]
			w.m.hold(w.eng.now, env.cpus)
			d := time.Duration(w.rng.Int64N(int64(w.s.Baseline.PollInterval.Duration))) + w.s.GitLab.RoundTrip.Sample(w.rng)
			w.m.gitlabRequests++
			w.eng.after(d, func() {
				w.m.unhold(w.eng.now, env.cpus)
				w.m.started(w.eng.now, j, tmpl)
				w.eng.after(w.jobs[j].Runtime, func() {
					idx.give(n, env)
					w.m.finished(w.eng.now, j, tmpl)
					if !pending {
						pending = true
						w.eng.after(0, dispatch)
					}
				})
			})
		})
	}
	w.scheduleArrivals(func(j int) {
		sq.push(w.jobs[j].Template, j)
		if !pending {
			pending = true
			w.eng.after(0, dispatch)
		}
	})
	return w.runUntilDone(ctx)
}
