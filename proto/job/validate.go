package job

import (
	"fmt"
	"strings"
)

// Validate checks the fields a node cannot run the job without: job and
// project IDs, token, repository URL, a positive timeout and trace limit,
// and the server URL. All problems are listed in one error wrapping
// ErrInvalid. It does not judge content the node interprets (images,
// scripts); the node refuses those itself.
func (j *CiJob) Validate() error {
	var errs []string
	if j.Job.ID <= 0 {
		errs = append(errs, "job.id missing")
	}
	if j.Job.ProjectID <= 0 {
		errs = append(errs, "job.project_id missing")
	}
	if j.Token == "" {
		errs = append(errs, "token missing")
	}
	if j.Sources.RepoURL == "" {
		errs = append(errs, "sources.repo_url missing")
	}
	if j.TimeoutSecs <= 0 {
		errs = append(errs, "timeout_secs must be > 0")
	}
	if j.Trace.LimitBytes <= 0 {
		errs = append(errs, "trace.limit_bytes must be > 0")
	}
	if j.ServerURL == "" {
		errs = append(errs, "server_url missing")
	}
	for i, v := range j.Variables {
		if v.Key == "" {
			errs = append(errs, fmt.Sprintf("variables[%d].key missing", i))
		}
	}
	for i, s := range j.Steps {
		if s.Name == "" {
			errs = append(errs, fmt.Sprintf("steps[%d].name missing", i))
		}
	}
	if errs != nil {
		return fmt.Errorf("%w: %s", ErrInvalid, strings.Join(errs, "; "))
	}
	return nil
}
