package gitlabfake

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// JobState is a GitLab CI job status as Rails reports it in Job-Status.
//
//	created ──(earlier stages / needs succeed)──▶ pending ──(handed out)──▶ running ──▶ success | failed
//	   │                                             │   (two-phase: stays pending     │
//	   └──(a prerequisite failed)──▶ skipped         │    until PUT state=running)     └─(CancelJob graceful)─▶ canceling ──(final PUT)──▶ canceled
//	                                                 └──(CancelJob)──▶ canceled        └─(CancelJob hard)─▶ canceled
type JobState string

// Job states.
const (
	StateCreated   JobState = "created"
	StatePending   JobState = "pending"
	StateRunning   JobState = "running"
	StateSuccess   JobState = "success"
	StateFailed    JobState = "failed"
	StateCanceled  JobState = "canceled"
	StateCanceling JobState = "canceling"
	StateSkipped   JobState = "skipped"
)

// Finished reports whether st is terminal.
func (st JobState) Finished() bool {
	switch st {
	case StateSuccess, StateFailed, StateCanceled, StateSkipped:
		return true
	}
	return false
}

// JobSpec describes one job of a pipeline. Only Name is required.
type JobSpec struct {
	// Name is the job name (CI_JOB_NAME); unique within the pipeline.
	Name string
	// Stage is the job's stage; "" means "test". Stages run in the order
	// of PipelineSpec.Stages (or first appearance when that is nil).
	Stage string
	// Script becomes the "script" step; AfterScript the "after_script"
	// step (omitted when empty). Ignored when Steps is non-nil.
	Script      []string
	AfterScript []string
	// Steps, when non-nil, is sent verbatim instead of Script/AfterScript.
	Steps []Step
	// Variables are job-level variables, sent after the predefined ones.
	Variables []Variable
	Image     Image
	Services  []Image
	Artifacts []Artifact
	Cache     []Cache
	// Needs, when non-nil, lists the job names this job waits for
	// (a DAG); nil means "every job of every earlier stage".
	Needs []string
	// Dependencies, when non-nil, lists whose artifacts are passed in
	// dependencies[]; nil means the jobs this job waits for.
	Dependencies []string
	// Timeout is the job timeout (runner_info.timeout); 0 means 3600 s.
	Timeout time.Duration
	// AllowFailure lets later stages run when this job fails.
	AllowFailure bool
	// Response, when set, is a job response (as gitlab-runner's test
	// fixtures or a capture hold it) served in place of the rendered one,
	// every other field ignored but Name and Stage. Only what ties it to
	// this fake is replaced: id, token, git_info (this project's clone
	// URL, ref and commit) and job_info's id and project; everything
	// else, variables and steps included, is sent as given.
	Response json.RawMessage
}

// PipelineSpec describes a pipeline to create with [Server.CreatePipeline].
type PipelineSpec struct {
	// Ref is the branch; "" means the project's default branch.
	Ref string
	// Stages orders the stages; nil means order of first appearance in Jobs.
	Stages []string
	// Variables are pipeline-level variables.
	Variables []Variable
	Jobs      []JobSpec
}

// Pipeline identifies a created pipeline.
type Pipeline struct {
	// ID is the pipeline id (CI_PIPELINE_ID).
	ID int64
	// SHA is the commit the pipeline runs.
	SHA string
	// Jobs maps job name to job id.
	Jobs map[string]int64
}

type pipeline struct {
	id        int64
	project   *project
	ref, sha  string
	variables []Variable
	stages    []string
	jobs      []*job
}

// job is one job; all fields guarded by Server.mu.
type job struct {
	id         int64
	pipeline   *pipeline
	spec       JobSpec
	stageIdx   int
	token      string
	state      JobState
	waitingAck bool    // two-phase: assigned, still pending until PUT running
	runner     *runner // nil until handed out
	features   map[string]bool
	queuedAt   time.Time

	trace         []byte
	patches       []Patch
	updates       []Update
	artifacts     []StoredArtifact
	failureReason string
	exitCode      int
	mismatch      bool      // final checksum/bytesize disagreed with the stored trace
	firstFinalAt  time.Time // first final (success/failed) update, for the 202 backoff
}

func (j *job) archive() *StoredArtifact {
	for i := range j.artifacts {
		if j.artifacts[i].Type == "archive" {
			return &j.artifacts[i]
		}
	}
	return nil
}

// executing reports whether job-token calls are accepted (Ci::AuthJobFinder).
func (j *job) executing() bool { return j.state == StateRunning || j.state == StateCanceling }

// CreatePipeline creates a pipeline for the project at path (see
// [Server.CreateProject]) on spec.Ref's current head. First-stage jobs (and
// jobs with empty Needs) become pending at once and wake long-polling
// runners; later ones stay created until their prerequisites succeed.
func (s *Server) CreatePipeline(path string, spec PipelineSpec) (Pipeline, error) {
	if err := s.init(); err != nil {
		return Pipeline{}, err
	}
	s.mu.Lock()
	proj := s.projects[path]
	s.mu.Unlock()
	if proj == nil {
		return Pipeline{}, fmt.Errorf("%w: project %q", ErrNotFound, path)
	}
	ref := spec.Ref
	if ref == "" {
		ref = proj.defaultBranch
	}
	sha, err := s.revParse(proj, "refs/heads/"+ref)
	if err != nil {
		return Pipeline{}, err
	}
	stages := slices.Clone(spec.Stages)
	names := map[string]bool{}
	for i := range spec.Jobs {
		js := &spec.Jobs[i]
		if js.Name == "" {
			return Pipeline{}, fmt.Errorf("%w: job %d has no name", ErrInvalid, i)
		}
		if names[js.Name] {
			return Pipeline{}, fmt.Errorf("%w: duplicate job %q", ErrInvalid, js.Name)
		}
		names[js.Name] = true
		if js.Stage == "" {
			js.Stage = "test"
		}
		if spec.Stages == nil && !slices.Contains(stages, js.Stage) {
			stages = append(stages, js.Stage)
		}
	}
	for _, js := range spec.Jobs {
		if !slices.Contains(stages, js.Stage) {
			return Pipeline{}, fmt.Errorf("%w: job %q: unknown stage %q", ErrInvalid, js.Name, js.Stage)
		}
		for _, n := range append(slices.Clone(js.Needs), js.Dependencies...) {
			if !names[n] {
				return Pipeline{}, fmt.Errorf("%w: job %q needs unknown job %q", ErrInvalid, js.Name, n)
			}
		}
	}

	s.mu.Lock()
	s.nextPipelineID++
	pid := s.nextPipelineID
	s.mu.Unlock()
	// GitLab keeps refs/pipelines/<id> so runners can fetch exactly the
	// pipeline's commit with the refspec it sends; it exists before any
	// job of the pipeline can be handed out.
	if err := s.git(proj.dir, "update-ref", fmt.Sprintf("refs/pipelines/%d", pid), sha); err != nil {
		return Pipeline{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := &pipeline{id: pid, project: proj, ref: ref, sha: sha, variables: spec.Variables, stages: stages}
	out := Pipeline{ID: p.id, SHA: sha, Jobs: map[string]int64{}}
	now := s.now()
	for _, js := range spec.Jobs {
		s.nextJobID++
		j := &job{id: s.nextJobID, pipeline: p, spec: js, stageIdx: slices.Index(stages, js.Stage),
			token: newJobToken(), state: StateCreated, queuedAt: now}
		p.jobs = append(p.jobs, j)
		s.jobs[j.id] = j
		out.Jobs[js.Name] = j.id
	}
	s.pipelines[p.id] = p
	s.advanceLocked(p)
	return out, nil
}

// prerequisitesLocked lists the jobs j waits for.
func (s *Server) prerequisitesLocked(j *job) []*job {
	var out []*job
	for _, o := range j.pipeline.jobs {
		if o == j {
			continue
		}
		if j.spec.Needs != nil {
			if slices.Contains(j.spec.Needs, o.spec.Name) {
				out = append(out, o)
			}
		} else if o.stageIdx < j.stageIdx {
			out = append(out, o)
		}
	}
	return out
}

// dependenciesLocked lists the jobs whose artifacts j receives.
func (s *Server) dependenciesLocked(j *job) []*job {
	if j.spec.Dependencies == nil {
		return s.prerequisitesLocked(j)
	}
	var out []*job
	for _, o := range j.pipeline.jobs {
		if slices.Contains(j.spec.Dependencies, o.spec.Name) {
			out = append(out, o)
		}
	}
	return out
}

// advanceLocked moves created jobs whose prerequisites are done to pending
// (or skipped) and ticks runner queues when something became pending.
func (s *Server) advanceLocked(p *pipeline) {
	ticked := false
	for changed := true; changed; {
		changed = false
		for _, j := range p.jobs {
			if j.state != StateCreated {
				continue
			}
			ready, skip := true, false
			for _, pre := range s.prerequisitesLocked(j) {
				switch {
				case pre.state == StateSuccess:
				case pre.state == StateFailed && pre.spec.AllowFailure:
				case pre.state.Finished():
					skip = true
				default:
					ready = false
				}
			}
			switch {
			case skip && ready:
				j.state = StateSkipped
				changed = true
			case ready:
				j.state = StatePending
				j.queuedAt = s.now()
				ticked = true
			}
		}
	}
	if ticked {
		s.tickQueuesLocked()
	}
	s.notifyLocked()
}

// finishLocked moves j to a terminal state and lets its pipeline advance.
// The job token stops working from here on.
func (s *Server) finishLocked(j *job, st JobState) {
	j.state = st
	j.waitingAck = false
	s.advanceLocked(j.pipeline)
}

// queueLenLocked counts pending jobs not yet handed out.
func (s *Server) queueLenLocked() int {
	n := 0
	for _, j := range s.jobs {
		if j.state == StatePending && !j.waitingAck {
			n++
		}
	}
	return n
}
