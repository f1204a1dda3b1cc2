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
// # Pulling
//
// go-containerregistry's remote package speaks to the registry (token or
// basic auth, index to platform, every document and layer checked against
// its digest and size) and its mutate.Extract flattens the layers; the
// store decides which hosts to try, the scheme of each, which credential
// goes to which host and how large a manifest or config may be, and writes
// the flattened tar into the rootfs confined to it (see remote.go).
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
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
	"golang.org/x/sync/singleflight"

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
