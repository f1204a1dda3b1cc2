package sched

import (
	"slices"
	"strings"
	"time"
)

// Image affinity (PLACE-14..18): a job whose own or service image its node
// builds from the checkout goes first to a node that ran a job of the same
// project with the same built images within that node's
// image_cache_idle_secs, while that node is lightly loaded.

// DefaultImageCacheIdle is a node's image_cache_idle_secs when it reports
// none (DECISIONS 10).
const DefaultImageCacheIdle = 1800 * time.Second

// affinityBaselineScan bounds how many of a placement's least loaded nodes
// are looked at to find "the lowest such load among candidates"
// (PLACE-17); see README.md.
const affinityBaselineScan = 16

type warmEntry struct {
	n    *node
	last int64 // Unix ns the node last ran a job with these images
}

// sentWindow counts the vCPUs of starts sent to a node in 10-second
// buckets, so "the last minute" costs fixed space per node (a per-start
// list would cost 16 B per start, at 1,000 starts a second). The minute is
// the six newest buckets plus the unexpired share of the seventh.
type sentWindow struct {
	slot int64    // Unix 10-second slot of the newest bucket
	b    [7]int32 // b[slot%7] is the newest
}

const sentSlot = 10 // seconds per bucket

// affinityKey names a project's set of built images; "" when the job has
// none.
func affinityKey(project string, images []string) string {
	if len(images) == 0 {
		return ""
	}
	return project + "\x00" + strings.Join(sortedSet(images), "\x00")
}

// roll moves the window to now's slot, clearing buckets that left it.
func (w *sentWindow) roll(now time.Time) {
	s := now.Unix() / sentSlot
	if s-w.slot >= int64(len(w.b)) {
		w.b = [7]int32{}
		w.slot = s
		return
	}
	for w.slot < s {
		w.slot++
		w.b[w.slot%int64(len(w.b))] = 0
	}
}

// recentCPUs estimates the vCPUs of jobs sent to n in the last minute.
func (c *Core) recentCPUs(n *node) float64 {
	w := &n.sent
	w.roll(c.now)
	var sum float64
	for i := int64(0); i < 6; i++ {
		sum += float64(w.b[(w.slot-i)%int64(len(w.b))])
	}
	into := float64(c.now.UnixNano()%(sentSlot*1e9)) / (sentSlot * 1e9)
	return sum + float64(w.b[(w.slot-6)%int64(len(w.b))])*(1-into)
}

// affLoad is PLACE-16's load of n with extra vCPUs added.
func (c *Core) affLoad(n *node, extra int64) float64 {
	if n.capacity.CPUs <= 0 {
		return 1
	}
	l := c.recentCPUs(n) + float64(extra)
	if n.hasLoad {
		l += n.load1
	}
	return l / float64(n.capacity.CPUs)
}

// noteSent records a start on n for the last-minute vCPU term and, for a
// job with built images, n as warm for them.
func (c *Core) noteSent(n *node, jb *job) {
	n.sent.roll(c.now)
	n.sent.b[n.sent.slot%int64(len(n.sent.b))] += int32(jb.env().CPUs)
	c.noteWarm(n, jb)
}

func (c *Core) noteWarm(n *node, jb *job) {
	key := c.jobAff[jb.id]
	if key == "" {
		return
	}
	ws := c.warm[key]
	for i := range ws {
		if ws[i].n == n {
			ws[i].last = c.now.UnixNano()
			return
		}
	}
	c.warm[key] = append(ws, warmEntry{n: n, last: c.now.UnixNano()})
}

// isWarm reports whether n ran a job with the key's images within its
// image_cache_idle_secs.
func (c *Core) isWarm(n *node, key string) bool {
	idle := n.imageIdle
	if idle <= 0 {
		idle = DefaultImageCacheIdle
	}
	for _, w := range c.warm[key] {
		if w.n == n {
			return c.now.UnixNano()-w.last <= int64(idle)
		}
	}
	return false
}

// affinityNode returns the warm node jb should start on, or nil when the
// normal order applies (PLACE-15..17, PLACE-21: rules included).
func (c *Core) affinityNode(jb *job, rules []PlacementRule) *node {
	key := c.jobAff[jb.id]
	if key == "" {
		return nil
	}
	env := jb.env()
	now := c.now.UnixNano()
	ws := c.warm[key]
	// forget nodes whose image cache has gone idle
	ws = slices.DeleteFunc(ws, func(w warmEntry) bool {
		idle := w.n.imageIdle
		if idle <= 0 {
			idle = DefaultImageCacheIdle
		}
		return now-w.last > int64(idle)
	})
	if len(ws) == 0 {
		delete(c.warm, key)
		return nil
	}
	c.warm[key] = ws
	// the lowest load among candidates, without this job (PLACE-17)
	low := -1.0
	seen := 0
	jb.p.nodes.Scan(func(e nodeEntry) bool {
		seen++
		if l := c.affLoad(e.n, 0); low < 0 || l < low {
			low = l
		}
		return seen < affinityBaselineScan
	})
	var best *node
	bestLoad := 0.0
	for _, w := range ws {
		n := w.n
		if !n.placeable() || !matches(n, &jb.p.pl) || roomFor(n, env, n.used, n.placed) < 1 {
			continue
		}
		if len(rules) > 0 && !rulesAllow(rules, jb.ref, n.id, n.pools) {
			continue
		}
		if c.affLoad(n, env.CPUs) >= c.pol.ImageAffinityMaxLoad {
			continue // PLACE-16
		}
		l := c.affLoad(n, 0)
		if low >= 0 && l > low+c.pol.ImageAffinityMaxExtraLoad {
			continue // PLACE-17
		}
		if best == nil || l < bestLoad || l == bestLoad && n.id < best.id {
			best, bestLoad = n, l
		}
	}
	return best
}
