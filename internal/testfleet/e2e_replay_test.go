package testfleet_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/hub/wtrace"
	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/testfleet"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/sim/replay"
)

// TestReplayFleetTrace records the workload trace of a real fleet — hub,
// node and relays against the fake GitLab — while two tenants of equal
// weight share one node of four slots with a backlog of twenty jobs each,
// and replays it.
//
// The order is the workload's, not message timing's: light's pipeline
// comes first and heavy's only once GitLab has handed light's first four
// jobs out (they hold the node's four slots), so heavy waits for light's
// first jobs to end, then the two share the node evenly. The trace is
// exported from the running hub once 24 jobs have ended, while GitLab
// still holds pending jobs of both tenants: the replay's window ends with
// that hidden backlog (the runners' last queue sizes).
//
// Under the policy in force the replay reproduces the trace: utilization
// within 3 points, each tenant's wait p50 and p95 within 20 % (waits under
// replay.MinWait count as equal), and every job's waits (the one size
// class) within 20 %. Under a candidate that triples heavy's weight,
// heavy is served first: its waits fall and, drawing on its hidden
// backlog, its share of the vCPU·s run rises toward its new weight share
// (0.75) by at least 5 points. Arrivals are GitLab's own (time in queue,
// carried from the relay into the trace).
//
// spec: BS-18, BS-06
func TestReplayFleetTrace(t *testing.T) {
	env := client.Envelope{CPUs: 1, Mem: 256 << 20, Disk: 1 << 30}
	f := newFleet(t, testfleet.Options{
		Nodes: []testfleet.NodeSpec{{CPUs: 4, Mem: 4 << 30, MaxConcurrency: 4}},
		Tenants: []testfleet.TenantSpec{
			{Name: "light", Weight: 1, Envelope: env, RequestConcurrency: 4, Concurrent: 8},
			{Name: "heavy", Weight: 1, Envelope: env, RequestConcurrency: 4, Concurrent: 8},
		},
		Policy: admin.Policy{BusySecs: 600, BackoffInitialSecs: 1, BackoffMaxSecs: 1},
	})
	ctx := timeout(t, 3*time.Minute)
	const perTenant, slots, cutAfter = 20, 4, 24
	// The export's cut: the state in force then (policy, runners, the
	// ready node) opens the trace, and the window is the contest alone.
	since := time.Now()
	lengths := []string{"2.5", "4", "3", "5", "3.5"}
	pls := map[string]gitlabfake.Pipeline{}
	for _, name := range []string{"light", "heavy"} {
		tn := f.Tenant(name)
		var jobs []gitlabfake.JobSpec
		for i := range perTenant {
			jobs = append(jobs, gitlabfake.JobSpec{Name: fmt.Sprintf("j%02d", i), Stage: "test", Script: []string{"sleep " + lengths[i%len(lengths)]}})
		}
		pl, err := tn.CreatePipeline("acme/"+name, readme, gitlabfake.PipelineSpec{Jobs: jobs})
		if err != nil {
			t.Fatal(err)
		}
		pls[name] = pl
		if name == "light" {
			// heavy's pipeline waits until light's jobs hold every slot
			if err := waitJobs(ctx, tn, pl, slots, gitlabfake.StateRunning, gitlabfake.StateSuccess); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The trace writer runs behind the hub: export from the running hub
	// until cutAfter jobs' ends are on disk.
	dir := wtrace.Config{}.WithDefaults(f.Hub().StateDir()).Dir
	var trace []byte
	err := waitFor(ctx, fmt.Sprintf("%d jobs' ends in the trace", cutAfter), func() (bool, error) {
		var buf bytes.Buffer
		if err := wtrace.Export(dir, since, &buf); err != nil {
			return false, err
		}
		trace = buf.Bytes()
		_, recs, err := wtrace.ReadAll(bytes.NewReader(trace))
		ends := 0
		for _, r := range recs {
			if r.K == wtrace.KindEnd && r.Reason == "finished" {
				ends++
			}
		}
		return err == nil && ends >= cutAfter, err
	})
	if err != nil {
		t.Fatal(err)
	}
	// GitLab still holds work of both (pending now, so pending at the cut)
	for name, pl := range pls {
		if n := countJobs(f.Tenant(name), pl, gitlabfake.StatePending); n == 0 {
			t.Fatalf("%s has no pending job left after the cut: the trace would end without its backlog", name)
		}
	}
	if os.Getenv("VK_REPLAY_KEEP") != "" { // for docs/sim.md
		_ = os.WriteFile(os.Getenv("VK_REPLAY_KEEP"), trace, 0o600)
	}
	h, recs, err := wtrace.ReadAll(bytes.NewReader(trace))
	if err != nil {
		t.Fatal(err)
	}
	w, err := replay.FromTrace(h, recs)
	if err != nil {
		t.Fatal(err)
	}
	cand, warns := replay.Candidate(w.Policy, admin.Policy{BusySecs: 600, BackoffInitialSecs: 1, BackoffMaxSecs: 1,
		Tenants: map[string]admin.Tenant{"light": {Weight: 1}, "heavy": {Weight: 3}}})
	if len(warns) > 0 {
		t.Fatalf("candidate warnings: %v", warns)
	}
	rep, err := replay.Run(ctx, w, replay.Options{Name: "fleet", Candidate: cand})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := rep.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", out.String())
	checkReplayFleet(t, w, rep)
}

// checkReplayFleet asserts TestReplayFleetTrace's report: hidden backlog
// of both tenants, calibration, and the candidate's move toward heavy.
func checkReplayFleet(t *testing.T, w *replay.Workload, rep *replay.Report) {
	t.Helper()
	idx := map[string]int{}
	for i, n := range rep.Tenants {
		idx[n] = i
	}
	heavy, ok := idx["heavy"]
	if _, lok := idx["light"]; !ok || !lok {
		t.Fatalf("tenants %v, want heavy and light", rep.Tenants)
	}
	tenantOf := map[uint64]uint64{}
	for _, r := range w.Runners {
		tenantOf[r.ID] = r.Tenant
	}
	hidden := map[uint64]int{}
	for _, j := range w.Jobs {
		if j.Hidden {
			hidden[tenantOf[j.Runner]]++
		}
	}
	if len(hidden) != 2 {
		t.Errorf("hidden jobs by tenant ID %v (%d in all): want GitLab's backlog of both at the end of the window", hidden, w.Hidden)
	}
	tr, in, c := rep.Sides[0], rep.Sides[1], rep.Sides[2]
	cal := rep.Calibrate()
	t.Logf("calibration (%v): utilization %.1f points, wait p50 off %.0f %%, p95 off %.0f %%", rep.Tenants, cal.UtilPoints, pcts(cal.P50), pcts(cal.P95))
	if err := cal.Within(3, 0.2, rep.Tenants); err != nil {
		t.Errorf("replay under the policy in force: %v", err)
	}
	if len(tr.Classes) != 1 || len(in.Classes) != 1 {
		t.Fatalf("size classes %+v / %+v, want one", tr.Classes, in.Classes)
	}
	for _, q := range []struct {
		what      string
		want, got time.Duration
	}{{"p50", tr.Classes[0].Wait.P50, in.Classes[0].Wait.P50}, {"p95", tr.Classes[0].Wait.P95, in.Classes[0].Wait.P95}} {
		if off := (q.got - q.want).Abs(); off > max(q.want, replay.MinWait)/5 {
			t.Errorf("replay under the policy in force: every job's wait %s %v, the trace's %v: more than 20 %% off", q.what, q.got, q.want)
		}
	}
	// heavy's share moves toward its new weight share: up by 5 points at
	// least, and nearer 0.75 than under the policy in force
	rise := c.Shares[heavy] - in.Shares[heavy]
	t.Logf("heavy under weight 3: share %.3f → %.3f (%+.1f points), wait p50 %v → %v", in.Shares[heavy], c.Shares[heavy], 100*rise, in.Waits[heavy].P50, c.Waits[heavy].P50)
	if c.Weights[heavy] != 0.75 || rise < 0.05 || abs(c.Shares[heavy]-0.75) >= abs(in.Shares[heavy]-0.75) || c.Waits[heavy].P50 >= in.Waits[heavy].P50 {
		t.Errorf("heavy under weight 3: weight share %.2f, share %.3f → %.3f, wait p50 %v → %v; want 0.75, a share 5 points higher and nearer 0.75, a shorter wait",
			c.Weights[heavy], in.Shares[heavy], c.Shares[heavy], in.Waits[heavy].P50, c.Waits[heavy].P50)
	}
}

// countJobs counts pl's jobs in one of states in the tenant's GitLab.
func countJobs(tn *testfleet.Tenant, pl gitlabfake.Pipeline, states ...gitlabfake.JobState) int {
	n := 0
	for _, id := range pl.Jobs {
		st := tn.GitLab.JobState(id)
		for _, s := range states {
			if st == s {
				n++
				break
			}
		}
	}
	return n
}

// waitJobs waits until at least n of pl's jobs are in one of states,
// waking on every change the tenant's fake GitLab reports.
func waitJobs(ctx context.Context, tn *testfleet.Tenant, pl gitlabfake.Pipeline, n int, states ...gitlabfake.JobState) error {
	for {
		ch := tn.GitLab.Changed()
		got := countJobs(tn, pl, states...)
		if got >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d of %s's jobs in %v (%d): %w", n, tn.Spec.Name, states, got, ctx.Err())
		case <-ch:
		}
	}
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}

func pcts(v []float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = 100 * x
	}
	return out
}
