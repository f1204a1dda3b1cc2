package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/relsign"
)

// MaxReleaseBytes bounds one published vk-gitlab binary: 512 MiB.
const MaxReleaseBytes = 512 << 20

// metaReleases is the store meta key of the published releases: one JSON
// object from version to its record. A standby sharing PostgreSQL reads
// the records; the bytes are in each instance's own state directory.
const metaReleases = "relay.releases"

// ReleasesDir is where published releases are kept under the state
// directory: <state_dir>/releases/<version>/vk-gitlab.
const ReleasesDir = "releases"

// errReleaseNotHere: the store records the release but this instance's
// state directory lacks its bytes (published on another instance).
var errReleaseNotHere = errors.New("hub: release bytes are not on this hub instance")

var versionRE = regexp.MustCompile(`^[0-9A-Za-z][0-9A-Za-z._+~-]{0,63}$`)

// checkVersion refuses a release name that is not a plain version: it
// names a directory and goes in a URL path.
func checkVersion(v string) error {
	if !versionRE.MatchString(v) || strings.Contains(v, "..") {
		return fmt.Errorf("%w: release %q: want letters, digits and . _ + ~ - (at most 64)", admin.ErrInvalid, v)
	}
	return nil
}

// releaseStore keeps the published vk-gitlab releases (OPS-04): the
// bytes under <state_dir>/releases/<version>/vk-gitlab, their records
// (SHA-256, size, the signature made off the hub) in the store. A
// release is published once: publishing a version again replaces it.
type releaseStore struct {
	dir string
	st  store.Meta
	clk clock.Clock
	mu  sync.Mutex // serialises publishes (read-modify-write of the records)
}

func newReleaseStore(stateDir string, st store.Meta, clk clock.Clock) *releaseStore {
	return &releaseStore{dir: filepath.Join(stateDir, ReleasesDir), st: st, clk: clock.Or(clk)}
}

func (rs *releaseStore) records(ctx context.Context) (map[string]admin.Release, error) {
	m := map[string]admin.Release{}
	b, err := rs.st.GetMeta(ctx, metaReleases)
	if errors.Is(err, store.ErrNotFound) {
		return m, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("hub: stored releases: %w", err)
	}
	return m, nil
}

// List returns the published releases, newest first.
func (rs *releaseStore) List(ctx context.Context) ([]admin.Release, error) {
	m, err := rs.records(ctx)
	if err != nil {
		return nil, err
	}
	out := slices.Collect(maps.Values(m))
	slices.SortFunc(out, func(a, b admin.Release) int { return b.Published.Compare(a.Published) })
	return out, nil
}

// Get returns one release's record; ErrNotFound (wrapped) when none.
func (rs *releaseStore) Get(ctx context.Context, version string) (admin.Release, error) {
	m, err := rs.records(ctx)
	if err != nil {
		return admin.Release{}, err
	}
	r, ok := m[version]
	if !ok {
		return admin.Release{}, fmt.Errorf("%w: release %q is not published (vk-hub relays publish)", admin.ErrNotFound, version)
	}
	return r, nil
}

// Publish stores body as release version with its signature (made off
// the hub, base64). The bytes go to a temporary file, are fsynced and
// renamed into place before the record is stored, so a record always
// names complete bytes on the instance that published it.
func (rs *releaseStore) Publish(ctx context.Context, version, signature string, body io.Reader) (admin.Release, error) {
	if err := checkVersion(version); err != nil {
		return admin.Release{}, err
	}
	if strings.TrimSpace(signature) == "" {
		return admin.Release{}, fmt.Errorf("%w: release %s has no signature: sign it off the hub (vk-hub relays sign)", admin.ErrInvalid, version)
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	dir := filepath.Join(rs.dir, version)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return admin.Release{}, fmt.Errorf("hub: releases: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".upload-*")
	if err != nil {
		return admin.Release{}, fmt.Errorf("hub: releases: %w", err)
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	sum, n, err := relsign.Digest(io.TeeReader(io.LimitReader(body, MaxReleaseBytes+1), tmp))
	if err == nil && n > MaxReleaseBytes {
		err = fmt.Errorf("%w: release over %d bytes", admin.ErrInvalid, MaxReleaseBytes)
	}
	if err == nil && n == 0 {
		err = fmt.Errorf("%w: release %s is empty", admin.ErrInvalid, version)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, "vk-gitlab"))
	}
	if err != nil {
		return admin.Release{}, fmt.Errorf("hub: publish release %s: %w", version, err)
	}
	rec := admin.Release{Version: version, SHA256: sum, Size: n, Signature: strings.TrimSpace(signature), Published: rs.clk.Now().UTC()}
	m, err := rs.records(ctx)
	if err != nil {
		return admin.Release{}, err
	}
	m[version] = rec
	b, err := json.Marshal(m)
	if err != nil {
		return admin.Release{}, err
	}
	if err := rs.st.PutMeta(ctx, metaReleases, b); err != nil {
		return admin.Release{}, fmt.Errorf("hub: publish release %s: %w", version, err)
	}
	return rec, nil
}

// Open opens a published release's bytes for serving. A release the
// store records whose bytes this instance lacks (published on another
// instance sharing the store) fails with errReleaseNotHere; one whose
// bytes changed on disk since publishing is refused the same way.
func (rs *releaseStore) Open(ctx context.Context, version string) (*os.File, admin.Release, error) {
	if err := checkVersion(version); err != nil {
		return nil, admin.Release{}, err
	}
	rec, err := rs.Get(ctx, version)
	if err != nil {
		return nil, admin.Release{}, err
	}
	f, err := os.Open(filepath.Join(rs.dir, version, "vk-gitlab"))
	if err != nil {
		return nil, rec, fmt.Errorf("%w: %s/%s/vk-gitlab: %v; publish it again on this instance", errReleaseNotHere, rs.dir, version, err)
	}
	if fi, err := f.Stat(); err != nil || fi.Size() != rec.Size {
		f.Close()
		return nil, rec, fmt.Errorf("%w: %s/%s/vk-gitlab is not the published %d bytes; publish it again on this instance", errReleaseNotHere, rs.dir, version, rec.Size)
	}
	return f, rec, nil
}
