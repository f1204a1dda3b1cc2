package gitlabfake

import (
	"cmp"
	"fmt"
	"slices"
)

// JobSummary is one job as a job list shows it.
type JobSummary struct {
	ID, PipelineID int64
	// Project is the project's path.
	Project     string
	Name, Stage string
	State       JobState
	// FailureReason and ExitCode as stored once the job failed.
	FailureReason string
	ExitCode      int
	// TraceBytes is the stored trace's length.
	TraceBytes int
}

// JobList returns every job, newest first.
func (s *Server) JobList() []JobSummary {
	if s.init() != nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]JobSummary, 0, len(s.jobs))
	for _, j := range s.jobs {
		out = append(out, JobSummary{ID: j.id, PipelineID: j.pipeline.id, Project: j.pipeline.project.path,
			Name: j.spec.Name, Stage: j.spec.Stage, State: j.state, FailureReason: j.failureReason,
			ExitCode: j.exitCode, TraceBytes: len(j.trace)})
	}
	slices.SortFunc(out, func(a, b JobSummary) int { return cmp.Compare(b.ID, a.ID) })
	return out
}

// RerunPipeline creates a new pipeline with the same project, ref,
// stages, variables and jobs as pipeline id, on the ref's current head.
func (s *Server) RerunPipeline(id int64) (Pipeline, error) {
	if err := s.init(); err != nil {
		return Pipeline{}, err
	}
	s.mu.Lock()
	p := s.pipelines[id]
	if p == nil {
		s.mu.Unlock()
		return Pipeline{}, fmt.Errorf("%w: pipeline %d", ErrNotFound, id)
	}
	path := p.project.path
	spec := PipelineSpec{Ref: p.ref, Stages: slices.Clone(p.stages), Variables: slices.Clone(p.variables)}
	for _, j := range p.jobs {
		spec.Jobs = append(spec.Jobs, j.spec)
	}
	s.mu.Unlock()
	return s.CreatePipeline(path, spec)
}
