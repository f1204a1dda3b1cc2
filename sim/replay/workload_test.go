package replay

import (
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/wtrace"
	"pgregory.net/rapid"
)

// FromTrace on jobs of two runners with random GitLab queue figures: a
// job's arrival is its answer less its time in queue, or the arrival of
// the job its runner took before it when that is later by less than
// TakeOrderSlack (GitLab hands out the oldest first); each runner gains
// exactly max(last queue size − 1 − jobs it took later, 0) hidden jobs
// (within MaxHidden), never started, arriving between the last taken
// job's arrival and its answer; nothing arrives after the window.
// spec: BS-18
func TestPropertyQueueArrivalsAndHiddenBacklog(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		t0 := traceStart.UnixMilli()
		recs := []wtrace.Record{{T: t0, K: wtrace.KindPolicy, Policy: &wtrace.Policy{}},
			{T: t0, K: wtrace.KindRunner, Runner: 1, Tenant: 1, CPUs: 1}, {T: t0, K: wtrace.KindRunner, Runner: 2, Tenant: 2, CPUs: 1},
			{T: t0, K: wtrace.KindNode, Node: 1, CPUs: 4, State: "ready"}}
		n := rapid.IntRange(1, 30).Draw(t, "jobs")
		now := t0 + 10_000
		type fact struct {
			runner             uint64
			answer, queued, at int64
			pending            int64
			withQueue          bool
		}
		facts := map[uint64]fact{}
		for i := range n {
			job, adm := uint64(i+1), uint64(100+i)
			now += rapid.Int64Range(0, 5_000).Draw(t, "gap")
			f := fact{runner: uint64(rapid.IntRange(1, 2).Draw(t, "runner")), answer: now,
				queued: rapid.Int64Range(0, 9_000).Draw(t, "queued"), pending: rapid.Int64Range(0, 50).Draw(t, "pending"),
				withQueue: rapid.Bool().Draw(t, "withQueue"), at: now + 1}
			facts[job] = f
			recs = append(recs, wtrace.Record{T: now - 10, K: wtrace.KindAsk, Adm: adm},
				wtrace.Record{T: now, K: wtrace.KindAnswer, Adm: adm, OK: true},
				wtrace.Record{T: f.at, K: wtrace.KindSubmit, Job: job, Runner: f.runner, Adm: adm})
			if f.withQueue {
				recs = append(recs, wtrace.Record{T: f.at, K: wtrace.KindQueue, Job: job, Runner: f.runner, Queued: f.queued, Pending: f.pending})
			}
			recs = append(recs, wtrace.Record{T: f.at + 5, K: wtrace.KindStart, Job: job, Node: 1},
				wtrace.Record{T: f.at + 1000, K: wtrace.KindEnd, Job: job, Wall: 995, Reason: "finished"})
		}
		w, err := FromTrace(wtrace.Header{Start: t0}, recs)
		if err != nil {
			t.Fatal(err)
		}
		// the expected hidden jobs: per runner, from its last queue record
		want := map[uint64]int64{}
		last := map[uint64]uint64{}
		for job := uint64(1); job <= uint64(n); job++ {
			if f := facts[job]; f.withQueue {
				last[f.runner] = job // jobs come in time order
			}
		}
		for rn, lj := range last {
			later := int64(0)
			for job := lj + 1; job <= uint64(n); job++ {
				if facts[job].runner == rn {
					later++
				}
			}
			want[rn] = max(facts[lj].pending-1-later, 0)
		}
		got := map[uint64]int64{}
		win := w.End.Sub(w.Start)
		arrive, prev := map[uint64]time.Duration{}, map[uint64]uint64{} // job → arrival; job → its runner's job before
		lastOf := map[uint64]uint64{}
		for job := uint64(1); job <= uint64(n); job++ {
			if p, ok := lastOf[facts[job].runner]; ok {
				prev[job] = p
			}
			lastOf[facts[job].runner] = job
		}
		for _, j := range w.Jobs {
			if !j.Hidden {
				arrive[j.ID] = j.Arrive
			}
		}
		for _, j := range w.Jobs {
			if j.Arrive > win {
				t.Fatalf("job %d arrives at %v, after the window %v", j.ID, j.Arrive, win)
			}
			if j.Hidden {
				got[j.Runner]++
				lf := facts[last[j.Runner]]
				lo := arrive[last[j.Runner]]
				hi := time.Duration(lf.at-t0) * time.Millisecond
				if j.Start >= 0 || j.Arrive < lo || j.Arrive > hi || j.Runtime <= 0 {
					t.Fatalf("hidden job %+v: want unstarted, arriving in [%v, %v], with a runtime", j, lo, hi)
				}
				continue
			}
			f := facts[j.ID]
			p, hasPrev := prev[j.ID]
			if hasPrev && j.Arrive < arrive[p] && arrive[p]-j.Arrive < TakeOrderSlack {
				t.Fatalf("job %d arrives at %v, before job %d its runner took earlier (%v) by less than %v", j.ID, j.Arrive, p, arrive[p], TakeOrderSlack)
			}
			raw := time.Duration(f.answer-f.queued-t0) * time.Millisecond
			want := raw
			if hasPrev && raw < arrive[p] && arrive[p]-raw < TakeOrderSlack {
				want = arrive[p]
			}
			if f.withQueue && j.Arrive != want {
				t.Fatalf("job %d arrives at %v, want %v (its answer less %d ms in queue, %v, or no earlier than job %d's %v by less than %v)",
					j.ID, j.Arrive, want, f.queued, raw, p, arrive[p], TakeOrderSlack)
			}
		}
		for rn := uint64(1); rn <= 2; rn++ {
			if got[rn] != want[rn] {
				t.Fatalf("runner %d: %d hidden jobs, want %d", rn, got[rn], want[rn])
			}
		}
		if w.Hidden != int(got[1]+got[2]) || w.Hidden > MaxHidden {
			t.Fatalf("Hidden = %d, counted %d", w.Hidden, got[1]+got[2])
		}
	})
}

// A job still running when the trace ends ran up to its end, in the
// replay as in the trace: the replay's utilization counts the window's
// quiet tail too: the node is full, so the runner's next request waits
// for room, and the window ends 0.9 s after the replay's last look at
// why requests wait (every second), the last event before its end.
// spec: BS-18
func TestReplayUtilizationRunsToTheWindowsEnd(t *testing.T) {
	t0 := traceStart.UnixMilli()
	recs := []wtrace.Record{{T: t0, K: wtrace.KindPolicy, Policy: &wtrace.Policy{}},
		{T: t0, K: wtrace.KindRunner, Runner: 1, Tenant: 1, CPUs: 1},
		{T: t0, K: wtrace.KindNode, Node: 1, CPUs: 1, State: "ready"},
		{T: t0 + 990, K: wtrace.KindAsk, Adm: 1},
		{T: t0 + 1000, K: wtrace.KindAnswer, Adm: 1, OK: true},
		{T: t0 + 1001, K: wtrace.KindSubmit, Job: 1, Runner: 1, Adm: 1},
		{T: t0 + 1001, K: wtrace.KindQueue, Job: 1, Runner: 1, Queued: 0, Pending: 1},
		{T: t0 + 1002, K: wtrace.KindStart, Job: 1, Node: 1},
		{T: t0 + 20_900, K: wtrace.KindNode, Node: 1, CPUs: 1, State: "ready"}}
	w, err := FromTrace(wtrace.Header{Start: t0}, recs)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(t.Context(), w, Options{})
	if err != nil {
		t.Fatal(err)
	}
	tr, in := rep.Sides[0], rep.Sides[1]
	if tr.Util < 0.9 || abs(in.Util-tr.Util) > 0.005 {
		t.Errorf("utilization: trace %.2f%%, replay %.2f%%; want about 95%% both", 100*tr.Util, 100*in.Util)
	}
}
