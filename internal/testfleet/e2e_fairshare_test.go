package testfleet_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/testfleet"
	"github.com/vk-ci/vk/proto/client"
)

// TestFairShare has two tenants of weights 1 and 3 compete for one node
// with four slots, each with a backlog of jobs: while both have work
// waiting, the node's slots are shared 1:3 (each tenant's share of the
// jobs' run time within 10% of its weight's).
//
// The contest starts level, as it does on a busy fleet: both runners have
// taken a job lately (so neither is a probe, ARB-18/19) and neither is
// backed off (ARB-20) when the room opens. Without that start the test
// measures the spec's probe and backoff rules instead of the fair share:
// after a quiet spell at most one probe is out fleet-wide, the first
// tenant whose probe brings a job stops being a probe and its other
// requests take every free slot while the other tenant still waits its
// probe turn, and with no preemption (ARB-10) it keeps them for a job's
// length. docs/capacity-policy.md ("Fair share after a quiet spell") says so
// for operators.
//
// spec: ARB-09, ARB-10
func TestFairShare(t *testing.T) {
	env := client.Envelope{CPUs: 1, Mem: 256 << 20, Disk: 1 << 30}
	f := newFleet(t, testfleet.Options{
		Nodes: []testfleet.NodeSpec{{CPUs: 4, Mem: 4 << 30, MaxConcurrency: 4}},
		Tenants: []testfleet.TenantSpec{
			{Name: "light", Weight: 1, Envelope: env, RequestConcurrency: 4, Concurrent: 8},
			{Name: "heavy", Weight: 3, Envelope: env, RequestConcurrency: 4, Concurrent: 8},
		},
		// Busy for the whole test once each has run its warm-up job.
		Policy: admin.Policy{BusySecs: 600, BackoffInitialSecs: 1, BackoffMaxSecs: 1},
	})
	ctx := timeout(t, 3*time.Minute)
	nd := f.Nodes()[0]

	// 1. Warm-up: one job per tenant, so both runners are busy (not
	// probes) when the contest starts.
	for _, tn := range f.Tenants() {
		pl, err := tn.CreatePipeline("acme/warm-"+tn.Spec.Name, readme, oneJob("warm", "true"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tn.WaitFinished(ctx, pl); err != nil {
			t.Fatal(err)
		}
	}
	// 2. Close the node (ceiling 0, OPS-02) and let the reservations the
	// relays hold for their GitLab requests go.
	if err := f.Hub().Admin().SetCeiling(ctx, nd.ID, 0); err != nil {
		t.Fatal(err)
	}
	if err := nd.WaitHubState(ctx, func(n admin.Node) bool { return n.Reservations == 0 && n.Jobs == 0 }); err != nil {
		t.Fatal(err)
	}

	// 3. The backlogs. Each job records when its script starts and ends
	// on the node; with equal jobs, the script time a tenant gets is its
	// share of the slots. Lengths vary, as real jobs' do: equal jobs
	// started together end together, and slots freed in one instant are
	// granted in an order that says more about settle timing than about
	// shares.
	runs := filepath.Join(t.TempDir(), "runs")
	backlog := map[string]int{"light": 7, "heavy": 21}
	lengths := []string{"2.5", "4", "3", "5", "3.5"}
	pls := map[string]gitlabfake.Pipeline{}
	for _, tn := range f.Tenants() {
		var jobs []gitlabfake.JobSpec
		for i := 0; i < backlog[tn.Spec.Name]; i++ {
			jobs = append(jobs, gitlabfake.JobSpec{Name: fmt.Sprintf("j%02d", i), Stage: "test",
				Variables: []gitlabfake.Variable{{Key: "RUNS", Value: runs, Public: true}, {Key: "TENANT", Value: tn.Spec.Name, Public: true}},
				Script:    []string{fmt.Sprintf(`s=$(date +%%s%%N); sleep %s; echo "$TENANT $s $(date +%%s%%N)" >> "$RUNS"`, lengths[i%len(lengths)])}})
		}
		pl, err := tn.CreatePipeline("acme/"+tn.Spec.Name, readme, gitlabfake.PipelineSpec{Jobs: jobs})
		if err != nil {
			t.Fatal(err)
		}
		pls[tn.Spec.Name] = pl
	}

	// 4. Wait until every request loop of both runners waits at the hub
	// for room, none of them backed off or gated as a probe, then open
	// the node: the contest starts level.
	if err := waitLevelStart(ctx, f, 4); err != nil {
		t.Fatal(err)
	}
	if err := f.Hub().Admin().SetCeiling(ctx, nd.ID, admin.NoCeiling); err != nil {
		t.Fatal(err)
	}

	for _, tn := range f.Tenants() {
		states, err := tn.WaitFinished(ctx, pls[tn.Spec.Name])
		if err != nil {
			t.Fatal(err)
		}
		for name, st := range states {
			if st != gitlabfake.StateSuccess {
				t.Fatalf("%s/%s = %s", tn.Spec.Name, name, st)
			}
		}
	}
	data, err := os.ReadFile(runs)
	if err != nil {
		t.Fatal(err)
	}
	type span struct{ from, to int64 }
	spans := map[string][]span{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var name string
		var sp span
		if _, err := fmt.Sscanf(line, "%s %d %d", &name, &sp.from, &sp.to); err != nil {
			t.Fatalf("runs line %q: %v", line, err)
		}
		spans[name] = append(spans[name], sp)
	}
	// The window: from when both tenants have started a job to when the
	// first of them started its last one (its backlog is empty after).
	var start, end int64
	for name, n := range backlog {
		if len(spans[name]) != n {
			t.Fatalf("%s ran %d jobs, want %d", name, len(spans[name]), n)
		}
		first, last := spans[name][0].from, spans[name][0].from
		for _, sp := range spans[name] {
			first, last = min(first, sp.from), max(last, sp.from)
		}
		start = max(start, first)
		if end == 0 || last < end {
			end = last
		}
	}
	if end-start < int64(10*time.Second) {
		t.Fatalf("contention window of %v too short to measure (a tenant ran ahead of its share)", time.Duration(end-start))
	}
	// The timeline, for whoever reads a failure.
	var tl []string
	for name, ss := range spans {
		for _, sp := range ss {
			tl = append(tl, fmt.Sprintf("%7.2fs-%7.2fs %s", float64(sp.from-start)/1e9, float64(sp.to-start)/1e9, name))
		}
	}
	slices.Sort(tl)
	t.Logf("scripts (seconds from the window's start, which ends at %.2fs):\n%s", float64(end-start)/1e9, strings.Join(tl, "\n"))
	held := map[string]time.Duration{}
	var total time.Duration
	for name, ss := range spans {
		for _, sp := range ss {
			from, to := max(sp.from, start), min(sp.to, end)
			if to > from {
				held[name] += time.Duration(to - from)
				total += time.Duration(to - from)
			}
		}
	}
	for name, weight := range map[string]float64{"light": 1, "heavy": 3} {
		share := float64(held[name]) / float64(total)
		want := weight / 4
		t.Logf("%s: %.1f slot-seconds, share %.3f (fair %.3f) over %.1fs", name, held[name].Seconds(), share, want, time.Duration(end-start).Seconds())
		if share < want*0.9 || share > want*1.1 {
			t.Errorf("%s held %.3f of the slots, want %.3f ± 10%%", name, share, want)
		}
	}
}

// waitLevelStart waits until each tenant of f has perTenant tickets
// waiting at the hub, none of them held back by its runner's backoff or
// the probe rules (the hub's queue, as `vk-hub queue` shows it).
func waitLevelStart(ctx context.Context, f *testfleet.Fleet, perTenant int) error {
	var last []admin.Waiting
	for {
		q, err := f.Hub().Admin().Queue(ctx)
		if err != nil {
			return err
		}
		last = q
		count := map[string]int{}
		held := false
		for _, w := range q {
			if w.Kind != admin.WaitTicket {
				continue
			}
			if strings.Contains(w.Reason, "backed off") || strings.Contains(w.Reason, "probe") {
				held = true
			}
			count[w.Tenant]++
		}
		level := !held
		for _, tn := range f.Tenants() {
			level = level && count[tn.Spec.Name] == perTenant
		}
		if level {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("tickets never level (last queue %+v): %w", last, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
