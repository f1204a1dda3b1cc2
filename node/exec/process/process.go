// Package process is the default executor backend: each job runs under bash
// on the host, in its own directory and process group, optionally as an
// unprivileged user, confined where the host has cgroup v1 controllers by a
// per-job cgroup (memory, cpu, cpuacct, pids) that carries the job's
// envelope (NODE-09, NODE-17).
//
// # How a script starts
//
// With cgroups, the child must not run job code before it is in the job's
// cgroup. Run therefore starts `bash -c 'read -r _ <&3; exec bash …'` with
// fd 3 the read end of a pipe, writes the child's PID into every
// controller's cgroup.procs, and only then writes one byte to the pipe; the
// job's script, and everything it forks, starts inside the cgroup.
//
// # Choices
//
//   - bash runs with --noprofile --norc (gitlab-runner's shell executor uses
//     --login): the host's profile is not the job's business and would make
//     traces host-dependent.
//   - The environment is clean: PATH, HOME (the job's own home directory),
//     LANG=C.UTF-8 and the script's extra variables; nothing leaks from the
//     node's own environment.
//   - When a script's bash exits, whatever it left running in its process
//     group (and, with cgroups, anywhere in the job's cgroup) is killed, so
//     a stray background process cannot hold the job's output open.
//   - Memory over the limit: the kernel's OOM killer kills a process of the
//     job; Run reports [exec.RunResult.OOMKilled] (from the cgroup's
//     oom_kill counter) and the stage runner writes a clear trace line.
package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	osexec "os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"time"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/node/exec"
	"github.com/vk-ci/vk/node/internal/cgroupv1"
)

// Defaults.
const (
	DefaultCgroupRoot   = cgroupv1.DefaultRoot
	DefaultCgroupParent = "vk"
	DefaultPidsMax      = 4096
	// DefaultDrainWait bounds how long Run waits for the script's output
	// pipes to close after its processes were killed.
	DefaultDrainWait = 5 * time.Second
)

// cleanupKillWait bounds how long Cleanup waits for the job's killed
// processes to leave its cgroup.
const cleanupKillWait = 5 * time.Second

// Config configures an [Executor]. The zero value plus Root is usable.
type Config struct {
	// Root is the directory jobs' directories are made in. Required.
	Root string
	// User, when set, runs scripts as this uid/gid and gives it the job's
	// directories; nil runs them as the node's own user.
	User *User
	// CgroupRoot is where the cgroup v1 controllers are mounted; ""
	// means [DefaultCgroupRoot]. Cgroups are used only when present and
	// writable.
	CgroupRoot string
	// NoCgroups disables cgroups even where the host has them.
	NoCgroups bool
	// CgroupParent is the cgroup directory jobs' cgroups are made in under
	// each controller; "" means [DefaultCgroupParent].
	CgroupParent string
	// PidsMax caps the job's processes (pids.max); 0 means
	// [DefaultPidsMax], negative means no cap.
	PidsMax int
	// Bash is the bash binary; "" means "bash" from PATH.
	Bash string
	// Clock measures wall time; nil means real time.
	Clock clock.Clock
	// Log receives the executor's own diagnostics; nil discards them.
	Log *slog.Logger
}

// User is an unprivileged identity to run jobs as.
type User struct{ UID, GID uint32 }

// Executor is the process backend. It is safe for concurrent use.
type Executor struct {
	cfg     Config
	bash    string
	cgroups bool
	clk     clock.Clock
	log     *slog.Logger
}

var _ exec.Executor = (*Executor)(nil)

// ErrConfig is returned by [New] for an unusable configuration.
var ErrConfig = errors.New("process: bad config")

// New returns an executor, checking the configuration and finding bash.
func New(cfg Config) (*Executor, error) {
	if cfg.Root == "" {
		return nil, fmt.Errorf("%w: Root is required", ErrConfig)
	}
	if cfg.CgroupRoot == "" {
		cfg.CgroupRoot = DefaultCgroupRoot
	}
	if cfg.CgroupParent == "" {
		cfg.CgroupParent = DefaultCgroupParent
	}
	if cfg.PidsMax == 0 {
		cfg.PidsMax = DefaultPidsMax
	}
	if cfg.Bash == "" {
		cfg.Bash = "bash"
	}
	bash, err := osexec.LookPath(cfg.Bash)
	if err != nil {
		return nil, fmt.Errorf("%w: bash: %w", ErrConfig, err)
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Executor{
		cfg:     cfg,
		bash:    bash,
		cgroups: !cfg.NoCgroups && cgroupv1.Available(cfg.CgroupRoot),
		clk:     clock.Or(cfg.Clock),
		log:     log,
	}, nil
}

// Cgroups reports whether jobs are confined by cgroups on this host.
func (e *Executor) Cgroups() bool { return e.cgroups }

var validID = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// Prepare makes the job's directories (builds, tmp, home) and, with
// cgroups, its cgroup carrying req.Size.
func (e *Executor) Prepare(ctx context.Context, req exec.PrepareRequest) (exec.Job, error) {
	if !validID.MatchString(req.ID) || req.ID == "." || req.ID == ".." {
		return nil, fmt.Errorf("%w: invalid job id %q", exec.ErrPrepare, req.ID)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", exec.ErrPrepare, err)
	}
	j := &job{
		e:     e,
		size:  req.Size,
		start: e.clk.Now(),
		dir:   filepath.Join(e.cfg.Root, req.ID),
		log:   e.log.With(logkey.JobID, req.ID),
	}
	if err := os.MkdirAll(e.cfg.Root, 0o755); err != nil {
		return nil, fmt.Errorf("%w: %w", exec.ErrPrepare, err)
	}
	if err := os.Mkdir(j.dir, 0o755); err != nil {
		return nil, fmt.Errorf("%w: %w", exec.ErrPrepare, err)
	}
	for _, d := range []string{j.BuildsDir(), j.TempDir(), j.home()} {
		if err := os.Mkdir(d, 0o755); err != nil {
			_ = os.RemoveAll(j.dir)
			return nil, fmt.Errorf("%w: %w", exec.ErrPrepare, err)
		}
		if u := e.cfg.User; u != nil {
			if err := os.Chown(d, int(u.UID), int(u.GID)); err != nil {
				_ = os.RemoveAll(j.dir)
				return nil, fmt.Errorf("%w: %w", exec.ErrPrepare, err)
			}
		}
	}
	if err := os.Chmod(j.TempDir(), 0o700); err != nil {
		_ = os.RemoveAll(j.dir)
		return nil, fmt.Errorf("%w: %w", exec.ErrPrepare, err)
	}
	if e.cgroups {
		lim := cgroupv1.Limits{MemBytes: req.Size.MemMiB << 20, CPUs: req.Size.CPUs, PidsMax: e.cfg.PidsMax}
		cg, err := newCgroup(e.cfg.CgroupRoot, e.cfg.CgroupParent, req.ID, lim)
		if err != nil {
			_ = os.RemoveAll(j.dir)
			return nil, fmt.Errorf("%w: %w", exec.ErrPrepare, err)
		}
		j.cg = cg
	}
	return j, nil
}

// job is one prepared job.
type job struct {
	e     *Executor
	size  exec.Size
	start time.Time
	dir   string
	cg    *cgroup // nil without cgroups
	log   *slog.Logger

	mu      sync.Mutex // guards the fields below
	pgid    int        // process group of the running script; 0 none
	cpu     time.Duration
	maxRSS  int64
	end     time.Time // set by Cleanup
	cleaned bool
	running bool
}

func (j *job) BuildsDir() string            { return filepath.Join(j.dir, "builds") }
func (j *job) TempDir() string              { return filepath.Join(j.dir, "tmp") }
func (j *job) HostPath(guest string) string { return guest }
func (j *job) home() string                 { return filepath.Join(j.dir, "home") }

// Adopt chowns hostPath and everything under it to the configured user;
// without one it does nothing. Symlinks are chowned themselves, never
// followed.
func (j *job) Adopt(hostPath string) error {
	u := j.e.cfg.User
	if u == nil {
		return nil
	}
	if err := exec.ChownTree(hostPath, u.UID, u.GID); err != nil {
		return fmt.Errorf("process: adopt %s: %w", hostPath, err)
	}
	return nil
}

func (j *job) Run(ctx context.Context, s exec.Script, stdout, stderr io.Writer) (exec.RunResult, error) {
	if err := j.beginScript(); err != nil {
		return exec.RunResult{}, err
	}
	defer j.endScript()
	path, err := j.writeScript(s)
	if err != nil {
		return exec.RunResult{}, fmt.Errorf("%w: %w", exec.ErrStart, err)
	}
	cmd, gate, err := j.command(path, s.Env)
	if err != nil {
		return exec.RunResult{}, fmt.Errorf("%w: %w", exec.ErrStart, err)
	}
	defer gate.close()
	var oomBefore int64
	oomKnown := false
	if j.cg != nil {
		oomBefore, oomKnown = j.cg.OOMKills()
	}
	started := j.e.clk.Now()
	out, err := exec.StartPumped(cmd, stdout, stderr)
	if err != nil {
		return exec.RunResult{}, fmt.Errorf("%w: %w", exec.ErrStart, err)
	}
	pid := cmd.Process.Pid
	j.mu.Lock()
	j.pgid = pid
	j.mu.Unlock()

	if j.cg != nil {
		if err := j.cg.Add(pid); err != nil {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			_ = cmd.Wait()
			out.Close()
			return exec.RunResult{}, fmt.Errorf("%w: %w", exec.ErrStart, err)
		}
		if _, err := gate.w.Write([]byte{'\n'}); err != nil {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}

	// The exit status is read from ProcessState below.
	_ = exec.WaitOrCancel(ctx, cmd, func() { j.Cancel(exec.Immediate) })
	wall := j.e.clk.Now().Sub(started)

	// Kill what the script left behind, so the pipes close.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	j.killCgroup()
	j.mu.Lock()
	j.pgid = 0
	j.mu.Unlock()
	if !out.Drain(j.e.clk, DefaultDrainWait) {
		j.log.Warn("output pipes still open after the script ended; closed them", slog.String("script", s.Name))
	}
	res := j.result(cmd.ProcessState, wall)
	if j.cg != nil && oomKnown {
		if after, ok := j.cg.OOMKills(); ok && after > oomBefore {
			res.OOMKilled = true
		}
	}
	return res, nil
}

// beginScript marks a script running: one at a time, none after cleanup.
func (j *job) beginScript() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.cleaned {
		return exec.ErrCleanedUp
	}
	if j.running {
		return fmt.Errorf("%w: a script is already running", exec.ErrStart)
	}
	j.running = true
	return nil
}

func (j *job) endScript() {
	j.mu.Lock()
	j.running = false
	j.mu.Unlock()
}

// writeScript writes the script into the job's temp dir, owned by the
// job's user, and returns its path.
func (j *job) writeScript(s exec.Script) (string, error) {
	name := s.Name
	if !validID.MatchString(name) {
		name = "script"
	}
	path := filepath.Join(j.TempDir(), name+".sh")
	if err := os.WriteFile(path, []byte(s.Body), 0o700); err != nil {
		return "", err
	}
	if u := j.e.cfg.User; u != nil {
		if err := os.Chown(path, int(u.UID), int(u.GID)); err != nil {
			return "", err
		}
		if err := os.Chown(j.TempDir(), int(u.UID), int(u.GID)); err != nil {
			return "", err
		}
	}
	return path, nil
}

// startGate holds a script with cgroups at its first line until the node
// has put it in the job's cgroup; without cgroups it is empty.
type startGate struct{ r, w *os.File }

func (g startGate) close() {
	if g.r != nil {
		g.r.Close()
		g.w.Close()
	}
}

// command builds bash running the script at path in the builds dir, in
// its own process group, as the job's user, with env after the base
// environment.
func (j *job) command(path string, env []string) (*osexec.Cmd, startGate, error) {
	var cmd *osexec.Cmd
	var gate startGate
	if j.cg != nil {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, startGate{}, err
		}
		gate = startGate{r, w}
		cmd = osexec.Command(j.e.bash, "--noprofile", "--norc", "-c",
			`read -r _ <&3 || exit 125; exec "$0" --noprofile --norc "$1" 3<&-`, j.e.bash, path)
		cmd.ExtraFiles = []*os.File{r}
	} else {
		cmd = osexec.Command(j.e.bash, "--noprofile", "--norc", path)
	}
	cmd.Dir = j.BuildsDir()
	cmd.Env = append([]string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + j.home(),
		"LANG=C.UTF-8",
	}, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if u := j.e.cfg.User; u != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: u.UID, Gid: u.GID}
	}
	return cmd, gate, nil
}

// result reads a finished script's exit status and adds its CPU time and
// peak memory to the job's usage.
func (j *job) result(st *os.ProcessState, wall time.Duration) exec.RunResult {
	res := exec.RunResult{Wall: wall}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		res.ExitCode = -1
		res.Signal = ws.Signal().String()
	} else {
		res.ExitCode = st.ExitCode()
	}
	if ru, ok := st.SysUsage().(*syscall.Rusage); ok {
		j.mu.Lock()
		j.cpu += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		j.maxRSS = max(j.maxRSS, ru.Maxrss*1024)
		j.mu.Unlock()
	}
	return res
}

// killCgroup SIGKILLs every process left in the job's cgroup.
func (j *job) killCgroup() {
	if j.cg != nil {
		j.cg.kill()
	}
}

func (j *job) Cancel(mode exec.CancelMode) {
	j.mu.Lock()
	pgid := j.pgid
	j.mu.Unlock()
	if pgid == 0 {
		return
	}
	switch mode {
	case exec.Graceful:
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
	case exec.Immediate:
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		j.killCgroup()
	}
}

func (j *job) Usage() exec.Usage {
	j.mu.Lock()
	defer j.mu.Unlock()
	u := exec.Usage{Size: j.size, CPU: j.cpu, PeakMemBytes: j.maxRSS}
	if !j.end.IsZero() {
		u.Wall = j.end.Sub(j.start)
	} else {
		u.Wall = j.e.clk.Now().Sub(j.start)
	}
	if j.cg != nil && !j.cleaned {
		if c, ok := j.cg.CPU(); ok {
			u.CPU = c
		}
		if p, ok := j.cg.PeakMemBytes(); ok {
			u.PeakMemBytes = p
		}
	}
	return u
}

func (j *job) Cleanup(ctx context.Context) error {
	j.mu.Lock()
	if j.cleaned {
		j.mu.Unlock()
		return nil
	}
	pgid := j.pgid
	j.mu.Unlock()
	if pgid != 0 {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	var errs []error
	if j.cg != nil {
		// Final usage from the cgroup before it goes.
		c, okC := j.cg.CPU()
		p, okP := j.cg.PeakMemBytes()
		j.mu.Lock()
		if okC {
			j.cpu = c
		}
		if okP {
			j.maxRSS = p
		}
		j.mu.Unlock()
		// The kernel needs a moment to reap killed processes.
		if err := j.cg.Kill(ctx, cleanupKillWait); err != nil {
			errs = append(errs, fmt.Errorf("process: %w", err))
		}
		if err := j.cg.Remove(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(j.dir); err != nil {
		errs = append(errs, fmt.Errorf("process: remove job dir: %w", err))
	}
	j.mu.Lock()
	j.cleaned = true
	j.end = j.e.clk.Now()
	j.mu.Unlock()
	return errors.Join(errs...)
}
