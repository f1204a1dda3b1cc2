// Package imagestore resolves, pulls and unpacks the images of a node's
// container jobs (STAGE-08, FAIL-04, AUTH-05, SPEC-14).
//
// # Layout
//
// Under the store's root:
//
//	images/<config digest hex>/rootfs   the unpacked image, read-only by convention
//	images/<config digest hex>/image.json  its runtime config (env, entrypoint, …)
//	refs/<sha256 of ref and platform>.json  which image a reference resolved to
//	tmp/                                staging for downloads and unpacking
//
// An image is unpacked once per image ID (its config digest) into a
// flattened rootfs, whiteouts applied; jobs never write to it: the executor
// mounts an overlay (or makes a copy) on top. Layers shared between images
// are unpacked once per image — per-layer sharing is a later refinement.
//
// # Pull policies
//
// A job gives pull_policy as a list (gitlab-runner semantics): the first
// policy is tried and, when pulling fails, a later "if-not-present" lets a
// stored image be used. "always" resolves the reference at the registry
// (a manifest request; layers already unpacked are not fetched again);
// "if-not-present" uses the stored resolution of the reference without
// contacting the registry; "never" only uses what is stored.
//
// # Credentials
//
// The job's registry credentials (type registry, SPEC-17) are used only to
// pull its images (AUTH-05): they are sent only to the host they name and
// never stored.
//
// # Garbage collection
//
// [Store.GC] removes images not in use by a job and not used for
// [Config.IdleAfter] (DECISIONS 10: image_cache_idle_secs, 1800 s by
// default), and the references that point to them.
package imagestore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/singleflight"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/node/exec"
)

// Errors. They are wrapped with %w.
var (
	// ErrPull: the image could not be pulled or is not in the store when
	// the pull policy forbids pulling. The stage runner fails the job
	// image_pull (FAIL-04). The message carries the registry's answer.
	ErrPull = exec.ErrImagePull
	// ErrBadName: an image name or platform could not be parsed (also
	// wrapped by ErrPull where a job's image is concerned).
	ErrBadName = errors.New("imagestore: bad image name")
	// ErrPolicy: a pull policy is not one of always, if-not-present, never.
	ErrPolicy = errors.New("imagestore: unknown pull policy")
)

// Pull policies (gitlab-runner's names).
const (
	PullAlways       = "always"
	PullIfNotPresent = "if-not-present"
	PullNever        = "never"
)

// Defaults.
const (
	// DefaultIdleAfter is how long an unused image is kept (DECISIONS 10).
	DefaultIdleAfter = 1800 * time.Second
	// DefaultPullPolicy is used when neither the job nor the node says.
	DefaultPullPolicy = PullAlways
	// maxManifestBytes bounds a manifest or config document.
	maxManifestBytes = 4 << 20
)

// Config configures a [Store]. Root is required.
type Config struct {
	// Root is the store's directory (see the package doc). Required.
	Root string
	// Rules resolve image names (STAGE-08).
	Rules Rules
	// DefaultPullPolicy applies to a job that gives none; "" means
	// [DefaultPullPolicy].
	DefaultPullPolicy string
	// IdleAfter is how long an image unused by any job is kept before GC
	// removes it; 0 means [DefaultIdleAfter].
	IdleAfter time.Duration
	// HTTPClient carries registry requests; nil means a client with the
	// default transport.
	HTTPClient *http.Client
	// Clock tells the time for GC; nil means real time.
	Clock clock.Clock
	// Log receives diagnostics; nil discards them.
	Log *slog.Logger
}

// Credential is a registry login (SPEC-17), used only to pull (AUTH-05).
type Credential struct {
	// Host is the registry host[:port] it is for (a URL is accepted: its
	// scheme and path are dropped).
	Host string
	// Username and Password log in. Password is secret: never logged.
	Username, Password string
}

// Request asks for one image.
type Request struct {
	// Name is the image name as the job gives it.
	Name string
	// PullPolicy is the job's pull_policy list; empty means the node's
	// default.
	PullPolicy []string
	// Platform is executor_opts.docker.platform; "" means the node's.
	Platform string
	// Credentials are the job's registry credentials.
	Credentials []Credential
}

// ImageConfig is what an image says about how to run it.
type ImageConfig struct {
	// Env is the image's environment, KEY=VALUE.
	Env []string `json:"env,omitempty"`
	// Entrypoint and Cmd are the image's; nil when it has none.
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	// User is the image's USER ("" root): name or uid, optionally :group.
	User string `json:"user,omitempty"`
	// WorkingDir is the image's WORKDIR; "" means /.
	WorkingDir string `json:"working_dir,omitempty"`
	// ExposedPorts are the image's exposed ports, e.g. "5432/tcp".
	ExposedPorts []string `json:"exposed_ports,omitempty"`
}

// Image is an image in the store, held by a job until [Image.Release].
type Image struct {
	// Ref is the resolved reference.
	Ref Ref
	// Manifest is the manifest digest.
	Manifest string
	// ID is the config digest; it names the image in the store.
	ID string
	// Platform is the image's platform.
	Platform Platform
	// Rootfs is the unpacked root filesystem. Read-only: never write to it.
	Rootfs string
	// Config is the image's runtime configuration.
	Config ImageConfig
	// Pulled reports whether the registry was contacted for it.
	Pulled bool

	release func()
	once    sync.Once
}

// Release tells the store the job no longer uses the image. Safe to call
// more than once.
func (im *Image) Release() {
	im.once.Do(func() {
		if im.release != nil {
			im.release()
		}
	})
}

// Store is the node's image store. It is safe for concurrent use.
type Store struct {
	cfg Config
	clk clock.Clock
	log *slog.Logger
	sf  singleflight.Group

	mu       sync.Mutex
	inUse    map[string]int       // image ID hex → jobs using it
	lastUsed map[string]time.Time // image ID hex → last release or acquire
}

// New opens (creating) the store.
func New(cfg Config) (*Store, error) {
	if cfg.Root == "" {
		return nil, errors.New("imagestore: Root is required")
	}
	if cfg.DefaultPullPolicy == "" {
		cfg.DefaultPullPolicy = DefaultPullPolicy
	}
	if !validPolicy(cfg.DefaultPullPolicy) {
		return nil, fmt.Errorf("%w: %q", ErrPolicy, cfg.DefaultPullPolicy)
	}
	if cfg.IdleAfter == 0 {
		cfg.IdleAfter = DefaultIdleAfter
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for _, d := range []string{"images", "refs", "tmp"} {
		if err := os.MkdirAll(filepath.Join(cfg.Root, d), 0o700); err != nil {
			return nil, fmt.Errorf("imagestore: %w", err)
		}
	}
	// Staging left by a crash is garbage.
	if ents, err := os.ReadDir(filepath.Join(cfg.Root, "tmp")); err == nil {
		for _, e := range ents {
			_ = os.RemoveAll(filepath.Join(cfg.Root, "tmp", e.Name()))
		}
	}
	return &Store{cfg: cfg, clk: clock.Or(cfg.Clock), log: log, inUse: map[string]int{}, lastUsed: map[string]time.Time{}}, nil
}

func validPolicy(p string) bool {
	return p == PullAlways || p == PullIfNotPresent || p == PullNever
}

// refRecord is what refs/*.json hold.
type refRecord struct {
	Ref      string `json:"ref"`
	Platform string `json:"platform"`
	Manifest string `json:"manifest"`
	ID       string `json:"id"`
}

// imageRecord is what images/*/image.json hold.
type imageRecord struct {
	ID       string      `json:"id"`
	Manifest string      `json:"manifest"`
	Platform Platform    `json:"platform"`
	Config   ImageConfig `json:"config"`
}

func refKey(ref Ref, p Platform) string {
	sum := sha256.Sum256([]byte(ref.String() + "\x00" + p.String()))
	return hex.EncodeToString(sum[:])
}

func (s *Store) imageDir(id string) string {
	return filepath.Join(s.cfg.Root, "images", digest.Digest(id).Encoded())
}

// Get returns the image req names, pulling it as its pull policy allows,
// and holds it for the caller until [Image.Release]. An error wraps
// [ErrPull] (with [ErrBadName] or [ErrPolicy] where they apply).
func (s *Store) Get(ctx context.Context, req Request) (*Image, error) {
	ref, err := s.cfg.Rules.Resolve(req.Name)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPull, err)
	}
	plat, err := ParsePlatform(req.Platform)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPull, err)
	}
	policies := req.PullPolicy
	if len(policies) == 0 {
		policies = []string{s.cfg.DefaultPullPolicy}
	}
	for _, p := range policies {
		if !validPolicy(p) {
			return nil, fmt.Errorf("%w: %w: %q", ErrPull, ErrPolicy, p)
		}
	}
	var errs []error
	for _, p := range policies {
		var im *Image
		var err error
		switch p {
		case PullAlways:
			im, err = s.pull(ctx, ref, plat, req.Credentials)
		case PullIfNotPresent:
			im, err = s.local(ref, plat)
			if err != nil {
				im, err = s.pull(ctx, ref, plat, req.Credentials)
			}
		case PullNever:
			im, err = s.local(ref, plat)
		}
		if err == nil {
			im = s.hold(im)
			// GC may have removed it between the lookup and the hold; held
			// now, it stays.
			if _, serr := os.Stat(filepath.Join(filepath.Dir(im.Rootfs), "image.json")); serr == nil {
				return im, nil
			}
			im.Release()
			err = fmt.Errorf("image %s was removed by gc while being looked up; try again", im.ID)
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("%w: %s: %w", ErrPull, ref, errors.Join(errs...))
}

// local returns the stored image ref resolved to, without the network.
func (s *Store) local(ref Ref, plat Platform) (*Image, error) {
	b, err := os.ReadFile(filepath.Join(s.cfg.Root, "refs", refKey(ref, plat)+".json"))
	if err != nil {
		return nil, fmt.Errorf("image %s (%s) is not present on this node", ref, plat)
	}
	var rec refRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("image %s: corrupt reference record: %w", ref, err)
	}
	im, err := s.load(rec.ID)
	if err != nil {
		return nil, fmt.Errorf("image %s (%s) is not present on this node: %w", ref, plat, err)
	}
	im.Ref = ref
	return im, nil
}

// load reads a stored image by ID.
func (s *Store) load(id string) (*Image, error) {
	if _, err := digest.Parse(id); err != nil {
		return nil, err
	}
	dir := s.imageDir(id)
	b, err := os.ReadFile(filepath.Join(dir, "image.json"))
	if err != nil {
		return nil, err
	}
	var rec imageRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, err
	}
	return &Image{Manifest: rec.Manifest, ID: rec.ID, Platform: rec.Platform, Rootfs: filepath.Join(dir, "rootfs"), Config: rec.Config}, nil
}

func (s *Store) hold(im *Image) *Image {
	key := digest.Digest(im.ID).Encoded()
	s.mu.Lock()
	s.inUse[key]++
	s.lastUsed[key] = s.clk.Now()
	s.mu.Unlock()
	im.release = func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.inUse[key]--
		if s.inUse[key] <= 0 {
			delete(s.inUse, key)
		}
		s.lastUsed[key] = s.clk.Now()
	}
	return im
}

// credFunc gives oras the job's credential for a host it names, and none
// for any other host (AUTH-05).
func credFunc(creds []Credential) auth.CredentialFunc {
	return func(_ context.Context, hostport string) (auth.Credential, error) {
		for _, c := range creds {
			h := c.Host
			if i := strings.Index(h, "://"); i >= 0 {
				h = h[i+3:]
			}
			h, _, _ = strings.Cut(h, "/")
			if strings.EqualFold(h, hostport) {
				return auth.Credential{Username: c.Username, Password: c.Password}, nil
			}
		}
		return auth.EmptyCredential, nil
	}
}

// pull resolves ref at its mirrors or registry and makes sure the image is
// unpacked.
func (s *Store) pull(ctx context.Context, ref Ref, plat Platform, creds []Credential) (*Image, error) {
	var errs []error
	for _, host := range s.cfg.Rules.hosts(ref) {
		im, err := s.pullFrom(ctx, host, ref, plat, creds)
		if err == nil {
			return im, nil
		}
		errs = append(errs, fmt.Errorf("from %s: %w", host, err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

func (s *Store) repo(host string, ref Ref, creds []Credential) (*remote.Repository, error) {
	repo, err := remote.NewRepository(host + "/" + ref.Repository)
	if err != nil {
		return nil, err
	}
	repo.PlainHTTP = s.cfg.Rules.plainHTTP(host)
	repo.Client = &auth.Client{Client: s.cfg.HTTPClient, Credential: credFunc(creds), Cache: auth.NewCache()}
	return repo, nil
}

// manifestDoc covers both an image index and an image manifest (OCI and
// Docker schema 2 share field names).
type manifestDoc struct {
	SchemaVersion int                  `json:"schemaVersion"`
	MediaType     string               `json:"mediaType"`
	Manifests     []ocispec.Descriptor `json:"manifests"`
	Config        ocispec.Descriptor   `json:"config"`
	Layers        []ocispec.Descriptor `json:"layers"`
}

func (s *Store) pullFrom(ctx context.Context, host string, ref Ref, plat Platform, creds []Credential) (*Image, error) {
	repo, err := s.repo(host, ref, creds)
	if err != nil {
		return nil, err
	}
	desc, rc, err := repo.FetchReference(ctx, ref.reference())
	if err != nil {
		return nil, err
	}
	doc, raw, err := readManifest(rc, desc)
	if err != nil {
		return nil, err
	}
	if len(doc.Manifests) > 0 || isIndex(desc.MediaType) {
		child, err := pickPlatform(doc.Manifests, plat)
		if err != nil {
			return nil, err
		}
		rc, err := repo.Fetch(ctx, child)
		if err != nil {
			return nil, err
		}
		desc = child
		if doc, raw, err = readManifest(rc, child); err != nil {
			return nil, err
		}
	}
	_ = raw
	if doc.SchemaVersion != 2 || doc.Config.Digest == "" {
		return nil, fmt.Errorf("manifest %s: unsupported format (schema %d, media type %q)", desc.Digest, doc.SchemaVersion, desc.MediaType)
	}
	id := doc.Config.Digest.String()
	v, err, _ := s.sf.Do(id, func() (any, error) {
		if im, err := s.load(id); err == nil {
			return im, nil
		}
		return s.unpack(ctx, repo, desc, doc, plat)
	})
	if err != nil {
		return nil, err
	}
	stored := v.(*Image)
	im := &Image{Ref: ref, Manifest: stored.Manifest, ID: stored.ID, Platform: stored.Platform, Rootfs: stored.Rootfs, Config: stored.Config, Pulled: true}
	if !plat.matches(im.Platform) {
		return nil, fmt.Errorf("image %s is %s, not the requested platform %s", ref, im.Platform, plat)
	}
	rec, _ := json.Marshal(refRecord{Ref: ref.String(), Platform: plat.String(), Manifest: desc.Digest.String(), ID: id})
	if err := writeAtomic(filepath.Join(s.cfg.Root, "refs", refKey(ref, plat)+".json"), rec, filepath.Join(s.cfg.Root, "tmp")); err != nil {
		return nil, err
	}
	return im, nil
}

func isIndex(mt string) bool {
	return mt == ocispec.MediaTypeImageIndex || mt == "application/vnd.docker.distribution.manifest.list.v2+json"
}

func readManifest(rc io.ReadCloser, desc ocispec.Descriptor) (manifestDoc, []byte, error) {
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxManifestBytes+1))
	if err != nil {
		return manifestDoc{}, nil, err
	}
	if len(b) > maxManifestBytes {
		return manifestDoc{}, nil, fmt.Errorf("manifest %s larger than %d bytes", desc.Digest, maxManifestBytes)
	}
	if desc.Digest != "" {
		if err := desc.Digest.Validate(); err != nil {
			return manifestDoc{}, nil, err
		}
		if desc.Digest.Algorithm().FromBytes(b) != desc.Digest {
			return manifestDoc{}, nil, fmt.Errorf("manifest %s: digest mismatch", desc.Digest)
		}
	}
	var doc manifestDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		return manifestDoc{}, nil, fmt.Errorf("manifest %s: %w", desc.Digest, err)
	}
	return doc, b, nil
}

// pickPlatform chooses an index entry for plat.
func pickPlatform(ms []ocispec.Descriptor, plat Platform) (ocispec.Descriptor, error) {
	var have []string
	for _, m := range ms {
		if m.Platform == nil {
			continue
		}
		q := Platform{OS: m.Platform.OS, Architecture: m.Platform.Architecture, Variant: m.Platform.Variant}
		if plat.matches(q) {
			return m, nil
		}
		have = append(have, q.String())
	}
	return ocispec.Descriptor{}, fmt.Errorf("no image for platform %s (the index has %s)", plat, strings.Join(have, ", "))
}

// configDoc is the part of an image config we use.
type configDoc struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Variant      string `json:"variant"`
	Config       struct {
		Env          []string            `json:"Env"`
		Entrypoint   []string            `json:"Entrypoint"`
		Cmd          []string            `json:"Cmd"`
		User         string              `json:"User"`
		WorkingDir   string              `json:"WorkingDir"`
		ExposedPorts map[string]struct{} `json:"ExposedPorts"`
	} `json:"config"`
}

// unpack fetches the image's config and layers and unpacks them into
// images/<id>, atomically.
func (s *Store) unpack(ctx context.Context, repo *remote.Repository, mdesc ocispec.Descriptor, doc manifestDoc, plat Platform) (*Image, error) {
	rc, err := repo.Fetch(ctx, doc.Config)
	if err != nil {
		return nil, err
	}
	cb, err := readVerified(rc, doc.Config, maxManifestBytes)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var cfg configDoc
	if err := json.Unmarshal(cb, &cfg); err != nil {
		return nil, fmt.Errorf("config %s: %w", doc.Config.Digest, err)
	}
	stage, err := os.MkdirTemp(filepath.Join(s.cfg.Root, "tmp"), "unpack-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(stage)
	rootfs := filepath.Join(stage, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		return nil, err
	}
	for i, l := range doc.Layers {
		if err := s.applyRemoteLayer(ctx, repo, l, rootfs); err != nil {
			return nil, fmt.Errorf("layer %d (%s): %w", i, l.Digest, err)
		}
	}
	ic := ImageConfig{Env: cfg.Config.Env, Entrypoint: cfg.Config.Entrypoint, Cmd: cfg.Config.Cmd, User: cfg.Config.User, WorkingDir: cfg.Config.WorkingDir}
	for p := range cfg.Config.ExposedPorts {
		ic.ExposedPorts = append(ic.ExposedPorts, p)
	}
	ip := Platform{OS: cfg.OS, Architecture: cfg.Architecture, Variant: cfg.Variant}
	if ip.OS == "" {
		ip = plat // an image without a platform is taken as asked
	}
	rec, _ := json.Marshal(imageRecord{ID: doc.Config.Digest.String(), Manifest: mdesc.Digest.String(), Platform: ip, Config: ic})
	if err := os.WriteFile(filepath.Join(stage, "image.json"), rec, 0o600); err != nil {
		return nil, err
	}
	dst := s.imageDir(doc.Config.Digest.String())
	if err := os.Rename(stage, dst); err != nil {
		if _, serr := os.Stat(filepath.Join(dst, "image.json")); serr != nil {
			return nil, err
		}
	}
	if err := os.Chmod(dst, 0o755); err != nil {
		return nil, err
	}
	s.log.Info("image unpacked", slog.String("image", doc.Config.Digest.String()), slog.Int("layers", len(doc.Layers)))
	return s.load(doc.Config.Digest.String())
}

func (s *Store) applyRemoteLayer(ctx context.Context, repo *remote.Repository, l ocispec.Descriptor, rootfs string) error {
	if err := l.Digest.Validate(); err != nil {
		return err
	}
	rc, err := repo.Fetch(ctx, l)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Join(s.cfg.Root, "tmp"), "layer-")
	if err != nil {
		rc.Close()
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	v := l.Digest.Verifier()
	n, err := io.Copy(io.MultiWriter(f, v), rc)
	rc.Close()
	if err != nil {
		return err
	}
	if !v.Verified() || (l.Size > 0 && n != l.Size) {
		return fmt.Errorf("digest or size mismatch (got %d bytes)", n)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	return ApplyLayer(rootfs, f)
}

func readVerified(rc io.ReadCloser, d ocispec.Descriptor, max int64) ([]byte, error) {
	defer rc.Close()
	if err := d.Digest.Validate(); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(rc, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("larger than %d bytes", max)
	}
	if d.Digest.Algorithm().FromBytes(b) != d.Digest {
		return nil, fmt.Errorf("digest mismatch for %s", d.Digest)
	}
	return b, nil
}

func writeAtomic(p string, b []byte, tmpDir string) error {
	f, err := os.CreateTemp(tmpDir, "ref-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), p)
}

// GC removes images no job holds that were last used more than
// [Config.IdleAfter] ago (images found on disk and never used since the
// store opened count from their directory's modification time), and the
// references to them. It returns the IDs removed.
func (s *Store) GC(ctx context.Context) ([]string, error) {
	now := s.clk.Now()
	ents, err := os.ReadDir(filepath.Join(s.cfg.Root, "images"))
	if err != nil {
		return nil, fmt.Errorf("imagestore: gc: %w", err)
	}
	var removed []string
	var errs []error
	gone := map[string]bool{}
	for _, e := range ents {
		if ctx.Err() != nil {
			break
		}
		key := e.Name()
		s.mu.Lock()
		busy := s.inUse[key] > 0
		last, ok := s.lastUsed[key]
		s.mu.Unlock()
		if busy {
			continue
		}
		if !ok {
			fi, err := e.Info()
			if err != nil {
				continue
			}
			last = fi.ModTime()
		}
		if now.Sub(last) < s.cfg.IdleAfter {
			continue
		}
		// Hold the lock while removing so a concurrent Get cannot take it.
		s.mu.Lock()
		if s.inUse[key] > 0 {
			s.mu.Unlock()
			continue
		}
		err := os.Rename(filepath.Join(s.cfg.Root, "images", key), filepath.Join(s.cfg.Root, "tmp", "gc-"+key))
		delete(s.lastUsed, key)
		s.mu.Unlock()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := os.RemoveAll(filepath.Join(s.cfg.Root, "tmp", "gc-"+key)); err != nil {
			errs = append(errs, err)
		}
		gone["sha256:"+key] = true
		removed = append(removed, "sha256:"+key)
		s.log.Info("image removed by gc", slog.String("image", "sha256:"+key))
	}
	if refs, err := os.ReadDir(filepath.Join(s.cfg.Root, "refs")); err == nil {
		for _, r := range refs {
			p := filepath.Join(s.cfg.Root, "refs", r.Name())
			b, err := os.ReadFile(p)
			if err != nil {
				continue
			}
			var rec refRecord
			if json.Unmarshal(b, &rec) != nil || gone[rec.ID] {
				_ = os.Remove(p)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		s.log.Warn("image gc", slog.Any(logkey.Err, err))
		return removed, fmt.Errorf("imagestore: gc: %w", err)
	}
	return removed, nil
}
