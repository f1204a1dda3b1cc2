package replay

import (
	"context"
	"io"
	"time"

	"github.com/vk-ci/vk/hub/wtrace"
	"github.com/vk-ci/vk/sched"
	"github.com/vk-ci/vk/sim"
)

// recordSink keeps translated records in memory.
type recordSink struct{ recs []wtrace.Record }

func (r *recordSink) Put(rec wtrace.Record) { r.recs = append(r.recs, rec) }

// WriteSimTrace runs the vk policy of s (with seed; 0: the scenario's) as
// if it had started at start and writes, in the hub's trace format, what a
// hub would have recorded: every step of the core goes through the same
// translation as the hub's recorder ([wtrace.Translate]), after a policy
// record built from the scenario's tenants and knobs. It is how a long
// synthetic run becomes a trace to calibrate the replay against
// (docs/sim.md). It returns the simulator's report of the run.
func WriteSimTrace(ctx context.Context, w io.Writer, s *sim.Scenario, seed uint64, start time.Time) (*sim.Report, error) {
	sc := *s
	names := func(id sched.TenantID) string {
		if i := int(id) - 1; i >= 0 && i < len(sc.Tenants) {
			return sc.Tenants[i].Name
		}
		return ""
	}
	sink := &recordSink{}
	pol := sched.Policy{Tenants: map[sched.TenantID]sched.TenantPolicy{}, ProductionRunners: map[sched.RunnerID]bool{},
		BusySecs: s.VK.BusySecs, ProbeLimit: s.VK.ProbeLimit, BackoffInitialSecs: s.VK.BackoffInitialSecs,
		BackoffMaxSecs: s.VK.BackoffMaxSecs, LeaseSecs: s.VK.LeaseSecs, PackAboveUtilization: s.VK.PackAboveUtilization,
		DrainsPerPool: s.VK.DrainsPerPool, WideFraction: s.VK.WideFraction, DrainMaxHold: s.VK.DrainMaxHold.Duration}
	for i, t := range s.Tenants {
		pol.Tenants[sched.TenantID(i+1)] = sched.TenantPolicy{Weight: t.Weight, Cap: t.Cap}
	}
	for i, j := range s.Jobs {
		if j.Production {
			pol.ProductionRunners[sched.RunnerID(i+1)] = true
		}
	}
	wtrace.Translate(start, sched.PolicyChanged{Policy: pol}, nil, names, sink)
	sc.ObserveVK(func(at time.Duration, ev sched.Event, acts []sched.Action) {
		wtrace.Translate(start.Add(at), ev, acts, names, sink)
	})
	rep, err := sim.Run(ctx, sim.Options{Scenario: &sc, Seed: seed, Policies: []string{"vk"}})
	if err != nil {
		return nil, err
	}
	tw, err := wtrace.NewWriter(w, wtrace.Header{Start: start.UnixMilli(), Source: "vk-sim", Note: s.Name})
	if err != nil {
		return nil, err
	}
	for i := range sink.recs {
		if err := tw.Write(&sink.recs[i]); err != nil {
			return nil, err
		}
	}
	return rep, tw.Flush()
}
