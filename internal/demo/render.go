package demo

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/vk-ci/vk/internal/gitlabfake"
)

// Hub job states as the hub's store and JobView name them.
const (
	HubQueued   = "queued"
	HubStarting = "starting"
	HubRunning  = "running"
	HubFinished = "finished"
)

// JobRow is one job as the demo shows it: GitLab's view joined with the
// hub's. Times are offsets from the demo's start; zero means "not yet".
type JobRow struct {
	// Tenant, Name and Stage identify the job; GitLabID is GitLab's job ID.
	Tenant   string
	Name     string
	Stage    string
	GitLabID int64
	// State is GitLab's state of the job.
	State gitlabfake.JobState
	// HubState is the hub's state (queued, starting, running, finished);
	// "" while the hub has no job for it (not taken from GitLab yet, or
	// being submitted).
	HubState string
	// HubStage is the stage the node last reported ("" before the first:
	// for a running job, accepted but not started yet).
	HubStage string
	// Node is the name of the node the job was placed on; "" before.
	Node string
	// Pending is when the job became pending in GitLab; Started when its
	// first stage began on a node; Finished when GitLab saw it end.
	Pending, Started, Finished time.Duration
	// Failure is GitLab's failure_reason; "" unless failed.
	Failure string
	// WaitSince is when the job's current [JobRow.WaitReason] began.
	WaitSince time.Duration
	// TracePath is where the demo wrote the job's trace; "" before.
	TracePath string
}

// MinWaitShown is how long a wait must last before [Events] reports it, so
// the instants between two states (accepted, not yet started) are not
// mistaken for waits.
const MinWaitShown = 300 * time.Millisecond

// waitShown reports whether r's wait reason is old enough to show at
// elapsed.
func (r JobRow) waitShown(elapsed time.Duration) bool {
	return r.WaitReason() != "" && elapsed-r.WaitSince >= MinWaitShown
}

// Done reports whether GitLab considers the job ended.
func (r JobRow) Done() bool { return r.State.Finished() }

// Wait returns how long the job waited between pending in GitLab and its
// start on a node; 0 when it never started.
func (r JobRow) Wait() time.Duration {
	if r.Started == 0 || r.Pending == 0 || r.Started < r.Pending {
		return 0
	}
	return r.Started - r.Pending
}

// RunTime returns how long the job ran on its node; 0 when it never
// started or has not ended.
func (r JobRow) RunTime() time.Duration {
	if r.Started == 0 || r.Finished == 0 || r.Finished < r.Started {
		return 0
	}
	return r.Finished - r.Started
}

// WaitReason says, in an operator's words, why the job is not running,
// from what GitLab and the hub show; "" when it runs or ended.
func (r JobRow) WaitReason() string {
	switch r.State {
	case gitlabfake.StateCreated:
		return "waiting for earlier stages"
	case gitlabfake.StatePending:
		return "pending in GitLab: its runner holds no reservation yet"
	case gitlabfake.StateRunning, gitlabfake.StateCanceling:
	default:
		return ""
	}
	switch r.HubState {
	case "":
		return "taken from GitLab, being submitted to the hub"
	case HubQueued:
		return "queued on the hub: no node has room"
	case HubStarting:
		return "starting on " + r.Node
	case HubRunning:
		if r.HubStage == "" {
			return "accepted by " + r.Node + ", waiting in its ledger for room"
		}
	}
	return ""
}

// Result is the job's outcome for the summary: "success", "failed
// (<reason>)", or GitLab's state while it has not ended.
func (r JobRow) Result() string {
	switch {
	case r.State == gitlabfake.StateFailed && r.Failure != "":
		return "failed (" + r.Failure + ")"
	default:
		return string(r.State)
	}
}

// Snapshot is the demo's picture of every job at one moment.
type Snapshot struct {
	// Elapsed is the time since the demo started.
	Elapsed time.Duration
	// Jobs holds every job, ordered by tenant then GitLab ID (see [Snapshot.Sort]).
	Jobs []JobRow
}

// Sort orders Jobs by tenant, then GitLab ID.
func (s *Snapshot) Sort() {
	sort.Slice(s.Jobs, func(i, j int) bool {
		a, b := s.Jobs[i], s.Jobs[j]
		if a.Tenant != b.Tenant {
			return a.Tenant < b.Tenant
		}
		return a.GitLabID < b.GitLabID
	})
}

// Done reports whether every job has ended.
func (s Snapshot) Done() bool {
	for _, j := range s.Jobs {
		if !j.Done() {
			return false
		}
	}
	return len(s.Jobs) > 0
}

// StatusLine is one line summing up the fleet: jobs by GitLab state per
// tenant, and per node the jobs it holds (placed and not finished there).
//
//	[ 12.3s] data: 2 pending, 3 running, 4 done | web: … | nodes: node-1 3, node-2 1
func StatusLine(s Snapshot) string {
	// running counts the jobs running on a node; reporting those GitLab
	// still shows running whose node has finished them (their last trace
	// and result are on the way).
	type counts struct{ waiting, pending, running, reporting, done int }
	by := map[string]*counts{}
	var tenants []string
	nodes := map[string]int{}
	for _, j := range s.Jobs {
		c := by[j.Tenant]
		if c == nil {
			c = &counts{}
			by[j.Tenant] = c
			tenants = append(tenants, j.Tenant)
		}
		switch {
		case j.Done():
			c.done++
		case j.State == gitlabfake.StateCreated:
			c.waiting++
		case j.State == gitlabfake.StatePending:
			c.pending++
		case j.HubState == HubFinished:
			c.reporting++
		default:
			c.running++
			if j.Node != "" {
				nodes[j.Node]++ // on the node now (not just reporting to GitLab)
			}
		}
	}
	sort.Strings(tenants)
	var b strings.Builder
	fmt.Fprintf(&b, "[%6s]", fmtDur(s.Elapsed))
	for i, t := range tenants {
		c := by[t]
		if i > 0 {
			b.WriteString(" |")
		}
		fmt.Fprintf(&b, " %s: %d created, %d pending, %d running", t, c.waiting, c.pending, c.running)
		if c.reporting > 0 {
			fmt.Fprintf(&b, ", %d reporting", c.reporting)
		}
		fmt.Fprintf(&b, ", %d done", c.done)
	}
	if len(nodes) > 0 {
		names := make([]string, 0, len(nodes))
		for n := range nodes {
			names = append(names, n)
		}
		sort.Strings(names)
		b.WriteString(" | nodes:")
		for i, n := range names {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, " %s %d", n, nodes[n])
		}
	}
	return b.String()
}

// Events lists what changed between prev and cur, one line per job
// change, in cur's order: started on a node, waiting (with the reason,
// once it lasted [MinWaitShown]), ended.
func Events(prev, cur Snapshot) []string {
	type key struct {
		tenant string
		id     int64
	}
	old := make(map[key]JobRow, len(prev.Jobs))
	for _, j := range prev.Jobs {
		old[key{j.Tenant, j.GitLabID}] = j
	}
	var out []string
	for _, j := range cur.Jobs {
		o, seen := old[key{j.Tenant, j.GitLabID}]
		id := fmt.Sprintf("%s/%s #%d", j.Tenant, j.Name, j.GitLabID)
		switch {
		case j.Done() && (!seen || !o.Done()):
			line := fmt.Sprintf("%-28s %s", id, j.Result())
			if j.Node != "" {
				line += " on " + j.Node
			}
			if rt := j.RunTime(); rt > 0 {
				line += " after " + fmtDur(rt)
			}
			out = append(out, line)
		case j.Done():
		case j.Started != 0 && (!seen || o.Started == 0):
			out = append(out, fmt.Sprintf("%-28s running on %s (waited %s)", id, j.Node, fmtDur(j.Wait())))
		default:
			shownBefore := seen && o.WaitReason() == j.WaitReason() && o.waitShown(prev.Elapsed)
			if j.State != gitlabfake.StateCreated && j.waitShown(cur.Elapsed) && !shownBefore {
				out = append(out, fmt.Sprintf("%-28s %s", id, j.WaitReason()))
			}
		}
	}
	return out
}

// Summary writes the end-of-run table: per job its tenant, stage, node,
// wait, run time and result; then totals.
func Summary(w io.Writer, s Snapshot) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tTENANT\tSTAGE\tNODE\tWAIT\tRUN\tRESULT")
	ok, failed, other := 0, 0, 0
	for _, j := range s.Jobs {
		node := j.Node
		if node == "" {
			node = "-"
		}
		fmt.Fprintf(tw, "%s #%d\t%s\t%s\t%s\t%s\t%s\t%s\n", j.Name, j.GitLabID, j.Tenant, j.Stage, node,
			fmtDur(j.Wait()), fmtDur(j.RunTime()), j.Result())
		switch j.State {
		case gitlabfake.StateSuccess:
			ok++
		case gitlabfake.StateFailed:
			failed++
		default:
			other++
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d jobs: %d succeeded, %d failed, %d other, in %s\n", len(s.Jobs), ok, failed, other, fmtDur(s.Elapsed))
	return err
}

// fmtDur prints d rounded to a tenth of a second ("1.2s", "-" for zero).
func fmtDur(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1fs", d.Round(100*time.Millisecond).Seconds())
}
