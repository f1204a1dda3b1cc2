package relay

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vk-ci/vk/hubclient"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/internal/relsign"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/reqsign"
)

// Installing a release the hub offers (OPS-04): download it next to the
// running executable, check it, swap it in, stop without waiting for
// jobs (their records stay in the state files) and exec it.

// maxReleaseBytes bounds a download when the update states no size.
const maxReleaseBytes = 512 << 20

// releasePathPrefix is the only path an update may name.
const releasePathPrefix = "/v1/releases/"

// Restart is Run's error after an update was installed: the new binary
// is in place at Exe, the old one kept at Old, and the relay has stopped.
// Exec starts the new binary; cmd/vk-gitlab calls it.
type Restart struct {
	// Release is the installed release.
	Release string
	// Exe is the executable's path (the new binary now); Old the old one.
	Exe, Old string
}

func (r *Restart) Error() string {
	return fmt.Sprintf("relay: release %s installed at %s; restart into it", r.Release, r.Exe)
}

// Exec replaces the process with the new binary, with the same arguments
// and environment (systemd keeps the PID). It returns only when the exec
// failed, after putting the old binary back, so the caller may carry on.
func (r *Restart) Exec() error {
	err := syscall.Exec(r.Exe, os.Args, os.Environ())
	if rerr := os.Rename(r.Old, r.Exe); rerr != nil {
		return fmt.Errorf("relay: exec %s: %w; putting %s back failed too: %v", r.Exe, err, r.Old, rerr)
	}
	return fmt.Errorf("relay: exec %s: %w (the old binary is back in place)", r.Exe, err)
}

// updater installs the releases the hub offers; nil key refuses them.
type updater struct {
	key     ed25519.PublicKey
	exe     string
	base    *url.URL
	http    *http.Client
	log     *slog.Logger
	busy    atomic.Bool
	restart func(*Restart) // stops Run for the restart
	bg      func(func())   // runs an install in the background
}

// newUpdater prepares updates when [hub] allow lists update: the release
// key and the running executable's path (symlinks resolved, so the new
// binary lands beside the real file).
func newUpdater(cfg Config, e hubclient.Enrolment, now func() time.Time, log *slog.Logger) (*updater, error) {
	if !allowsUpdate(cfg) {
		return nil, nil
	}
	b, err := os.ReadFile(cfg.Hub.ReleaseKeyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: hub.release_key_file: %w", ErrConfig, err)
	}
	key, err := relsign.ParsePublicKey(b)
	if err != nil {
		return nil, fmt.Errorf("%w: hub.release_key_file %s: %w", ErrConfig, cfg.Hub.ReleaseKeyFile, err)
	}
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		return nil, fmt.Errorf("relay: updates: the running executable: %w", err)
	}
	base, err := url.Parse(e.HubURL)
	if err != nil {
		return nil, fmt.Errorf("relay: hub URL: %w", err)
	}
	tlsCfg, err := hubTLS(e)
	if err != nil {
		return nil, err
	}
	tr := &reqsign.Transport{Key: e.Key, Principal: e.ID, TLSConfig: tlsCfg, Now: now, ResponseHeaderTimeout: time.Minute}
	hc := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &updater{key: key, exe: exe, base: base, http: hc, log: log.With(logkey.Component, "update")}, nil
}

func allowsUpdate(cfg Config) bool {
	for _, a := range cfg.Hub.Allow {
		if a == client.RelayAllowUpdate {
			return true
		}
	}
	return false
}

// offer starts installing u unless an install is under way.
func (u *updater) offer(ctx context.Context, up client.Update) {
	if !u.busy.CompareAndSwap(false, true) {
		u.log.Warn("update offered while another is being installed; ignored", "release", up.Release)
		return
	}
	u.bg(func() {
		r, err := u.install(ctx, up)
		if err != nil {
			u.busy.Store(false)
			u.log.Error("update refused: "+err.Error(), "release", up.Release)
			return
		}
		u.log.Info("update installed; stopping to restart into it (running jobs resume from the state files)",
			"release", up.Release, "exe", r.Exe, "old", r.Old)
		u.restart(r)
	})
}

// install downloads and checks up and swaps it in for the running
// executable.
func (u *updater) install(ctx context.Context, up client.Update) (*Restart, error) {
	// The signature first: an unsigned or mis-signed offer is refused
	// before a byte is downloaded.
	if err := relsign.Verify(u.key, up.Release, up.SHA256, up.Signature); err != nil {
		return nil, err
	}
	ref, err := url.Parse(up.URL)
	if err != nil || !strings.HasPrefix(ref.Path, releasePathPrefix) {
		return nil, fmt.Errorf("relay: update URL %q is not a release path of the hub", up.URL)
	}
	newPath := u.exe + ".new"
	if err := u.download(ctx, ref.Path, up, newPath); err != nil {
		os.Remove(newPath)
		return nil, err
	}
	if err := checkRuns(ctx, newPath, up.Release); err != nil {
		os.Remove(newPath)
		return nil, err
	}
	old := u.exe + ".old"
	if err := os.Rename(u.exe, old); err != nil {
		os.Remove(newPath)
		return nil, fmt.Errorf("relay: keep the old binary: %w", err)
	}
	if err := os.Rename(newPath, u.exe); err != nil {
		_ = os.Rename(old, u.exe)
		os.Remove(newPath)
		return nil, fmt.Errorf("relay: put the new binary in place: %w", err)
	}
	syncDir(filepath.Dir(u.exe))
	return &Restart{Release: up.Release, Exe: u.exe, Old: old}, nil
}

// download fetches the release path from the enrolled hub as a signed
// request into dst (same directory as the executable: the renames stay
// on one file system), checks size, SHA-256 and signature, and fsyncs.
func (u *updater) download(ctx context.Context, path string, up client.Update, dst string) error {
	target := *u.base
	target.Path = strings.TrimRight(u.base.Path, "/") + path
	target.RawPath = ""
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target.String(), nil)
	if err != nil {
		return err
	}
	resp, err := u.http.Do(req)
	if err != nil {
		return fmt.Errorf("relay: download release %s: %w", up.Release, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		se := hubclient.DecodeError(resp.StatusCode, resp.Header, b)
		return fmt.Errorf("relay: download release %s: %w", up.Release, se)
	}
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return fmt.Errorf("relay: download release %s: %w", up.Release, err)
	}
	limit := int64(maxReleaseBytes)
	if up.Size > 0 {
		limit = up.Size
	}
	sum, n, err := relsign.Digest(io.TeeReader(io.LimitReader(resp.Body, limit+1), f))
	if err == nil {
		err = relsign.Check(u.key, up, sum, n)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("relay: release %s: %w", up.Release, err)
	}
	return nil
}

// checkRuns runs the new binary with --version: it must start on this
// host and name the release it was signed as.
func checkRuns(ctx context.Context, path, release string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return fmt.Errorf("relay: the new binary does not run here (%s --version): %w", path, err)
	}
	for _, w := range strings.Fields(string(out)) {
		if w == release {
			return nil
		}
	}
	return fmt.Errorf("relay: the new binary says %q, not release %s", strings.TrimSpace(string(out)), release)
}

// syncDir fsyncs a directory so the renames survive a crash; best effort.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// errNoUpdates is logged when the hub offers an update the configuration
// does not allow (the hub should not send one).
var errNoUpdates = errors.New("this relay's [hub] allow does not list update")

// prepareUpdates loads the release key when [hub] allow lists update.
func (s *Server) prepareUpdates() error {
	u, err := newUpdater(s.cfg, s.enrol, s.clk.Now, s.log)
	if err != nil {
		return err
	}
	s.upd = u
	return nil
}

// restartInto stops Run for an installed update: no new jobs, running
// jobs stopped at once (their records stay in the state files, and the
// new binary resumes them), no shutdown_timeout wait.
// When the relay is stopping already (SIGTERM came during the install), it
// finishes stopping as asked: the new binary is in place for the next
// start.
func (s *Server) restartInto(r *Restart) {
	if s.runCtx.Err() != nil {
		s.log.Info("stopping already; the new release starts at the next start", "release", r.Release)
		return
	}
	s.restart.Store(r)
	s.cancelRun()
	s.stopJobs()
}
