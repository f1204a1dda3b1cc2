package sched_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/vk-ci/vk/sched"
	"github.com/vk-ci/vk/sched/schedtest"
)

// fsModel is what the fair-share property knows from the outside: the
// nodes' capacities, what runs where, what waits, and so every tenant's
// weighted dominant share of the pool (DECISIONS 13), recomputed by the
// test rather than read from the Core.
type fsModel struct {
	capCPU, capMem int64
	nodeCap        map[sched.NodeID]sched.Resources
	nodeUsed       map[sched.NodeID]sched.Resources
	weight         map[sched.TenantID]int
	runnerTenant   map[sched.RunnerID]sched.TenantID
	runnerEnv      map[sched.RunnerID]sched.Resources
	jobRunner      map[sched.JobID]sched.RunnerID
	waiting        map[sched.JobID]bool
	running        map[sched.JobID]sched.NodeID
	heldCPU        map[sched.TenantID]int64
	heldMem        map[sched.TenantID]int64
	// drained: nodes drained for wide work before the step (BS-22)
	drained map[sched.NodeID]bool
}

func (m *fsModel) share(t sched.TenantID) float64 {
	s := max(float64(m.heldCPU[t])/float64(m.capCPU), float64(m.heldMem[t])/float64(m.capMem))
	return s / float64(m.weight[t])
}

func (m *fsModel) fits(n sched.NodeID, env sched.Resources) bool {
	c, u := m.nodeCap[n], m.nodeUsed[n]
	return c.MemBytes-u.MemBytes >= env.MemBytes && c.DiskBytes-u.DiskBytes >= env.DiskBytes
}

// start applies one Start; it returns a complaint when a tenant of lower
// share had a waiting job that fitted the node.
func (m *fsModel) start(a sched.Start) string {
	r := m.jobRunner[a.Job]
	t, env := m.runnerTenant[r], m.runnerEnv[r]
	var bad string
	st := m.share(t)
	for j := range m.waiting {
		if m.drained[a.Node] {
			break // held for its placement's wide work (BS-22)
		}
		if j == a.Job {
			continue
		}
		ou, jenv := m.runnerTenant[m.jobRunner[j]], m.runnerEnv[m.jobRunner[j]]
		if ou == t || !m.fits(a.Node, jenv) {
			continue
		}
		if m.keptWhole(a.Node, env, jenv) {
			continue
		}
		if su := m.share(ou); su < st-1e-9 {
			bad = fmt.Sprintf("job %d of tenant %d (share %.4f) started on node %d while job %d of tenant %d (share %.4f) waited and fitted there",
				a.Job, t, st, a.Node, j, ou, su)
			break
		}
	}
	delete(m.waiting, a.Job)
	m.running[a.Job] = a.Node
	m.nodeUsed[a.Node] = addRes(m.nodeUsed[a.Node], env, 1)
	m.heldCPU[t] += env.CPUs
	m.heldMem[t] += env.MemBytes
	return bad
}

// keptWhole reports whether a job of envelope env, larger than jenv in
// vCPUs or memory and wide on node n (half its vCPUs or memory, the
// default WideFraction), may take n ahead of a waiting job of jenv of any
// share: room that fits waiting wide work is kept whole for it (BS-20).
func (m *fsModel) keptWhole(n sched.NodeID, env, jenv sched.Resources) bool {
	c := m.nodeCap[n]
	wide := 2*env.CPUs >= c.CPUs || 2*env.MemBytes >= c.MemBytes
	return wide && (env.CPUs > jenv.CPUs || env.MemBytes > jenv.MemBytes)
}

func (m *fsModel) finish(j sched.JobID) {
	n := m.running[j]
	r := m.jobRunner[j]
	t, env := m.runnerTenant[r], m.runnerEnv[r]
	delete(m.running, j)
	m.nodeUsed[n] = addRes(m.nodeUsed[n], env, -1)
	m.heldCPU[t] -= env.CPUs
	m.heldMem[t] -= env.MemBytes
}

// spec: ARB-05, ARB-09, ARB-10, BS-28
//
// TestPropertyFairShareAcrossPlacements: tenants of different weights
// submit jobs of different envelopes (vCPU-heavy, memory-heavy, small and
// large) into one pool of nodes that share one vCPU-to-memory ratio; jobs
// finish at random. Whenever the Core starts a job, no other tenant of a
// lower weighted dominant share (computed by the test from what it saw
// start and finish) had a waiting job that fitted on that node, and the
// Core's invariants hold after every step (DECISIONS 13). A node drained
// for wide work (BS-22) is exempt: it is held for its placement's waiters;
// so is a wide job taking a node ahead of smaller work, whatever its
// tenant's share: room that fits waiting wide work is kept whole for it.
func TestPropertyFairShareAcrossPlacements(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := &fsModel{
			nodeCap: map[sched.NodeID]sched.Resources{}, nodeUsed: map[sched.NodeID]sched.Resources{},
			weight: map[sched.TenantID]int{}, runnerTenant: map[sched.RunnerID]sched.TenantID{},
			runnerEnv: map[sched.RunnerID]sched.Resources{}, jobRunner: map[sched.JobID]sched.RunnerID{},
			waiting: map[sched.JobID]bool{}, running: map[sched.JobID]sched.NodeID{},
			heldCPU: map[sched.TenantID]int64{}, heldMem: map[sched.TenantID]int64{},
		}
		pol := sched.Policy{Tenants: map[sched.TenantID]sched.TenantPolicy{}}
		nTenants := rapid.IntRange(2, 4).Draw(t, "tenants")
		for tn := sched.TenantID(1); int(tn) <= nTenants; tn++ {
			w := rapid.IntRange(1, 4).Draw(t, "weight")
			m.weight[tn] = w
			pol.Tenants[tn] = sched.TenantPolicy{Weight: w}
		}
		h := schedtest.New(pol, rapid.Uint64().Draw(t, "seed"))
		h.Check = true
		failed := func() {
			if len(h.Failures) > 0 {
				t.Fatalf("invariants: %v", h.Failures)
			}
		}
		// 4 GiB per vCPU on every node, so shares compare the same way
		// whatever the pool's reference capacity
		nNodes := rapid.IntRange(1, 4).Draw(t, "nodes")
		for i := 1; i <= nNodes; i++ {
			cpus := int64(rapid.SampledFrom([]int{8, 16, 32}).Draw(t, "cpus"))
			r := schedtest.Node(sched.NodeID(i), cpus, 4*cpus, 1000, "linux")
			m.nodeCap[r.Node] = r.Capacity
			m.capCPU += r.Capacity.CPUs
			m.capMem += r.Capacity.MemBytes
			h.Step(r)
		}
		shapes := []sched.Resources{
			schedtest.Envelope(2, 8, 10), schedtest.Envelope(8, 32, 10),
			schedtest.Envelope(8, 4, 10), schedtest.Envelope(1, 24, 10), schedtest.Envelope(4, 16, 10),
		}
		var runners []sched.RunnerInfo
		for i := 1; i <= rapid.IntRange(2, 6).Draw(t, "runners"); i++ {
			tn := sched.TenantID(rapid.IntRange(1, nTenants).Draw(t, "tenant"))
			env := rapid.SampledFrom(shapes).Draw(t, "shape")
			ri := schedtest.Runner(sched.RunnerID(i), tn, "linux", env)
			m.runnerTenant[ri.Runner], m.runnerEnv[ri.Runner] = tn, env
			runners = append(runners, ri)
		}
		h.ConnectRelay(1, 0, runners...)
		failed()
		nextJob := sched.JobID(1)
		apply := func(acts []sched.Action, drained map[sched.NodeID]bool) {
			m.drained = drained
			for _, a := range acts {
				if s, ok := a.(sched.Start); ok {
					if bad := m.start(s); bad != "" {
						t.Fatal(bad)
					}
				}
			}
		}
		steps := rapid.IntRange(10, 120).Draw(t, "steps")
		for range steps {
			if len(m.running) > 0 && rapid.IntRange(0, 2).Draw(t, "finish?") == 0 {
				ids := slices.Sorted(maps.Keys(m.running))
				j := ids[rapid.IntRange(0, len(ids)-1).Draw(t, "which")]
				m.finish(j)
				drained := drainedNodes(h.Core)
				acts := h.Step(sched.JobFinished{Job: j})
				apply(acts, drained)
			} else {
				ri := runners[rapid.IntRange(0, len(runners)-1).Draw(t, "runner")]
				j := nextJob
				nextJob++
				m.jobRunner[j] = ri.Runner
				m.waiting[j] = true
				drained := drainedNodes(h.Core)
				acts := h.Step(sched.JobSubmitted{Job: j, Runner: ri.Runner})
				apply(acts, drained)
			}
			failed()
		}
	})
}

// drainedNodes returns the nodes drained for wide work now.
func drainedNodes(c *sched.Core) map[sched.NodeID]bool {
	out := map[sched.NodeID]bool{}
	for _, n := range c.Nodes() {
		if n.DrainFor != "" || n.DrainJob != 0 {
			out[n.ID] = true
		}
	}
	return out
}

func addRes(a, b sched.Resources, sign int64) sched.Resources {
	return sched.Resources{MemBytes: a.MemBytes + sign*b.MemBytes, DiskBytes: a.DiskBytes + sign*b.DiskBytes, CPUs: a.CPUs + sign*b.CPUs}
}
