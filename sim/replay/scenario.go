package replay

import (
	"fmt"
	"strconv"
	"time"

	"github.com/vk-ci/vk/hub/wtrace"
	"github.com/vk-ci/vk/sched"
	"github.com/vk-ci/vk/sim"
)

const gib = int64(1) << 30

// built is a workload as a simulator scenario under one policy: the
// scenario and how its indices map back to the trace's IDs.
type built struct {
	s       *sim.Scenario
	tenants []uint64 // sim tenant index → trace tenant ID
	names   []string // sim tenant index → name
	runners []uint64 // sim template index → trace runner ID
}

func ceilGiB(b int64) int  { return int(max(1, (b+gib-1)/gib)) }
func floorGiB(b int64) int { return int(max(1, b/gib)) }

// tenantName is a tenant's policy name, else "tenant-<ID>".
func tenantName(p *wtrace.Policy, id uint64) string {
	for _, t := range p.Tenants {
		if t.ID == id && t.Name != "" {
			return t.Name
		}
	}
	return "tenant-" + strconv.FormatUint(id, 10)
}

// tenantIDs are the tenants of the workload's runners and of the policy in
// force, sorted; a candidate's tenants map onto them by ID.
func (w *Workload) tenantIDs() []uint64 {
	set := map[uint64]bool{}
	for _, t := range w.Policy.Tenants {
		set[t.ID] = true
	}
	for _, r := range w.Runners {
		set[r.Tenant] = true
	}
	return sortedIDs(set)
}

// window is the simulated arrival window: the trace's, and at least a
// second.
func (w *Workload) window() time.Duration {
	return max(w.End.Sub(w.Start)+time.Millisecond, time.Second)
}

// build makes the scenario of w under pol (the policy in force or a
// candidate, in trace IDs), with seed.
func build(w *Workload, pol *wtrace.Policy, name string, seed uint64) (*built, error) {
	b := &built{s: &sim.Scenario{Name: name, Seed: seed, Policies: []string{"vk"}, Trace: "recorded"}}
	s := b.s
	s.Duration = sim.Duration{Duration: w.window()}
	// The run ends with the window, as the trace did: a job not started by
	// then waited until the end, on both sides (hidden backlog included).
	s.Drain = sim.Duration{Duration: time.Millisecond}
	tidx := map[uint64]int{}
	seen := map[string]bool{}
	for i, id := range w.tenantIDs() {
		tp := wtrace.Tenant{ID: id, Weight: 1}
		for _, t := range pol.Tenants {
			if t.ID == id {
				tp = t
			}
		}
		n := tenantName(w.Policy, id)
		if seen[n] {
			n += "-" + strconv.FormatUint(id, 10)
		}
		seen[n] = true
		tidx[id] = i
		b.tenants, b.names = append(b.tenants, id), append(b.names, n)
		s.Tenants = append(s.Tenants, sim.TenantSpec{Name: n, Weight: max(tp.Weight, 1), Cap: tp.Cap})
	}
	prod := map[uint64]bool{}
	for _, r := range pol.Production {
		prod[r] = true
	}
	ridx := map[uint64]int{}
	conc := 1
	for i, r := range w.Runners {
		ridx[r.ID] = i
		b.runners = append(b.runners, r.ID)
		conc = max(conc, min(r.Conc, 64))
		s.Jobs = append(s.Jobs, sim.JobTemplate{Name: "runner-" + strconv.FormatUint(r.ID, 10), Tenant: b.names[tidx[r.Tenant]],
			CPUs: int(max(1, r.Envelope.CPUs)), MemGiB: ceilGiB(r.Envelope.MemBytes), DiskGiB: ceilGiB(r.Envelope.DiskBytes),
			Pool: r.Pool, Production: prod[r.ID], Project: "replay",
			Runtime: sim.Dist{Kind: "fixed", Value: sim.Duration{Duration: time.Second}}})
	}
	if len(s.Jobs) == 0 {
		return nil, fmt.Errorf("replay: the trace names no runner (no relay inventory)")
	}
	var evs []sim.TimedEvent
	for i, n := range w.Nodes {
		disk := floorGiB(n.Capacity.DiskBytes)
		if n.Capacity.DiskBytes == 0 {
			disk = 1000
		}
		s.Nodes = append(s.Nodes, sim.NodeTemplate{Name: "node-" + strconv.FormatUint(n.ID, 10), Count: 1,
			CPUs: int(max(1, n.Capacity.CPUs)), MemGiB: floorGiB(n.Capacity.MemBytes), DiskGiB: disk, Pool: n.Pool,
			MaxConcurrency: n.MaxConc})
		evs = append(evs, readinessEvents(i, s.Nodes[i], n)...)
	}
	if len(s.Nodes) == 0 {
		return nil, fmt.Errorf("replay: the trace names no node")
	}
	s.VK = sim.VKParams{RequestConcurrency: conc, ProbeLimit: pol.ProbeLimit, BusySecs: pol.BusySecs,
		BackoffInitialSecs: pol.BackoffInitialSecs, BackoffMaxSecs: pol.BackoffMaxSecs, LeaseSecs: pol.LeaseSecs,
		PackAboveUtilization: pol.PackAboveUtilization, DrainsPerPool: pol.DrainsPerPool, WideFraction: pol.WideFraction,
		DrainMaxHold: sim.Duration{Duration: time.Duration(pol.DrainMaxHoldSecs) * time.Second}}
	if w.RoundTrip > 0 {
		s.GitLab.RoundTrip = sim.Dist{Kind: "lognormal", Median: sim.Duration{Duration: w.RoundTrip}, Sigma: 0.5}
	}
	s.GitLab.LongPoll = sim.Duration{Duration: w.LongPoll}
	var jobs []sim.RecordedJob
	for _, j := range w.Jobs {
		jobs = append(jobs, sim.RecordedJob{Arrive: min(max(j.Arrive, 0), s.Duration.Duration-time.Millisecond),
			Template: ridx[j.Runner], Runtime: max(j.Runtime, time.Millisecond)})
	}
	s.SetRecordedJobs(jobs)
	s.AddVKEvents(evs...)
	s.SetVKPolicy(recordedPolicy(pol))
	if err := sim.Prepare(s); err != nil {
		return nil, err
	}
	return b, nil
}

// recordedPolicy sets what the trace's policy holds beyond the scenario's
// knobs on the core's policy: headroom (in the simulator's whole GiB), the
// production probe burst, claim renewals and the fairness-drain bound, so
// a replay arbitrates with the hub's settings rather than the defaults.
func recordedPolicy(pol *wtrace.Policy) func(*sched.Policy) {
	sp := pol.Sched()
	headroom := sp.Headroom
	for i := range headroom {
		e := &headroom[i].Placement.Envelope
		e.MemBytes, e.DiskBytes = int64(ceilGiB(e.MemBytes))*gib, int64(ceilGiB(e.DiskBytes))*gib
	}
	return func(p *sched.Policy) {
		p.Headroom, p.ProductionProbeBurst, p.ClaimRenewals = headroom, sp.ProductionProbeBurst, sp.ClaimRenewals
		p.FairDrainMaxWait = sp.FairDrainMaxWait
	}
}

// readinessEvents are node i's changes of readiness as core reports: a
// node not ready takes no new work (its running jobs go on).
func readinessEvents(i int, t sim.NodeTemplate, n Node) []sim.TimedEvent {
	rep := func(at time.Duration, ready bool) sim.TimedEvent {
		st := sched.NodeMaintenance
		if ready {
			st = sched.NodeReady
		}
		pool := t.Pool
		if pool == "" {
			pool = "linux"
		}
		return sim.TimedEvent{At: at, Event: sched.NodeReport{Node: sched.NodeID(i + 1), Pools: []string{pool},
			Capacity:       sched.Resources{CPUs: int64(t.CPUs), MemBytes: int64(t.MemGiB) * gib, DiskBytes: int64(t.DiskGiB) * gib},
			MaxConcurrency: t.MaxConcurrency, State: st}}
	}
	var out []sim.TimedEvent
	if len(n.Ready) == 0 || n.Ready[0].At > 0 || !n.Ready[0].Ready {
		out = append(out, rep(0, false))
	}
	for _, r := range n.Ready {
		if r.At > 0 || r.Ready {
			out = append(out, rep(r.At, r.Ready))
		}
	}
	return out
}
