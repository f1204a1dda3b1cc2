package exec

import (
	"context"
	"errors"
	"io"
	"time"
)

// Errors returned by executors. Backends wrap them with %w.
var (
	// ErrPrepare: the job environment could not be set up (a host or VM
	// failure; the stage runner fails the job `system`).
	ErrPrepare = errors.New("exec: prepare failed")
	// ErrStart: a script could not be started (the stage runner fails the
	// job `system`).
	ErrStart = errors.New("exec: start failed")
	// ErrCleanedUp: the job was already cleaned up.
	ErrCleanedUp = errors.New("exec: job cleaned up")
	// ErrImagePull: the job's or a service's image could not be pulled
	// (or is absent under pull_policy never). The stage runner fails the
	// job `image_pull` (FAIL-04), before it considers [ErrPrepare].
	ErrImagePull = errors.New("exec: image pull failed")
	// ErrConfiguration: the job cannot run on this node as configured (no
	// image on a node that requires one, an unknown image user, …). The
	// stage runner fails the job `configuration` (FAIL-05), before it
	// considers [ErrPrepare].
	ErrConfiguration = errors.New("exec: configuration error")
)

// Executor makes job environments. Implementations are safe for concurrent
// use: one node runs many jobs.
type Executor interface {
	// Prepare creates the environment of one job: its directories and,
	// where the backend has them, its VM or container and its resource
	// envelope. The returned Job must be cleaned up by the caller, even when
	// later steps fail. An error wraps [ErrPrepare].
	Prepare(ctx context.Context, req PrepareRequest) (Job, error)
}

// PrepareRequest describes the job to prepare.
type PrepareRequest struct {
	// ID names the job's environment (directory, cgroup, VM); unique on the
	// node among running jobs; [A-Za-z0-9_.-] only. Required.
	ID string
	// Size is the envelope the job runs in, already sized and clamped by
	// [SizeJob]. A zero field means no limit on that resource.
	Size Size
}

// Job is one prepared job environment. Run may be called many times, one
// at a time; Cancel may be called concurrently with Run.
type Job interface {
	// BuildsDir is the directory under which the job's project is checked
	// out, as scripts see it (CI_BUILDS_DIR).
	BuildsDir() string
	// TempDir is a private directory for the job's generated scripts and
	// file variables, as scripts see it; removed by Cleanup.
	TempDir() string
	// HostPath maps a path as scripts see it to the host's path, so the
	// node can write files (file variables, CA) and transfers can read the
	// checkout. For the process backend it is the identity.
	HostPath(guestPath string) string
	// Adopt hands hostPath (a file or a tree the node wrote on the host,
	// such as a checkout or downloaded artifacts) to the job's own user, so
	// its scripts can change it. Backends running jobs as the node's user
	// do nothing.
	Adopt(hostPath string) error
	// Run runs one script with bash and waits for it to end. stdout and
	// stderr receive the script's streams separately. ctx ending kills the
	// script's whole process group at once (SIGKILL). A non-zero exit is not
	// an error: it is in [RunResult.ExitCode]. An error wraps [ErrStart] or
	// [ErrCleanedUp].
	Run(ctx context.Context, script Script, stdout, stderr io.Writer) (RunResult, error)
	// Cancel signals the running script's process group: Graceful sends
	// SIGTERM, Immediate SIGKILL. Without a running script it does nothing.
	Cancel(mode CancelMode)
	// Usage returns what the job used so far, across all its runs.
	Usage() Usage
	// Cleanup stops anything left of the job and removes its environment
	// (directories, cgroups). Safe to call more than once.
	Cleanup(ctx context.Context) error
}

// Script is one generated script to run.
type Script struct {
	// Name identifies the script (the stage's name); it names the file.
	Name string
	// Body is the bash script's content.
	Body string
	// Env is extra environment for the bash process, KEY=VALUE; the job's
	// variables are exported by Body itself, as gitlab-runner does.
	Env []string
}

// CancelMode says how a running script is stopped.
type CancelMode int

// Cancel modes.
const (
	// Graceful sends SIGTERM to the script's process group; the script may
	// clean up and exit.
	Graceful CancelMode = iota + 1
	// Immediate sends SIGKILL to the script's process group.
	Immediate
)

// RunResult is how a script ended.
type RunResult struct {
	// ExitCode is the script's exit status; -1 when it was killed by a
	// signal (then Signal names it).
	ExitCode int
	// Signal is the signal that ended the script, "" when it exited.
	Signal string
	// OOMKilled: the kernel killed a process of the job for passing the
	// memory envelope during this run.
	OOMKilled bool
	// Wall is how long the script ran.
	Wall time.Duration
}

// Usage is what a job used (NODE-14..17).
type Usage struct {
	// Size is the envelope the job ran with (DECISIONS 9).
	Size Size
	// Wall runs from Prepare to now, or to the end of Cleanup.
	Wall time.Duration
	// CPU is user plus system time of every process of the job.
	CPU time.Duration
	// PeakMemBytes is the job's peak memory: the cgroup's high-water mark
	// where there is one, else the largest max RSS of a script's processes.
	// 0 means unknown.
	PeakMemBytes int64
}
