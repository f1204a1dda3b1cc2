package demo

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vk-ci/vk/internal/gitlabfake"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if d := cmp.Diff(string(want), got); d != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", path, d)
	}
}

const s = time.Second

// fixture is a mid-run and an end-of-run snapshot of a small fleet.
func fixture() (mid, end Snapshot) {
	mid = Snapshot{Elapsed: 12300 * time.Millisecond, Jobs: []JobRow{
		{Tenant: "web", Name: "build", Stage: "build", GitLabID: 1, State: gitlabfake.StateSuccess, HubState: HubFinished, Node: "node-1", Pending: 100 * time.Millisecond, Started: 1200 * time.Millisecond, Finished: 4 * s},
		{Tenant: "web", Name: "test:unit-1", Stage: "test", GitLabID: 2, State: gitlabfake.StateRunning, HubState: HubRunning, HubStage: "step_script", Node: "node-1", Pending: 4 * s, Started: 5 * s},
		{Tenant: "web", Name: "test:big", Stage: "test", GitLabID: 3, State: gitlabfake.StateRunning, HubState: HubRunning, Node: "node-2", Pending: 4 * s, WaitSince: 12 * s},
		{Tenant: "web", Name: "test:broken", Stage: "test", GitLabID: 4, State: gitlabfake.StatePending, Pending: 4 * s, WaitSince: 12200 * time.Millisecond},
		{Tenant: "web", Name: "package", Stage: "deploy", GitLabID: 5, State: gitlabfake.StateCreated},
		{Tenant: "data", Name: "build", Stage: "build", GitLabID: 1, State: gitlabfake.StateRunning, HubState: HubQueued, Pending: 100 * time.Millisecond, WaitSince: 5 * s},
		{Tenant: "data", Name: "validate", Stage: "test", GitLabID: 2, State: gitlabfake.StateRunning, Pending: 200 * time.Millisecond, WaitSince: 4 * s},
	}}
	mid.Sort()
	end = Snapshot{Elapsed: 31 * s, Jobs: []JobRow{
		{Tenant: "web", Name: "build", Stage: "build", GitLabID: 1, State: gitlabfake.StateSuccess, HubState: HubFinished, Node: "node-1", Pending: 100 * time.Millisecond, Started: 1200 * time.Millisecond, Finished: 4 * s},
		{Tenant: "web", Name: "test:unit-1", Stage: "test", GitLabID: 2, State: gitlabfake.StateSuccess, HubState: HubFinished, Node: "node-1", Pending: 4 * s, Started: 5 * s, Finished: 7 * s},
		{Tenant: "web", Name: "test:big", Stage: "test", GitLabID: 3, State: gitlabfake.StateSuccess, HubState: HubFinished, Node: "node-2", Pending: 4 * s, Started: 9 * s, Finished: 11 * s},
		{Tenant: "web", Name: "test:broken", Stage: "test", GitLabID: 4, State: gitlabfake.StateFailed, Failure: "script_failure", HubState: HubFinished, Node: "node-2", Pending: 4 * s, Started: 13 * s, Finished: 14 * s},
		{Tenant: "web", Name: "package", Stage: "deploy", GitLabID: 5, State: gitlabfake.StateSuccess, HubState: HubFinished, Node: "node-1", Pending: 14 * s, Started: 15 * s, Finished: 16 * s},
		{Tenant: "data", Name: "build", Stage: "build", GitLabID: 1, State: gitlabfake.StateSuccess, HubState: HubFinished, Node: "node-2", Pending: 100 * time.Millisecond, Started: 2 * s, Finished: 5 * s},
		{Tenant: "data", Name: "validate", Stage: "test", GitLabID: 2, State: gitlabfake.StateFailed, Failure: "runner_system_failure", Pending: 200 * time.Millisecond, Finished: 30 * s},
	}}
	end.Sort()
	return mid, end
}

func TestStatusLineGolden(t *testing.T) {
	mid, end := fixture()
	golden(t, "status", StatusLine(Snapshot{})+"\n"+StatusLine(mid)+"\n"+StatusLine(end)+"\n")
}

func TestEventsGolden(t *testing.T) {
	mid, end := fixture()
	var b strings.Builder
	// mid2 is mid 0.5 s later, nothing changed: waits already shown are
	// not repeated; the pending one is now old enough to show.
	mid2 := mid
	mid2.Elapsed += 500 * time.Millisecond
	for _, step := range []struct{ prev, cur Snapshot }{{Snapshot{}, mid}, {mid, mid2}, {mid2, end}, {end, end}} {
		b.WriteString("--\n")
		for _, l := range Events(step.prev, step.cur) {
			b.WriteString(l + "\n")
		}
	}
	golden(t, "events", b.String())
}

func TestSummaryGolden(t *testing.T) {
	_, end := fixture()
	var b bytes.Buffer
	if err := Summary(&b, end); err != nil {
		t.Fatal(err)
	}
	golden(t, "summary", b.String())
}

func TestWaitReason(t *testing.T) {
	for _, tc := range []struct {
		name string
		row  JobRow
		want string
	}{
		{"created", JobRow{State: gitlabfake.StateCreated}, "waiting for earlier stages"},
		{"pending", JobRow{State: gitlabfake.StatePending}, "pending in GitLab: its runner holds no reservation yet"},
		{"submitting", JobRow{State: gitlabfake.StateRunning}, "taken from GitLab, being submitted to the hub"},
		{"queued", JobRow{State: gitlabfake.StateRunning, HubState: HubQueued}, "queued on the hub: no node has room"},
		{"starting", JobRow{State: gitlabfake.StateRunning, HubState: HubStarting, Node: "n1"}, "starting on n1"},
		{"ledger", JobRow{State: gitlabfake.StateRunning, HubState: HubRunning, Node: "n1"}, "accepted by n1, waiting in its ledger for room"},
		{"running", JobRow{State: gitlabfake.StateRunning, HubState: HubRunning, HubStage: "step_script", Node: "n1"}, ""},
		{"done", JobRow{State: gitlabfake.StateSuccess, HubState: HubFinished}, ""},
	} {
		if got := tc.row.WaitReason(); got != tc.want {
			t.Errorf("%s: WaitReason() = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestDurations(t *testing.T) {
	r := JobRow{Pending: 1 * s, Started: 3 * s, Finished: 7500 * time.Millisecond}
	if r.Wait() != 2*s || r.RunTime() != 4500*time.Millisecond {
		t.Errorf("Wait, RunTime = %v, %v; want 2s, 4.5s", r.Wait(), r.RunTime())
	}
	if (JobRow{Pending: s}).Wait() != 0 || (JobRow{Started: s}).RunTime() != 0 {
		t.Error("unstarted or unfinished jobs must report 0")
	}
	if fmtDur(0) != "-" || fmtDur(1249*time.Millisecond) != "1.2s" {
		t.Errorf("fmtDur: %q %q", fmtDur(0), fmtDur(1249*time.Millisecond))
	}
}

// "running" counts what runs on a node; a job GitLab still shows running
// after its node finished it is "reporting".
func TestStatusLineRunningOnNodes(t *testing.T) {
	s := Snapshot{Jobs: []JobRow{
		{Tenant: "web", Name: "a", State: gitlabfake.StateRunning, HubState: "running", Node: "n1"},
		{Tenant: "web", Name: "b", State: gitlabfake.StateRunning, HubState: HubFinished, Node: "n1"},
	}}
	got := StatusLine(s)
	if !strings.Contains(got, "web: 0 created, 0 pending, 1 running, 1 reporting, 0 done") || !strings.Contains(got, "nodes: n1 1") {
		t.Errorf("status line = %q", got)
	}
}
