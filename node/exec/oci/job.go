package oci

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	osexec "os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/node/exec"
	"github.com/vk-ci/vk/node/exec/imageuser"
	"github.com/vk-ci/vk/node/exec/oci/imagestore"
)

// Job is one prepared container job. It implements [exec.Job]; the stage
// runner also reads [Job.Warnings] into the trace after Prepare.
type Job struct {
	e     *Executor
	id    string
	size  exec.Size
	start time.Time
	dir   string
	log   *slog.Logger
	cg    *jobCgroup

	// Set by Prepare, read-only afterwards.
	images     []*imagestore.Image
	rootfs     []*layeredRootfs
	containers []string // runc IDs, job first
	services   []*service
	cgCreated  bool
	keep       *os.File // write end of the keeper's stdin
	initPID    int      // host PID of the job container's main process
	user       imageuser.User
	env        []string
	warnings   []string

	mu        sync.Mutex // guards the fields below
	running   bool
	signalled syscall.Signal // sent to the running script by Cancel or ctx
	cleaned   bool
	end       time.Time
	cpu       time.Duration // cached at Cleanup
	peak      int64         // cached at Cleanup
}

var _ exec.Job = (*Job)(nil)

func (j *Job) hostBuilds() string { return filepath.Join(j.dir, "builds") }
func (j *Job) hostTemp() string   { return filepath.Join(j.dir, "tmp") }

// BuildsDir is CI_BUILDS_DIR as scripts see it ([Config.GuestBuildsDir]).
func (j *Job) BuildsDir() string { return j.e.cfg.GuestBuildsDir }

// TempDir is [GuestTempDir].
func (j *Job) TempDir() string { return GuestTempDir }

// Warnings are trace lines from Prepare: dropped service aliases
// (DECISIONS 8) and services that did not start properly.
func (j *Job) Warnings() []string { return append([]string(nil), j.warnings...) }

// HostPath maps a guest path to the host: the builds, temp and cache
// mounts to their host directories, anything else into the job
// container's root filesystem.
func (j *Job) HostPath(guest string) string {
	g := path.Clean("/" + guest)
	under := func(base string) (string, bool) {
		if g == base {
			return "", true
		}
		if rel, ok := strings.CutPrefix(g, strings.TrimSuffix(base, "/")+"/"); ok {
			return rel, true
		}
		return "", false
	}
	if rel, ok := under(j.e.cfg.GuestBuildsDir); ok {
		return filepath.Join(j.hostBuilds(), rel)
	}
	if rel, ok := under(GuestTempDir); ok {
		return filepath.Join(j.hostTemp(), rel)
	}
	if j.e.cfg.CacheDir != "" {
		if rel, ok := under(DefaultGuestCacheDir); ok {
			return filepath.Join(j.e.cfg.CacheDir, rel)
		}
	}
	if len(j.rootfs) > 0 {
		return filepath.Join(j.rootfs[0].merged, g)
	}
	return filepath.Join(j.dir, "job", "merged", g)
}

// Adopt gives hostPath and everything under it to the job's user (the
// image's USER or image.user); for root it does nothing. Symlinks are
// changed themselves, never followed.
func (j *Job) Adopt(hostPath string) error {
	if j.user.UID == 0 && j.user.GID == 0 {
		return nil
	}
	if err := exec.ChownTree(hostPath, j.user.UID, j.user.GID); err != nil {
		return fmt.Errorf("oci: adopt %s: %w", hostPath, err)
	}
	return nil
}

// bashPaths are where the job's bash is looked for in its image.
var bashPaths = []string{"/usr/local/bin/bash", "/usr/bin/bash", "/bin/bash"}

// Run `runc exec`s bash with the script in the job container, as the
// job's user, in the builds directory, with the image's environment plus
// s.Env. ctx ending kills every process of the script (SIGKILL). A script
// killed by a signal has ExitCode -1 when vk sent it (Cancel, ctx) or the
// kernel's OOM killer did; otherwise runc's 128+n is reported as the
// script's own exit status, as Docker reports it.
func (j *Job) Run(ctx context.Context, s exec.Script, stdout, stderr io.Writer) (exec.RunResult, error) {
	if err := j.beginScript(); err != nil {
		return exec.RunResult{}, err
	}
	defer j.endScript()
	if syscall.Kill(j.initPID, 0) != nil {
		return exec.RunResult{}, fmt.Errorf("%w: the job container's main process has exited (an image entrypoint that does not run its arguments? set image:entrypoint: [\"\"]): %s",
			exec.ErrStart, tail(filepath.Join(j.dir, "job-init.log"), 5))
	}
	cmd, pidFile, err := j.execCommand(s)
	if err != nil {
		return exec.RunResult{}, err
	}
	oomBefore, _ := j.cg.OOMKills()
	started := j.e.clk.Now()
	out, err := exec.StartPumped(cmd, stdout, stderr)
	if err != nil {
		return exec.RunResult{}, fmt.Errorf("%w: %w", exec.ErrStart, err)
	}
	stop, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		j.killWhenScriptExits(pidFile, stop)
	}()
	// The exit status is read from ProcessState below.
	_ = exec.WaitOrCancel(ctx, cmd, func() { j.Cancel(exec.Immediate) })
	close(stop)
	<-watched
	os.Remove(pidFile)
	wall := j.e.clk.Now().Sub(started)
	// Whatever the script left running in the job container goes, so a
	// stray background process cannot hold its output open.
	j.signalScript(syscall.SIGKILL)
	if !out.Drain(j.e.clk, DefaultDrainWait) {
		j.log.Warn("output pipes still open after the script ended; closed them", slog.String("script", s.Name))
	}
	res := exec.RunResult{Wall: wall, ExitCode: cmd.ProcessState.ExitCode()}
	oomAfter, _ := j.cg.OOMKills()
	res.OOMKilled = oomAfter > oomBefore
	j.mu.Lock()
	sig := j.signalled
	j.mu.Unlock()
	return scriptResult(ctx, res, cmd.ProcessState, sig != 0), nil
}

// beginScript marks a script running: one at a time, none after cleanup.
func (j *Job) beginScript() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.cleaned {
		return exec.ErrCleanedUp
	}
	if j.running {
		return fmt.Errorf("%w: a script is already running", exec.ErrStart)
	}
	j.running, j.signalled = true, 0
	return nil
}

func (j *Job) endScript() {
	j.mu.Lock()
	j.running = false
	j.mu.Unlock()
}

// execCommand writes the script into the job's temp dir and builds the
// `runc exec` that runs it with the image's bash as the job's user. It
// returns the command and the file runc writes the script's host PID to:
// the node watches that process, not runc exec, to learn when the script
// ended (see killWhenScriptExits). That file is outside the container's
// view.
func (j *Job) execCommand(s exec.Script) (*osexec.Cmd, string, error) {
	bash := ""
	for _, p := range bashPaths {
		if fi, err := os.Stat(j.HostPath(p)); err == nil && fi.Mode().IsRegular() {
			bash = p
			break
		}
	}
	if bash == "" {
		return nil, "", fmt.Errorf("%w: the job image has no bash (looked for %s)", exec.ErrStart, strings.Join(bashPaths, ", "))
	}
	name := s.Name
	if !validID.MatchString(name) {
		name = "script"
	}
	hostScript := filepath.Join(j.hostTemp(), name+".sh")
	if err := os.WriteFile(hostScript, []byte(s.Body), 0o700); err != nil {
		return nil, "", fmt.Errorf("%w: %w", exec.ErrStart, err)
	}
	if err := os.Chown(hostScript, int(j.user.UID), int(j.user.GID)); err != nil {
		return nil, "", fmt.Errorf("%w: %w", exec.ErrStart, err)
	}
	pidFile := filepath.Join(j.dir, name+".pid")
	_ = os.Remove(pidFile)
	args := []string{"exec", "--pid-file", pidFile, "--cwd", j.BuildsDir(), "--user", fmt.Sprintf("%d:%d", j.user.UID, j.user.GID)}
	for _, g := range j.user.Groups {
		args = append(args, "--additional-gids", strconv.FormatUint(uint64(g), 10))
	}
	for _, kv := range s.Env {
		args = append(args, "--env", kv)
	}
	args = append(args, j.id, bash, "--noprofile", "--norc", path.Join(GuestTempDir, name+".sh"))
	cmd := j.e.runcCmd(args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd, pidFile, nil
}

// scriptResult reads a signal into res: runc reports a killed script as
// 128+n, taken as the signal when vk sent one (signalled) or the OOM
// killer did; a killed runc is its own signal; and a ctx that ended while
// runc exec was still starting the script (runc then fails with its own
// 255) is a SIGKILL all the same.
func scriptResult(ctx context.Context, res exec.RunResult, st *os.ProcessState, signalled bool) exec.RunResult {
	if res.ExitCode > 128 && res.ExitCode < 128+65 && (signalled || res.OOMKilled) {
		res.Signal = syscall.Signal(res.ExitCode - 128).String()
		res.ExitCode = -1
	}
	if res.ExitCode == -1 && res.Signal == "" {
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.Signal = ws.Signal().String() // runc itself was killed
		}
	}
	if ctx.Err() != nil && res.Signal == "" {
		res.ExitCode, res.Signal = -1, syscall.SIGKILL.String()
	}
	return res
}

// scriptPoll is how often killWhenScriptExits looks for the pid file and,
// without pidfds, for the script's exit: polling an external process.
const scriptPoll = 20 * time.Millisecond

// killWhenScriptExits waits for the script whose host PID runc writes to
// pidFile to exit, then SIGKILLs whatever it left running in the job
// container. `runc exec` returns only once nothing holds the script's
// output open, so a background process (`my-server &`) would otherwise
// keep the step running until it ended by itself; gitlab-runner's step
// ends with its script. It returns early when stop closes (runc exec
// ended first).
func (j *Job) killWhenScriptExits(pidFile string, stop <-chan struct{}) {
	var pid int
	for pid == 0 {
		if b, err := os.ReadFile(pidFile); err == nil {
			if p, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && p > 0 {
				pid = p
				break
			}
		}
		select {
		case <-stop:
			return
		case <-time.After(scriptPoll):
		}
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err == nil {
		defer unix.Close(fd)
	}
	for {
		if err == nil {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			if n, perr := unix.Poll(fds, int(scriptPoll/time.Millisecond)); n > 0 || perr != nil && perr != unix.EINTR {
				break // the pidfd is readable: the script exited
			}
		} else if syscall.Kill(pid, 0) != nil {
			break // no pidfd (old kernel) and the process is gone
		}
		select {
		case <-stop:
			return
		default:
		}
		if err != nil {
			select {
			case <-stop:
				return
			case <-time.After(scriptPoll):
			}
		}
	}
	if n := j.signalScript(syscall.SIGKILL); n > 0 {
		j.log.Info("script ended; killed what it left running in the job container", slog.String("script", filepath.Base(pidFile)), slog.Int("processes", n))
	}
}

// signalScript sends sig to every process in the job container except its
// keeper: the running script and anything it started. It returns how many
// processes it signalled.
func (j *Job) signalScript(sig syscall.Signal) int {
	if j.e.gvisor() {
		return j.signalScriptGvisor(sig)
	}
	n := 0
	for _, pid := range j.cg.Procs("job") {
		if pid == j.initPID || pid <= 1 {
			continue
		}
		if syscall.Kill(pid, sig) == nil {
			n++
		}
	}
	return n
}

// Cancel signals the running script's processes in the container:
// Graceful sends SIGTERM, Immediate SIGKILL. Without a running script it
// does nothing.
func (j *Job) Cancel(mode exec.CancelMode) {
	sig := syscall.SIGTERM
	if mode == exec.Immediate {
		sig = syscall.SIGKILL
	}
	j.mu.Lock()
	running := j.running
	if running {
		j.signalled = sig
	}
	j.mu.Unlock()
	if running {
		j.signalScript(sig)
	}
}

// Usage reads the job cgroup (job container and services together): CPU
// from cpuacct.usage, peak memory from memory.max_usage_in_bytes.
func (j *Job) Usage() exec.Usage {
	j.mu.Lock()
	defer j.mu.Unlock()
	u := exec.Usage{Size: j.size}
	if j.cleaned {
		u.Wall = j.end.Sub(j.start)
		u.CPU, u.PeakMemBytes = j.cpu, j.peak
		return u
	}
	u.Wall = j.e.clk.Now().Sub(j.start)
	u.CPU, u.PeakMemBytes = j.readUsage()
	return u
}

func (j *Job) readUsage() (time.Duration, int64) {
	cpu, _ := j.cg.CPU()
	peak, _ := j.cg.PeakMemBytes()
	return cpu, peak
}

// Cleanup stops and deletes the job's containers, unmounts and removes
// their root filesystems, removes the job's cgroups (and the shared
// parent when it is left empty), its directories, and releases its images.
// Safe to call more than once.
func (j *Job) Cleanup(ctx context.Context) error {
	j.mu.Lock()
	if j.cleaned {
		j.mu.Unlock()
		return nil
	}
	j.cleaned = true
	running := j.running
	if j.cgCreated {
		j.cpu, j.peak = j.readUsage()
	}
	j.mu.Unlock()
	if running {
		j.signalScript(syscall.SIGKILL)
	}
	var errs []error
	if j.keep != nil {
		j.keep.Close()
	}
	// Services first, then the job container (whose network namespace
	// they share).
	for i := len(j.containers) - 1; i >= 0; i-- {
		cid := j.containers[i]
		out, err := j.e.runcCmd("delete", "--force", cid).CombinedOutput()
		if err != nil && !strings.Contains(string(out), "does not exist") {
			errs = append(errs, fmt.Errorf("runc delete %s: %w: %s", cid, err, strings.TrimSpace(string(out))))
		}
	}
	for _, sv := range j.services {
		t := j.e.clk.NewTimer(10 * time.Second)
		select {
		case <-sv.done:
		case <-t.C():
			errs = append(errs, fmt.Errorf("service %s: runc did not exit", sv.cid))
		}
		t.Stop()
	}
	for _, r := range j.rootfs {
		if err := r.remove(); err != nil {
			errs = append(errs, err)
		}
	}
	if j.cgCreated {
		if err := j.cg.remove(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, im := range j.images {
		im.Release()
	}
	if err := os.RemoveAll(j.dir); err != nil {
		errs = append(errs, err)
	}
	j.mu.Lock()
	j.end = j.e.clk.Now()
	j.mu.Unlock()
	if err := errors.Join(errs...); err != nil {
		j.log.Warn("cleanup", slog.Any(logkey.Err, err))
		return fmt.Errorf("oci: cleanup %s: %w", j.id, err)
	}
	_ = ctx
	return nil
}
