package demo

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/gitlabfake"
	"pgregory.net/rapid"
)

var states = []gitlabfake.JobState{gitlabfake.StateCreated, gitlabfake.StatePending, gitlabfake.StateRunning,
	gitlabfake.StateSuccess, gitlabfake.StateFailed, gitlabfake.StateCanceled, gitlabfake.StateSkipped}

// genRow draws a job row for tenant/id with any consistent-enough state.
func genRow(t *rapid.T, tenant string, id int64) JobRow {
	r := JobRow{Tenant: tenant, Name: "j", Stage: "test", GitLabID: id,
		State:    rapid.SampledFrom(states).Draw(t, "state"),
		HubState: rapid.SampledFrom([]string{"", HubQueued, HubStarting, HubRunning, HubFinished}).Draw(t, "hub"),
		HubStage: rapid.SampledFrom([]string{"", "step_script"}).Draw(t, "stage"),
		Node:     rapid.SampledFrom([]string{"", "node-1", "node-2"}).Draw(t, "node"),
	}
	r.Pending = time.Duration(rapid.Int64Range(0, 10).Draw(t, "pending")) * time.Second
	r.Started = time.Duration(rapid.Int64Range(0, 10).Draw(t, "started")) * time.Second
	r.Finished = time.Duration(rapid.Int64Range(0, 10).Draw(t, "finished")) * time.Second
	r.WaitSince = time.Duration(rapid.Int64Range(0, 10).Draw(t, "since")) * time.Second
	return r
}

func genSnapshot(t *rapid.T, label string) Snapshot {
	n := rapid.IntRange(0, 12).Draw(t, label+"-n")
	s := Snapshot{Elapsed: time.Duration(rapid.Int64Range(0, 20).Draw(t, label+"-elapsed")) * time.Second}
	for i := 0; i < n; i++ {
		s.Jobs = append(s.Jobs, genRow(t, rapid.SampledFrom([]string{"web", "data"}).Draw(t, "tenant"), int64(1000+i)))
	}
	s.Sort()
	return s
}

// TestRenderProperties checks invariants of the renderer over random
// snapshots: nothing is reported between a snapshot and itself; each job
// that ended between two snapshots is reported exactly once; the summary
// has one row per job and totals that add up.
func TestRenderProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cur := genSnapshot(t, "cur")
		if ev := Events(cur, cur); len(ev) != 0 {
			t.Fatalf("Events(s, s) = %q, want nothing", ev)
		}
		// prev: the same jobs, each maybe earlier in its life.
		prev := Snapshot{Elapsed: cur.Elapsed}
		for _, j := range cur.Jobs {
			o := j
			if rapid.Bool().Draw(t, "earlier") {
				o.State, o.Started = gitlabfake.StatePending, 0
			}
			prev.Jobs = append(prev.Jobs, o)
		}
		ended := 0
		for i, j := range cur.Jobs {
			if j.Done() && !prev.Jobs[i].Done() {
				ended++
			}
		}
		reported := 0
		for _, l := range Events(prev, cur) {
			for _, j := range cur.Jobs {
				if j.Done() && strings.Contains(l, " "+j.Result()) && strings.HasPrefix(l, j.Tenant+"/"+j.Name+" #") {
					reported++
					break
				}
			}
		}
		if reported != ended {
			t.Fatalf("%d jobs ended, %d end lines in %q", ended, reported, Events(prev, cur))
		}
		var b bytes.Buffer
		if err := Summary(&b, cur); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
		if len(lines) != len(cur.Jobs)+2 {
			t.Fatalf("summary has %d lines for %d jobs:\n%s", len(lines), len(cur.Jobs), b.String())
		}
		var n, ok, failed, other int
		if _, err := fmt.Sscanf(lines[len(lines)-1], "%d jobs: %d succeeded, %d failed, %d other", &n, &ok, &failed, &other); err != nil ||
			n != len(cur.Jobs) || ok+failed+other != n {
			t.Fatalf("totals line %q (err %v) for %d jobs", lines[len(lines)-1], err, len(cur.Jobs))
		}
	})
}
