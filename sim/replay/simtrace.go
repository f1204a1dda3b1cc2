package replay

import (
	"context"
	"io"
	"slices"
	"sort"
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
// record built from the scenario's tenants and knobs; the scenario's vk
// variants are left out (each is a run of its own). It is how a long
// synthetic run becomes a trace to calibrate the replay against
// (docs/sim.md). Every submission is followed by the queue record a
// relay would have passed on from GitLab's job response: the job's time
// in the simulated GitLab's queue up to its answer, and how many jobs of
// its runner were pending then, itself included. It returns the
// simulator's report of the run.
func WriteSimTrace(ctx context.Context, w io.Writer, s *sim.Scenario, seed uint64, start time.Time) (*sim.Report, error) {
	sc := *s
	sc.VK.Variants = nil // one run: a variant's steps would land in the same trace
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
	recs := withQueueRecords(sink.recs, rep.Workload(), start)
	tw, err := wtrace.NewWriter(w, wtrace.Header{Start: start.UnixMilli(), Source: "vk-sim", Note: s.Name})
	if err != nil {
		return nil, err
	}
	for i := range recs {
		if err := tw.Write(&recs[i]); err != nil {
			return nil, err
		}
	}
	return rep, tw.Flush()
}

// withQueueRecords is recs with a queue record after each submit record:
// jobs are the run's workload (job j is the core's JobID j+1), start the
// trace's time zero.
func withQueueRecords(recs []wtrace.Record, jobs []sim.Job, start time.Time) []wtrace.Record {
	arrivals := map[int][]int64{} // template → its jobs' arrivals (Unix ms), sorted
	for _, j := range jobs {
		arrivals[j.Template] = append(arrivals[j.Template], start.Add(j.Arrive).UnixMilli())
	}
	for _, a := range arrivals {
		slices.Sort(a)
	}
	answers := map[uint64]int64{} // admission → GitLab's answer
	taken := map[int]int{}        // template → jobs handed out so far
	out := make([]wtrace.Record, 0, len(recs)+len(jobs))
	for _, r := range recs {
		out = append(out, r)
		switch {
		case r.K == wtrace.KindAnswer && r.OK:
			answers[r.Adm] = r.T
		case r.K == wtrace.KindSubmit && r.Job >= 1 && int(r.Job) <= len(jobs):
			j := jobs[r.Job-1]
			at := r.T
			if a, ok := answers[r.Adm]; ok {
				at = a
			}
			arr := arrivals[j.Template]
			pending := sort.Search(len(arr), func(i int) bool { return arr[i] > at }) - taken[j.Template]
			taken[j.Template]++
			out = append(out, wtrace.QueueRecord(time.UnixMilli(r.T), sched.JobID(r.Job), sched.RunnerID(r.Runner),
				time.Duration(at-start.Add(j.Arrive).UnixMilli())*time.Millisecond, int64(max(pending, 1))))
		}
	}
	return out
}
