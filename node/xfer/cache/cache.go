// Package cache keeps GitLab CI caches as OCI artifacts in the node's
// registry (XFER-07..XFER-15) with oras-go v2.
//
// A cache is one image manifest (artifactType [ArtifactType], the empty
// config) with a single tar+zstd layer ([LayerMediaType]) in repository
// [Repository] ("ci-cache/<gitlab host>[/<gitlab path>]/<project id>"),
// tagged by [Tag]: the protection of the job's ref plus the SHA-256 of the
// key, so protected and unprotected refs never share a cache (XFER-08).
// With a job registry token (XFER-13) the start names the repository
// instead and the tag is the key's SHA-256 alone.
//
// Archive: the layer is written deterministically (see writeLayer) to a
// temp file on the job's disk, capped at 10 GiB (XFER-25), while its
// digest is computed; then a HEAD of the blob decides whether it is
// uploaded, and a HEAD of the tag whether the manifest is pushed. An
// unchanged cache therefore costs two HEAD requests and no upload; the
// last archive written wins (XFER-09).
//
// Restore: the key, then each fallback key in order; the first tag found
// is downloaded to a temp file (capped, digest verified) and extracted
// safely. A missing tag is a miss, not a failure.
//
// Failures never fail the job (gitlab-runner's behaviour): each registry
// request is retried per XFER-10 (lost/refused connections for 90 s,
// 503/429 for 3 min, exponential backoff 0.5–10 s) and bounded by
// CACHE_REQUEST_TIMEOUT (XFER-11); a request that times out, or a registry
// still unavailable after retries, writes a warning to the trace and skips
// the stage's remaining cache requests. Results report what happened.
package cache

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/node/xfer/fileset"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
)

// Media types of a vk cache.
const (
	ArtifactType   = "application/vnd.vk.ci-cache.v1"
	LayerMediaType = "application/vnd.vk.ci-cache.layer.v1.tar+zstd"
)

// Store reaches the node's registry. The zero value is not usable: set
// Registry.
type Store struct {
	// Registry is the registry's host[:port].
	Registry string
	// PlainHTTP talks http instead of https (local test registries).
	PlainHTTP bool
	// Transport carries requests; nil means a clone of
	// http.DefaultTransport (set TLSClientConfig for a private CA).
	Transport http.RoundTripper
	// Credential is the node's own registry credential; zero means
	// anonymous.
	Credential auth.Credential
	// Prefix is the node's [registry] repository prefix ("" = none).
	Prefix string
	// TempDir holds layers while they are written or downloaded; it
	// should be on the job's disk. "" means os.TempDir().
	TempDir string
	// Clock times retry backoff; nil means real time.
	Clock clock.Clock
	// ConnRetryWindow and BusyRetryWindow override the XFER-10 windows
	// (0 = defaults).
	ConnRetryWindow, BusyRetryWindow time.Duration
	// OnRetry, when set, is called before each retry wait (tests, metrics).
	OnRetry func(attempt int, wait time.Duration, err error)

	// requestTimeout overrides the per-request bound in tests.
	requestTimeout time.Duration
}

// Spec is one entry of the job's cache list (already expanded and
// sanitized by vk-gitlab, with Rails' -protected/-non_protected suffix).
type Spec struct {
	Key          string
	FallbackKeys []string // tried in order after Key on restore
	Paths        []string // glob patterns relative to the build dir
	Untracked    bool     // add `git ls-files --others`
	// Policy is pull-push ("" = pull-push), pull or push.
	Policy string
	// When is on_success ("" = on_success), on_failure or always; it
	// applies to archiving only.
	When string
}

// Scope places a job's caches.
type Scope struct {
	// GitLabURL and ProjectID name the repository (XFER-07).
	GitLabURL string
	ProjectID int64
	// Protected is the protection of the job's ref (XFER-08).
	Protected bool
	// Job, when non-nil, is the job registry token path (XFER-13/14).
	Job *JobRegistry
	// TimeoutMinutes is CACHE_REQUEST_TIMEOUT; 0 means 10.
	TimeoutMinutes int
}

// JobRegistry is what a start carries when the hub minted a registry token
// for the job (XFER-13). Until microVMs ship, the hub mints none (DECISIONS
// ruling 4); this path is implemented as far as naming, validation and
// credentials go.
type JobRegistry struct {
	// Repository is the absolute repository path on the node's registry.
	Repository string
	// Token is the registry token (sent as a bearer token).
	Token string
	// Expires is when the token stops working; zero means unknown.
	Expires time.Time
}

// Outcome is what became of one cache in a stage.
type Outcome string

// Outcomes.
const (
	Restored  Outcome = "restored"  // extracted (possibly from a fallback key)
	Miss      Outcome = "miss"      // no key had a cache
	Saved     Outcome = "saved"     // archived and pushed
	Unchanged Outcome = "unchanged" // the registry already had this exact cache
	Skipped   Outcome = "skipped"   // policy, when, no files, or an earlier failure
	Failed    Outcome = "failed"    // registry trouble; the job goes on
)

// Result reports one cache of a stage.
type Result struct {
	Key     string
	Outcome Outcome
	// From is the key actually restored (Key or a fallback).
	From string
	// Digest is the layer digest written or restored.
	Digest digest.Digest
	// Err explains Failed (and Skipped after a failure).
	Err error
}

// Request is one restore_cache or archive_cache stage.
type Request struct {
	Scope  Scope
	Caches []Spec
	// Dir is the build dir.
	Dir string
	// JobFailed selects archive_cache_on_failure semantics for When.
	JobFailed bool
	// Trace receives gitlab-runner-like lines; nil discards.
	Trace io.Writer
}

func warn(w io.Writer, format string, args ...any) {
	fmt.Fprintf(w, "\x1b[0;33mWARNING: "+format+"\x1b[0;m\n", args...)
}

// target resolves the repository handle and the tag function for a scope.
// A non-nil error is a reason to skip every cache of the stage (XFER-14).
func (s *Store) target(sc Scope) (*remote.Repository, func(key string) string, *retrier, error) {
	var repoName string
	cred := s.Credential
	tag := func(key string) string { return Tag(key, sc.Protected) }
	if sc.Job != nil {
		repoName = strings.Trim(sc.Job.Repository, "/")
		if err := ValidRepository(repoName); err != nil {
			return nil, nil, nil, err
		}
		if !sc.Job.Expires.IsZero() && !clock.Or(s.Clock).Now().Before(sc.Job.Expires) {
			return nil, nil, nil, ErrTokenExpired
		}
		cred = auth.Credential{AccessToken: sc.Job.Token}
		tag = KeyDigest
	} else {
		var err error
		if repoName, err = Repository(s.Prefix, sc.GitLabURL, sc.ProjectID); err != nil {
			return nil, nil, nil, err
		}
	}
	repo, err := remote.NewRepository(s.Registry + "/" + repoName)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: %v", ErrBadRepository, err)
	}
	repo.PlainHTTP = s.PlainHTTP
	repo.SetReferrersCapability(false) // distribution 2.8 has none; never probe
	tr := s.Transport
	if tr == nil {
		tr = http.DefaultTransport.(*http.Transport).Clone()
	}
	ac := &auth.Client{
		Client: &http.Client{Transport: tr},
		Header: http.Header{"User-Agent": {"vk-node"}},
		// The node's registry is the operator's own and often on a
		// private or loopback address: allow token realms there.
		BlockedRealmPrefixes: []netip.Prefix{},
	}
	if cred != auth.EmptyCredential {
		ac.Credential = auth.StaticCredential(s.Registry, cred)
		ac.Cache = auth.NewCache()
	}
	repo.Client = ac
	timeout := DefaultRequestTimeout
	if sc.TimeoutMinutes > 0 {
		timeout = time.Duration(sc.TimeoutMinutes) * time.Minute
	}
	if s.requestTimeout > 0 {
		timeout = s.requestTimeout
	}
	r := &retrier{clock: s.Clock, conn: s.ConnRetryWindow, busy: s.BusyRetryWindow, timeout: timeout, onRetry: s.OnRetry}
	if r.conn <= 0 {
		r.conn = DefaultConnRetryWindow
	}
	if r.busy <= 0 {
		r.busy = DefaultBusyRetryWindow
	}
	return repo, tag, r, nil
}

// ErrTokenExpired is returned (wrapped) when the job registry token has
// expired before the stage (XFER-14).
var ErrTokenExpired = errors.New("cache: job registry token expired")

// Restore runs restore_cache: for each cache whose policy pulls, the key
// and then its fallback keys are tried in order; the first hit is
// extracted into req.Dir. It returns one Result per cache.
func (s *Store) Restore(ctx context.Context, req Request) []Result {
	tr := traceOf(req.Trace)
	out := make([]Result, len(req.Caches))
	var skip error
	repo, tagOf, rt, err := s.target(req.Scope)
	if err != nil {
		skip = err
		if len(req.Caches) > 0 {
			warn(tr, "Skipping the cache: %v", err)
		}
	}
	for i, c := range req.Caches {
		out[i] = Result{Key: c.Key, Outcome: Skipped}
		if c.Policy == "push" {
			fmt.Fprintf(tr, "Not downloading cache %s due to policy\n", c.Key)
			continue
		}
		if skip != nil {
			out[i].Err = skip
			continue
		}
		res, err := s.restoreOne(ctx, repo, tagOf, rt, req, c, tr)
		out[i] = res
		if err != nil {
			// XFER-11: warn and skip the stage's remaining requests.
			warn(tr, "Failed to restore cache %s: %v; skipping the remaining caches of this stage", c.Key, err)
			skip = err
		}
	}
	return out
}

func (s *Store) restoreOne(ctx context.Context, repo *remote.Repository, tagOf func(string) string, rt *retrier, req Request, c Spec, tr io.Writer) (Result, error) {
	res := Result{Key: c.Key, Outcome: Miss}
	for _, key := range append([]string{c.Key}, c.FallbackKeys...) {
		if key == "" {
			continue
		}
		fmt.Fprintf(tr, "Checking cache for %s...\n", key)
		tag := tagOf(key)
		var mdesc ocispec.Descriptor
		err := rt.do(ctx, "resolve cache", func(ctx context.Context) error {
			var err error
			mdesc, err = repo.Resolve(ctx, tag)
			return err
		})
		if errors.Is(err, errdef.ErrNotFound) {
			warn(tr, "%s: not found in the cache registry", key)
			continue
		}
		if err != nil {
			res.Outcome, res.Err = Failed, err
			return res, err
		}
		layer, err := s.fetchLayerDesc(ctx, repo, rt, mdesc)
		if err != nil {
			res.Outcome, res.Err = Failed, err
			return res, err
		}
		fmt.Fprintf(tr, "Downloading cache from %s/%s:%s\n", s.Registry, repo.Reference.Repository, tag)
		n, err := s.download(ctx, repo, rt, layer, req.Dir)
		if err != nil {
			res.Outcome, res.Err = Failed, err
			return res, err
		}
		fmt.Fprintf(tr, "Successfully extracted cache (%d entries)\n", n)
		res.Outcome, res.From, res.Digest = Restored, key, layer.Digest
		return res, nil
	}
	return res, nil
}

func (s *Store) fetchLayerDesc(ctx context.Context, repo *remote.Repository, rt *retrier, mdesc ocispec.Descriptor) (ocispec.Descriptor, error) {
	var man ocispec.Manifest
	err := rt.do(ctx, "fetch cache manifest", func(ctx context.Context) error {
		b, err := content.FetchAll(ctx, repo, mdesc)
		if err != nil {
			return err
		}
		return json.Unmarshal(b, &man)
	})
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	if len(man.Layers) != 1 || man.Layers[0].MediaType != LayerMediaType {
		return ocispec.Descriptor{}, fmt.Errorf("%w: manifest %s is not a vk cache", ErrBadLayer, mdesc.Digest)
	}
	if man.Layers[0].Size > fileset.MaxArchiveBytes || man.Layers[0].Size < 0 {
		return ocispec.Descriptor{}, fmt.Errorf("cache layer: %w", fileset.ErrTooLarge)
	}
	return man.Layers[0], nil
}

// download spools the layer to disk (verifying size and digest), then
// extracts it.
func (s *Store) download(ctx context.Context, repo *remote.Repository, rt *retrier, layer ocispec.Descriptor, dir string) (int, error) {
	f, err := os.CreateTemp(s.TempDir, "vk-cache-*.tar.zst")
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	err = rt.do(ctx, "download cache layer", func(ctx context.Context) error {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		if err := f.Truncate(0); err != nil {
			return err
		}
		rc, err := repo.Blobs().Fetch(ctx, layer)
		if err != nil {
			return err
		}
		defer rc.Close()
		vr := content.NewVerifyReader(rc, layer)
		if _, err := io.Copy(f, vr); err != nil {
			return err
		}
		return vr.Verify()
	})
	if err != nil {
		return 0, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	return extractLayer(ctx, f, &fileset.Extractor{Root: dir})
}

// Archive runs archive_cache (or archive_cache_on_failure when
// req.JobFailed): for each cache whose policy pushes and whose `when` fits,
// the selected files become the tag's new layer, uploaded only if the
// registry lacks it.
func (s *Store) Archive(ctx context.Context, req Request) []Result {
	tr := traceOf(req.Trace)
	out := make([]Result, len(req.Caches))
	var skip error
	repo, tagOf, rt, err := s.target(req.Scope)
	if err != nil {
		skip = err
		if len(req.Caches) > 0 {
			warn(tr, "Skipping the cache: %v", err)
		}
	}
	for i, c := range req.Caches {
		out[i] = Result{Key: c.Key, Outcome: Skipped}
		if c.Policy == "pull" {
			fmt.Fprintf(tr, "Not uploading cache %s due to policy\n", c.Key)
			continue
		}
		if !whenMatches(c.When, req.JobFailed) {
			continue
		}
		if c.Key == "" {
			warn(tr, "Skipping a cache without a key")
			continue
		}
		if skip != nil {
			out[i].Err = skip
			continue
		}
		res, err := s.archiveOne(ctx, repo, tagOf(c.Key), rt, req, c, tr)
		out[i] = res
		if err != nil {
			warn(tr, "Failed to create cache %s: %v; skipping the remaining caches of this stage", c.Key, err)
			skip = err
		}
	}
	return out
}

func whenMatches(when string, failed bool) bool {
	switch when {
	case "always":
		return true
	case "on_failure":
		return failed
	}
	return !failed
}

func (s *Store) archiveOne(ctx context.Context, repo *remote.Repository, tag string, rt *retrier, req Request, c Spec, tr io.Writer) (Result, error) {
	res := Result{Key: c.Key, Outcome: Skipped}
	fmt.Fprintf(tr, "Creating cache %s...\n", c.Key)
	entries, err := collectCache(ctx, req.Dir, c, tr)
	if err != nil {
		// A bad pattern or git failure is local, not a registry
		// failure: this cache fails, the others still run.
		res.Outcome, res.Err = Failed, err
		return res, nil
	}
	if len(entries) == 0 {
		warn(tr, "No files to cache")
		return res, nil
	}
	f, layer, err := s.writeArchive(ctx, req.Dir, entries, tr)
	if err != nil {
		res.Outcome, res.Err = Failed, err
		return res, nil
	}
	defer os.Remove(f.Name())
	defer f.Close()
	res.Digest = layer.Digest
	manifest, mdesc := buildManifest(layer)
	unchanged, err := s.pushLayer(ctx, repo, tag, rt, layer, mdesc, f, tr)
	if err != nil {
		res.Outcome, res.Err = Failed, err
		return res, err
	}
	if unchanged {
		fmt.Fprintf(tr, "Cache %s is up to date (%s)\n", c.Key, layer.Digest.Encoded()[:12])
		res.Outcome = Unchanged
		return res, nil
	}
	if err := pushManifest(ctx, repo, tag, rt, mdesc, manifest); err != nil {
		res.Outcome, res.Err = Failed, err
		return res, err
	}
	fmt.Fprintln(tr, "Created cache")
	res.Outcome = Saved
	return res, nil
}

// collectCache lists the files cache c takes from dir, saying in the
// trace how many each path matched; an error (a bad pattern, git) is
// also written there as a warning.
func collectCache(ctx context.Context, dir string, c Spec, tr io.Writer) ([]fileset.Entry, error) {
	entries, warns, err := fileset.Collect(ctx, dir, fileset.Spec{Paths: c.Paths, Untracked: c.Untracked})
	if err != nil {
		warn(tr, "%v", err)
		return nil, err
	}
	for _, w := range warns {
		warn(tr, "%s", w)
	}
	for _, p := range c.Paths {
		n := 0
		for _, e := range entries {
			if ok, _ := fileset.Match(p, e.Path); ok {
				n++
			}
		}
		if n > 0 {
			fmt.Fprintf(tr, "%s: found %d matching artifact files and directories\n", p, n)
		}
	}
	return entries, nil
}

// writeArchive writes entries into a temporary zstd tar, bounded by
// [fileset.MaxArchiveBytes], and returns it (the caller removes it) with
// its layer descriptor.
func (s *Store) writeArchive(ctx context.Context, dir string, entries []fileset.Entry, tr io.Writer) (*os.File, ocispec.Descriptor, error) {
	f, err := os.CreateTemp(s.TempDir, "vk-cache-*.tar.zst")
	if err != nil {
		return nil, ocispec.Descriptor{}, err
	}
	h := sha256.New()
	cw := &fileset.CapWriter{W: io.MultiWriter(f, h), N: fileset.MaxArchiveBytes}
	if err := writeLayer(ctx, cw, dir, entries); err != nil {
		warn(tr, "creating the cache archive: %v", err)
		f.Close()
		os.Remove(f.Name())
		return nil, ocispec.Descriptor{}, err
	}
	return f, ocispec.Descriptor{
		MediaType: LayerMediaType,
		Digest:    digest.NewDigestFromBytes(digest.SHA256, h.Sum(nil)),
		Size:      fileset.MaxArchiveBytes - cw.N,
	}, nil
}

// pushLayer makes sure the registry has the layer read from f. It HEADs
// the blob first: when the registry has it and the tag already names the
// manifest mdesc, the cache is unchanged (the only requests an unchanged
// cache needs); otherwise a missing blob is uploaded.
func (s *Store) pushLayer(ctx context.Context, repo *remote.Repository, tag string, rt *retrier, layer, mdesc ocispec.Descriptor, f *os.File, tr io.Writer) (unchanged bool, err error) {
	var have bool
	if err := rt.do(ctx, "probe cache layer", func(ctx context.Context) error {
		var err error
		have, err = repo.Blobs().Exists(ctx, layer)
		return err
	}); err != nil {
		return false, err
	}
	if have {
		var cur ocispec.Descriptor
		err := rt.do(ctx, "resolve cache", func(ctx context.Context) error {
			var err error
			cur, err = repo.Resolve(ctx, tag)
			return err
		})
		if err == nil && cur.Digest == mdesc.Digest {
			return true, nil
		}
		if err != nil && !errors.Is(err, errdef.ErrNotFound) {
			return false, err
		}
		return false, nil
	}
	fmt.Fprintf(tr, "Uploading cache to %s/%s:%s\n", s.Registry, repo.Reference.Repository, tag)
	return false, rt.do(ctx, "upload cache layer", func(ctx context.Context) error {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		return repo.Blobs().Push(ctx, layer, io.NopCloser(f))
	})
}

// pushManifest pushes the empty config blob (once per repository) and the
// manifest under tag.
func pushManifest(ctx context.Context, repo *remote.Repository, tag string, rt *retrier, mdesc ocispec.Descriptor, manifest []byte) error {
	cfg := ocispec.DescriptorEmptyJSON
	if err := rt.do(ctx, "upload cache config", func(ctx context.Context) error {
		ok, err := repo.Blobs().Exists(ctx, cfg)
		if err != nil || ok {
			return err
		}
		return repo.Blobs().Push(ctx, cfg, bytes.NewReader(cfg.Data))
	}); err != nil {
		return err
	}
	return rt.do(ctx, "push cache manifest", func(ctx context.Context) error {
		return repo.PushReference(ctx, mdesc, bytes.NewReader(manifest), tag)
	})
}

// buildManifest returns the manifest bytes (deterministic: no timestamps)
// and their descriptor.
func buildManifest(layer ocispec.Descriptor) ([]byte, ocispec.Descriptor) {
	cfg := ocispec.DescriptorEmptyJSON
	cfg.Data = nil
	m := ocispec.Manifest{
		MediaType:    ocispec.MediaTypeImageManifest,
		ArtifactType: ArtifactType,
		Config:       cfg,
		Layers:       []ocispec.Descriptor{layer},
	}
	m.SchemaVersion = 2
	b, _ := json.Marshal(m)
	return b, ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromBytes(b), Size: int64(len(b)), ArtifactType: ArtifactType}
}

func traceOf(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
