package testfleet_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/testfleet"
	"github.com/vk-ci/vk/internal/testfleet/fleettest"
	"github.com/vk-ci/vk/node/journal"
)

// soakReport is what an HA soak measured.
type soakReport struct {
	jobs, lost, twice, bad int
	unrun                  int // succeeded in GitLab, yet no journal records a run
	handed                 int // GitLab's 201s to job requests
	faults                 map[string]int
	failover               []time.Duration
	fenced                 int64 // writes the deposed leaders' stores refused
	revived                int   // instances restarted after exiting by themselves
	ops                    int
	checker                time.Duration
}

func (r soakReport) String() string {
	var worst, sum time.Duration
	for _, d := range r.failover {
		sum += d
		worst = max(worst, d)
	}
	mean := time.Duration(0)
	if len(r.failover) > 0 {
		mean = sum / time.Duration(len(r.failover))
	}
	return fmt.Sprintf("HA soak report: jobs %d, lost %d, run twice %d, not in any journal %d, bad traces %d, handed out by GitLab %d; faults %v; "+
		"failovers %d (mean %v, worst %v); fenced writes refused %d; instances restarted after exiting by themselves %d; client-API operations checked %d in %v",
		r.jobs, r.lost, r.twice, r.unrun, r.bad, r.handed, r.faults, len(r.failover), mean.Round(time.Millisecond),
		worst.Round(time.Millisecond), r.fenced, r.revived, r.ops, r.checker.Round(time.Millisecond))
}

// journalRuns counts, per GitLab job, the runs the nodes' journals
// record; a run of a hub job the recorder cannot name is an error.
func (s *haSoak) journalRuns(rec *historyRecorder) map[int64]int {
	rec.mapJobs(s.ctx)
	runs := map[int64]int{}
	for _, n := range s.f.Nodes() {
		ran, accepted, err := n.JournalRuns()
		if err != nil {
			s.t.Errorf("node %s journal: %v", n.Name, err)
			continue
		}
		if accepted >= journal.KeepRecorded {
			s.t.Errorf("node %s journal holds %d jobs: it may have dropped older ones, so runs cannot be counted", n.Name, accepted)
		}
		for _, id := range ran {
			g, ok := rec.gitlabJob(id)
			if !ok {
				s.t.Errorf("node %s journal records a run of hub job %s, which no hub record names", n.Name, id)
				continue
			}
			runs[g]++
		}
	}
	return runs
}

// report waits for every pipeline, checks every job and gathers the
// numbers.
func (s *haSoak) report(tn *testfleet.Tenant, rec *historyRecorder, pls []gitlabfake.Pipeline) soakReport {
	t := s.t
	var r soakReport
	var states []map[string]gitlabfake.JobState
	// A job that has not ended 5 minutes after the last pipeline came is
	// lost: counted below (not success), and the report and the history
	// check still run.
	wctx, cancel := context.WithTimeout(s.ctx, 5*time.Minute)
	defer cancel()
	for _, pl := range pls {
		st, err := tn.WaitFinished(wctx, pl)
		if err != nil {
			t.Error(err)
			st = map[string]gitlabfake.JobState{}
			for name, id := range pl.Jobs {
				st[name] = tn.GitLab.JobState(id)
			}
		}
		states = append(states, st)
	}
	runs := s.journalRuns(rec)
	for i, pl := range pls {
		// A trace that is not the hub's output byte for byte is a bad
		// trace, counted once per job with the check below.
		bad := map[int64]bool{}
		mis, _ := fleettest.TraceMismatches(context.WithoutCancel(s.ctx), tn, pl)
		for _, m := range mis {
			bad[m.Job] = true
			t.Error(m.What)
		}
		for name, id := range pl.Jobs {
			r.jobs++
			tr := tn.GitLab.Trace(id)
			switch n := runs[id]; {
			case states[i][name] != gitlabfake.StateSuccess:
				r.lost++
				ji, _ := tn.GitLab.Job(id)
				t.Errorf("%s #%d: %s (%s), want success; trace:\n%s", name, id, states[i][name], ji.FailureReason, tr)
			case n == 0:
				r.unrun++
				t.Errorf("%s #%d: succeeded, yet no node's journal records a run of it", name, id)
			case n > 1:
				r.twice++
				t.Errorf("%s #%d: the nodes' journals record %d runs, want 1", name, id, n)
			case bytes.Count(tr, []byte("Running with vk")) != 1 || !bytes.Contains(tr, []byte("Job succeeded")):
				bad[id] = true
				t.Errorf("%s #%d: trace is not one whole run:\n%s", name, id, tr)
			}
		}
		r.bad += len(bad)
	}
	// Counted, not read from the request log: a 5-minute soak makes more
	// GitLab requests than the log keeps.
	r.handed = tn.GitLab.Answered(gitlabfake.RouteJobRequest, http.StatusCreated)
	if r.handed != r.jobs {
		t.Errorf("GitLab handed out %d jobs for %d", r.handed, r.jobs)
	}
	s.mu.Lock()
	r.faults, r.failover, r.revived = s.injected, s.failover, s.revived
	s.mu.Unlock()
	r.fenced = s.f.Hub().FencedRefused() + s.f.Standby().FencedRefused()
	return r
}
