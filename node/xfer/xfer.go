// Package xfer is the node's job transfers: the host-side checkout
// (get_sources), caches in the node's registry (restore_cache,
// archive_cache), dependency artifacts (download_artifacts) and artifact
// uploads (upload_artifacts). [Transfers] adapts a [job.CiJob] to the
// subpackages, which take small explicit option structs:
//
//   - [gitsrc]: git checkout with the job token through a credential helper
//     (STAGE-02, STAGE-03);
//   - [artifacts]: uploads to and downloads from GitLab with job and
//     dependency tokens (XFER-01..06, XFER-26);
//   - [cache]: OCI caches with oras-go (XFER-07..15);
//   - [fileset]: path selection and safe extraction shared by both.
//
// Failure classes (FAIL-06): an error returned by GetSources or
// DownloadArtifacts is a transfer failure; the stage runner fails the job
// external_dependency unless the error is the context's. Cache stages never
// fail the job (warnings only); an upload's failure is reported per artifact
// in [artifacts.Result] and fails the job external_dependency when any
// outcome is failed or too_large.
//
// Job variables read here: GIT_STRATEGY, GIT_DEPTH (overrides the spec's
// depth when set), GIT_SUBMODULE_STRATEGY, GIT_CHECKOUT, GIT_CLEAN_FLAGS,
// CACHE_REQUEST_TIMEOUT (minutes). The fetch strategy falls back to clone
// when GitLab does not allow fetch (allow_git_fetch), as in gitlab-runner.
package xfer

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/node/xfer/artifacts"
	"github.com/vk-ci/vk/node/xfer/cache"
	"github.com/vk-ci/vk/node/xfer/gitsrc"
	"github.com/vk-ci/vk/proto/job"
	"oras.land/oras-go/v2/registry/remote/auth"
)

// ErrBadCA is returned when the job's server CA PEM holds no certificate.
var ErrBadCA = errors.New("xfer: server CA PEM holds no certificate")

// Config is the node-wide part of transfers. The zero value works for
// everything but caches (no registry means caches are skipped with a
// warning).
type Config struct {
	// Registry is the node's registry host[:port]; "" disables caches.
	Registry string
	// RegistryPlainHTTP talks http to the registry.
	RegistryPlainHTTP bool
	// RegistryCredential is the node's own registry credential.
	RegistryCredential auth.Credential
	// RegistryPrefix is the node's [registry] repository prefix.
	RegistryPrefix string
	// RegistryTransport overrides the registry's transport (private CA).
	RegistryTransport http.RoundTripper
	// TempDir is where archives touch disk ("" = os.TempDir()); it should
	// be on the jobs' disk.
	TempDir string
	// Git is the git binary ("" = git from PATH).
	Git string
	// Clock times retries; nil means real time.
	Clock clock.Clock
	// Log receives debug lines; nil discards.
	Log *slog.Logger
}

// Transfers runs a job's transfer stages. It is safe for concurrent use by
// several jobs.
type Transfers struct {
	cfg Config
}

// New returns Transfers for cfg.
func New(cfg Config) *Transfers { return &Transfers{cfg: cfg} }

// Hooks are the get_sources hooks; the stage runner supplies them because
// they run in the guest (STAGE-06). Nil funcs are skipped.
type Hooks struct {
	PreGetSources, PostGetSources func(ctx context.Context) error
}

func lookup(j *job.CiJob, key string) string {
	v, _ := job.Lookup(j.Variables, key)
	return strings.TrimSpace(v)
}

// GitOptions derives the checkout options of j into dir.
func GitOptions(j *job.CiJob, dir string, gitBin string) (gitsrc.Options, error) {
	o := gitsrc.Options{
		RepoURL:      j.Sources.RepoURL,
		Token:        j.Token,
		Ref:          j.Sources.Ref,
		SHA:          j.Sources.SHA,
		Refspecs:     j.Sources.Refspecs,
		Depth:        j.Sources.Depth,
		Strategy:     gitsrc.Strategy(strings.ToLower(lookup(j, "GIT_STRATEGY"))),
		Submodules:   gitsrc.SubmoduleStrategy(strings.ToLower(lookup(j, "GIT_SUBMODULE_STRATEGY"))),
		CleanFlags:   lookup(j, "GIT_CLEAN_FLAGS"),
		Dir:          dir,
		CAPEM:        []byte(j.ServerCAPEM),
		ObjectFormat: j.Sources.RepoObjectFormat,
		Git:          gitBin,
	}
	// FF_USE_GITALY_CORRELATION_ID is on unless the job turns it off.
	if v, ok := job.Lookup(j.Variables, "FF_USE_GITALY_CORRELATION_ID"); !ok || parseBoolOr(v, true) {
		o.CorrelationID = j.Sources.CorrelationID
	}
	if d := lookup(j, "GIT_DEPTH"); d != "" {
		n, err := strconv.Atoi(d)
		if err != nil || n < 0 {
			return o, fmt.Errorf("%w: GIT_DEPTH %q", gitsrc.ErrOptions, d)
		}
		o.Depth = n
	}
	if c := lookup(j, "GIT_CHECKOUT"); c != "" {
		b, err := strconv.ParseBool(c)
		if err == nil {
			o.NoCheckout = !b
		}
	}
	if (o.Strategy == "" || o.Strategy == gitsrc.Fetch) && !j.Sources.AllowFetch {
		o.Strategy = gitsrc.Clone
	}
	return o, nil
}

// GetSources runs get_sources for j into dir (STAGE-02, STAGE-03).
func (t *Transfers) GetSources(ctx context.Context, j *job.CiJob, dir string, hooks Hooks, trace io.Writer) error {
	o, err := GitOptions(j, dir, t.cfg.Git)
	if err != nil {
		return err
	}
	o.PreHook, o.PostHook = hooks.PreGetSources, hooks.PostGetSources
	return gitsrc.GetSources(ctx, o, trace)
}

func (t *Transfers) gitlab(j *job.CiJob) (*artifacts.Client, error) {
	c := &artifacts.Client{BaseURL: j.ServerURL, Clock: t.cfg.Clock}
	if j.ServerCAPEM != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(j.ServerCAPEM)) {
			return nil, ErrBadCA
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		c.Transport = tr
	}
	return c, nil
}

// DownloadArtifacts runs download_artifacts: every dependency with an
// artifacts file is fetched with its own token and extracted into dir
// (XFER-06, AUTH-04).
func (t *Transfers) DownloadArtifacts(ctx context.Context, j *job.CiJob, dir string, trace io.Writer) error {
	var deps []artifacts.Dependency
	for _, d := range j.Dependencies {
		if d.ArtifactsFile == nil {
			continue
		}
		deps = append(deps, artifacts.Dependency{ID: d.ID, Token: d.Token, Name: d.Name})
	}
	if len(deps) == 0 {
		return nil
	}
	c, err := t.gitlab(j)
	if err != nil {
		return err
	}
	return c.Download(ctx, artifacts.DownloadRequest{Dependencies: deps, Dir: dir, TempDir: t.cfg.TempDir, Trace: trace})
}

// UploadArtifacts runs upload_artifacts_on_success (jobFailed false) or
// _on_failure, returning each artifact's outcome (XFER-05).
func (t *Transfers) UploadArtifacts(ctx context.Context, j *job.CiJob, dir string, jobFailed bool, trace io.Writer) ([]artifacts.Result, error) {
	if len(j.Artifacts) == 0 {
		return nil, nil
	}
	c, err := t.gitlab(j)
	if err != nil {
		return nil, err
	}
	specs := make([]artifacts.Spec, len(j.Artifacts))
	for i, a := range j.Artifacts {
		specs[i] = artifacts.Spec{Name: a.Name, Paths: a.Paths, Exclude: a.Exclude, Untracked: a.Untracked,
			When: a.When, Type: a.ArtifactType, Format: a.ArtifactFormat, ExpireIn: a.ExpireIn}
	}
	return c.Upload(ctx, artifacts.UploadRequest{JobID: j.Job.ID, Token: j.Token, Dir: dir, JobFailed: jobFailed, Artifacts: specs, Trace: trace}), nil
}

func (t *Transfers) cacheRequest(j *job.CiJob, reg *cache.JobRegistry, dir string, failed bool, trace io.Writer) cache.Request {
	sc := cache.Scope{GitLabURL: j.ServerURL, ProjectID: j.Job.ProjectID, Protected: j.Sources.Protected != nil && *j.Sources.Protected, Job: reg}
	if m, err := strconv.Atoi(lookup(j, "CACHE_REQUEST_TIMEOUT")); err == nil && m > 0 {
		sc.TimeoutMinutes = m
	}
	specs := make([]cache.Spec, len(j.Caches))
	for i, c := range j.Caches {
		specs[i] = cache.Spec{Key: c.Key, FallbackKeys: c.FallbackKeys, Paths: c.Paths, Untracked: c.Untracked, Policy: c.Policy, When: c.When}
	}
	return cache.Request{Scope: sc, Caches: specs, Dir: dir, JobFailed: failed, Trace: trace}
}

func (t *Transfers) store() *cache.Store {
	return &cache.Store{Registry: t.cfg.Registry, PlainHTTP: t.cfg.RegistryPlainHTTP, Credential: t.cfg.RegistryCredential,
		Prefix: t.cfg.RegistryPrefix, Transport: t.cfg.RegistryTransport, TempDir: t.cfg.TempDir, Clock: t.cfg.Clock}
}

func (t *Transfers) noRegistry(j *job.CiJob, trace io.Writer) []cache.Result {
	if trace != nil {
		fmt.Fprintf(trace, "\x1b[0;33mWARNING: Skipping the cache: this node has no registry configured\x1b[0;m\n")
	}
	out := make([]cache.Result, len(j.Caches))
	for i, c := range j.Caches {
		out[i] = cache.Result{Key: c.Key, Outcome: cache.Skipped}
	}
	return out
}

// RestoreCache runs restore_cache; it never fails the job. reg, when not
// nil, is the job's own cache repository and token (XFER-13): the
// node's credential is then not used.
func (t *Transfers) RestoreCache(ctx context.Context, j *job.CiJob, reg *cache.JobRegistry, dir string, trace io.Writer) []cache.Result {
	if len(j.Caches) == 0 {
		return nil
	}
	if t.cfg.Registry == "" {
		return t.noRegistry(j, trace)
	}
	return t.store().Restore(ctx, t.cacheRequest(j, reg, dir, false, trace))
}

// ArchiveCache runs archive_cache (jobFailed false) or
// archive_cache_on_failure, in reg as RestoreCache; it never fails the
// job.
func (t *Transfers) ArchiveCache(ctx context.Context, j *job.CiJob, reg *cache.JobRegistry, dir string, jobFailed bool, trace io.Writer) []cache.Result {
	if len(j.Caches) == 0 {
		return nil
	}
	if t.cfg.Registry == "" {
		return t.noRegistry(j, trace)
	}
	return t.store().Archive(ctx, t.cacheRequest(j, reg, dir, jobFailed, trace))
}

// parseBoolOr is strconv.ParseBool of v, or def when v is not a boolean
// (as gitlab-runner resolves a feature flag from a job variable).
func parseBoolOr(v string, def bool) bool {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return def
	}
	return b
}
