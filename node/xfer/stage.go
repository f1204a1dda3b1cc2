package xfer

import (
	"context"

	"github.com/vk-ci/vk/node/stage"
	"github.com/vk-ci/vk/node/trace"
	"github.com/vk-ci/vk/node/xfer/artifacts"
	"github.com/vk-ci/vk/node/xfer/cache"
	"github.com/vk-ci/vk/proto/job"
)

// Stage adapts [Transfers] to [stage.Transfers]. Transfer output goes to
// the job's stream (01, stdout) of the trace, where gitlab-runner's
// get_sources script and artifact/cache helpers write theirs, so it is
// masked and stamped like the job's own output.
type Stage struct {
	T *Transfers
	// Hooks are passed to GetSources (nil funcs: none).
	Hooks Hooks
}

var _ stage.Transfers = Stage{}

func jobStream(tr *trace.Trace) *trace.Stream { return tr.Stream(trace.StreamWork, trace.Stdout) }

// GetSources implements [stage.Transfers].
func (s Stage) GetSources(ctx context.Context, j *job.CiJob, dir string, tr *trace.Trace) error {
	w := jobStream(tr)
	defer w.Close()
	return s.T.GetSources(ctx, j, dir, s.Hooks, w)
}

// RestoreCache implements [stage.Transfers]; cache trouble is a trace
// warning, never an error (XFER-11).
func (s Stage) RestoreCache(ctx context.Context, j *job.CiJob, reg *stage.CacheRegistry, dir string, tr *trace.Trace) error {
	w := jobStream(tr)
	defer w.Close()
	s.T.RestoreCache(ctx, j, jobRegistry(reg), dir, w)
	return ctx.Err()
}

// jobRegistry is the cache package's form of a job's cache registry.
func jobRegistry(reg *stage.CacheRegistry) *cache.JobRegistry {
	if reg == nil {
		return nil
	}
	return &cache.JobRegistry{Repository: reg.Repository, Token: reg.Token, Expires: reg.Expires}
}

// DownloadArtifacts implements [stage.Transfers].
func (s Stage) DownloadArtifacts(ctx context.Context, j *job.CiJob, dir string, tr *trace.Trace) error {
	w := jobStream(tr)
	defer w.Close()
	return s.T.DownloadArtifacts(ctx, j, dir, w)
}

// ArchiveCache implements [stage.Transfers]; never an error but the
// context's (XFER-11).
func (s Stage) ArchiveCache(ctx context.Context, j *job.CiJob, reg *stage.CacheRegistry, dir string, failed bool, tr *trace.Trace) error {
	w := jobStream(tr)
	defer w.Close()
	s.T.ArchiveCache(ctx, j, jobRegistry(reg), dir, failed, w)
	return ctx.Err()
}

// UploadArtifacts implements [stage.Transfers]: one outcome per artifact
// whose `when` applied, and an error wrapping [artifacts.ErrUploadFailed]
// when any of them failed or was too large (FAIL-06).
func (s Stage) UploadArtifacts(ctx context.Context, j *job.CiJob, dir string, failed bool, tr *trace.Trace) ([]stage.ArtifactOutcome, error) {
	w := jobStream(tr)
	defer w.Close()
	res, err := s.T.UploadArtifacts(ctx, j, dir, failed, w)
	if err != nil {
		return nil, err
	}
	var out []stage.ArtifactOutcome
	for i, r := range res {
		if !artifacts.WhenMatches(j.Artifacts[i].When, failed) {
			continue
		}
		o := stage.ArtifactOutcome{Name: r.Name, Type: r.Type, Uploaded: r.Outcome == artifacts.Uploaded}
		if o.Uploaded {
			o.Bytes = r.Bytes
		}
		if r.Err != nil {
			o.Err = string(r.Outcome) + ": " + r.Err.Error()
		}
		out = append(out, o)
	}
	return out, artifacts.Failures(res)
}
