package loop

import (
	"time"

	"github.com/vk-ci/vk/relay/state"
)

// JobObserver hears the moments of a job the relay's metrics measure
// (docs/metrics.md). Its methods are called from the job's goroutine and
// must not block.
type JobObserver interface {
	// JobStarted: a node accepted the job and GitLab was told it runs;
	// waited is the time since the job was taken from GitLab (its wait
	// on the hub for a node).
	JobStarted(runner string, waited time.Duration)
	// JobReported: GitLab took the job's final update; took is the time
	// since the job was taken. outcome is success or failed.
	JobReported(runner, outcome string, took time.Duration)
}

// Job outcomes as JobReported names them.
const (
	OutcomeSuccess = "success"
	OutcomeFailed  = "failed"
)

// Phases lists the phases a job record can be in, for the relay's job
// counts by phase.
var Phases = []state.Phase{state.PhaseTaken, state.PhaseSubmitted, state.PhaseCommitted, state.PhaseFailing, state.PhaseReported}

// JobPhases counts every runner's recorded jobs by phase (each runner
// listed, phases without jobs absent).
func (m *Manager) JobPhases() map[string]map[state.Phase]int {
	out := make(map[string]map[state.Phase]int, len(m.rs))
	for _, r := range m.rs {
		c := map[state.Phase]int{}
		for _, j := range r.Store.Jobs() {
			c[j.Phase]++
		}
		out[r.Name] = c
	}
	return out
}

func (m *Manager) observeStarted(r *runnerState, j state.Job) {
	if o := m.cfg.Observer; o != nil && !j.Taken.IsZero() {
		o.JobStarted(r.Name, max(m.clk.Now().Sub(j.Taken), 0))
	}
}

func (m *Manager) observeReported(r *runnerState, j state.Job, outcome string) {
	if o := m.cfg.Observer; o != nil && !j.Taken.IsZero() {
		o.JobReported(r.Name, outcome, max(m.clk.Now().Sub(j.Taken), 0))
	}
}
