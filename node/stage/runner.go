package stage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/internal/version"
	"github.com/vk-ci/vk/node/exec"
	"github.com/vk-ci/vk/node/trace"
	"github.com/vk-ci/vk/proto/job"
)

// Defaults.
const (
	// DefaultAfterScriptTimeout bounds after_script when the job sets no
	// RUNNER_AFTER_SCRIPT_TIMEOUT (gitlab-runner's 5 minutes).
	DefaultAfterScriptTimeout = 5 * time.Minute
	// DefaultCancelGrace is how long a gracefully cancelled step may take
	// to exit after SIGTERM before it is killed.
	DefaultCancelGrace = 10 * time.Second
	// timeoutDocsURL is the link gitlab-runner prints with its timeout
	// warning.
	timeoutDocsURL = "https://docs.gitlab.com/ci/runners/configure_runners/#set-script-and-after_script-timeouts"
)

// ErrBadSpec is returned by [Runner.Start] for a spec missing required
// fields.
var ErrBadSpec = errors.New("stage: bad spec")

// Config configures a [Runner].
type Config struct {
	// Executor prepares job environments. Required.
	Executor exec.Executor
	// ExecutorName names the backend in the trace ("Using the process
	// executor..."); "" means "process".
	ExecutorName string
	// Transfers moves sources, caches and artifacts; nil skips those
	// stages with a warning in the trace.
	Transfers Transfers
	// Ceiling is the node's per-job ceiling (NODE-17); zero fields mean
	// none.
	Ceiling exec.Size
	// NodeName and SystemID appear in the trace's second line; "" leaves
	// that line out.
	NodeName, SystemID string
	// Version is what "Running with vk <Version>" prints; "" means
	// version.Version.
	Version string
	// CancelGrace is how long a gracefully cancelled step may run after
	// SIGTERM; 0 means [DefaultCancelGrace].
	CancelGrace time.Duration
	// Clock stamps the trace and runs the job's timers; nil means real
	// time.
	Clock clock.Clock
	// Log receives the runner's diagnostics; nil discards them.
	Log *slog.Logger
	// OnStage, when set, is called with the job's [Spec.ID] and the
	// stage's name (prepare_executor, prepare_script, get_sources, …,
	// step_<name>, after_script, …; the section names of STAGE-01) as each
	// stage starts, before its first trace line. It is called from the
	// job's goroutine, one call at a time per job, and must not block for
	// long.
	OnStage func(jobID, stage string)
}

// Runner runs jobs stage by stage. It is safe for concurrent use.
type Runner struct {
	cfg Config
	clk clock.Clock
	log *slog.Logger
	// afterFunc is context.AfterFunc (tests replace it to hold back the
	// node-stop callback and prove the result does not depend on it).
	afterFunc func(ctx context.Context, f func()) (stop func() bool)
	slots     slots // CI_CONCURRENT_ID, CI_CONCURRENT_PROJECT_ID
}

// New returns a runner.
func New(cfg Config) (*Runner, error) {
	if cfg.Executor == nil {
		return nil, fmt.Errorf("%w: Executor is required", ErrBadSpec)
	}
	if cfg.ExecutorName == "" {
		cfg.ExecutorName = "process"
	}
	if cfg.Version == "" {
		cfg.Version = version.Version
	}
	if cfg.CancelGrace <= 0 {
		cfg.CancelGrace = DefaultCancelGrace
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Runner{cfg: cfg, clk: clock.Or(cfg.Clock), log: log, afterFunc: context.AfterFunc}, nil
}

// Handle is a running job.
//
//	Start ──▶ running ──▶ done
//	            │  Cancel(Graceful): SIGTERM to the step, after_script and
//	            │                    *_on_failure stages still run
//	            │  Cancel(Immediate), Interrupt, ctx end: kill, cleanup only
type Handle struct {
	done  chan struct{}
	trace *trace.Trace
	res   Result

	mu          sync.Mutex  // guards the fields below
	canceled    bool        // a graceful cancel reached the user scripts
	scripts     scriptPhase // where the job is relative to its user scripts
	aborted     Failure     // FailureCanceled or FailureInterrupted when killed hard
	abort       context.CancelCauseFunc
	current     exec.Job // set while a user step runs
	inUserStep  bool
	stepStop    context.CancelCauseFunc // ends the running user step's context; nil outside one
	graceTimer  clock.Timer
	cancelGrace time.Duration
	clk         clock.Clock
}

// scriptPhase is where a job is relative to its user scripts, which decides
// what a graceful cancel does (as gitlab-runner's trace cancel function,
// which is the whole build's until the user scripts start, then only the
// scripts'): before them it ends the job like an immediate cancel, during
// them it stops the scripts, after them it changes nothing.
type scriptPhase int

const (
	beforeScripts scriptPhase = iota
	inScripts
	afterScripts
)

var (
	errCanceled    = errors.New("stage: job canceled")
	errInterrupted = errors.New("stage: node interrupted the job")
	errTimeout     = errors.New("stage: job timed out")
)

// Cancel cancels the job (FAIL-09). Graceful stops the running user step
// with SIGTERM (SIGKILL after the grace) and lets after_script and the
// on_failure stages run; Immediate kills everything and only cleans up.
func (h *Handle) Cancel(mode exec.CancelMode) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if mode == exec.Immediate || h.scripts == beforeScripts {
		h.canceled = true
		h.abortLocked(FailureCanceled, errCanceled)
		return
	}
	if h.scripts == afterScripts {
		return // the scripts are over: nothing left for a graceful cancel to stop
	}
	h.canceled = true
	if h.inUserStep && h.current != nil && h.graceTimer == nil {
		// SIGTERM now; after the grace the step's context ends, which
		// kills it even if it had not started when the SIGTERM was sent.
		h.current.Cancel(exec.Graceful)
		stop := h.stepStop
		h.graceTimer = h.clk.AfterFunc(h.cancelGrace, func() { stop(errCanceled) })
	}
}

// Interrupt ends the job because the node is stopping (FAIL-08): like an
// immediate cancel, reported as interrupted.
func (h *Handle) Interrupt() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.abortLocked(FailureInterrupted, errInterrupted)
}

func (h *Handle) abortLocked(f Failure, cause error) {
	if h.aborted == "" {
		h.aborted = f
	}
	if h.abort != nil {
		h.abort(cause)
	}
	if h.current != nil {
		h.current.Cancel(exec.Immediate)
	}
}

// Done is closed when the job has ended and its environment is cleaned up.
func (h *Handle) Done() <-chan struct{} { return h.done }

// Result returns how the job ended; valid once Done is closed.
func (h *Handle) Result() Result {
	<-h.done
	return h.res
}

// TraceLen returns the trace's current length: the offset of its next byte
// (NODE-10).
func (h *Handle) TraceLen() int64 { return h.trace.Len() }

// Run runs a job to its end and returns its result.
func (r *Runner) Run(ctx context.Context, s Spec) (Result, error) {
	h, err := r.Start(ctx, s)
	if err != nil {
		return Result{}, err
	}
	return h.Result(), nil
}

// Start starts a job and returns at once. ctx ending interrupts the job
// (FAIL-08).
func (r *Runner) Start(ctx context.Context, s Spec) (*Handle, error) {
	if s.Job == nil || s.Out == nil || s.ID == "" {
		return nil, fmt.Errorf("%w: ID, Job and Out are required", ErrBadSpec)
	}
	j := s.Job
	ff := resolveFlags(j)
	tr := trace.New(s.Out, trace.Options{
		GlpatOnly:     !ff[ffMaskAllDefaultTokens],
		Clock:         r.clk,
		Timestamps:    j.Timestamps(),
		Sections:      j.Trace.Sections,
		LimitBytes:    j.Trace.LimitBytes,
		MaskPhrases:   maskPhrases(j, s.Cache),
		TokenPrefixes: j.Trace.TokenMaskPrefixes,
	})
	h := &Handle{done: make(chan struct{}), trace: tr, cancelGrace: r.cfg.CancelGrace, clk: r.clk}
	abortCtx, abort := context.WithCancelCause(ctx)
	h.abort = abort
	x := &run{
		r:     r,
		h:     h,
		node:  ctx,
		spec:  s,
		job:   j,
		ff:    ff,
		tr:    tr,
		start: r.clk.Now(),
		log:   r.log.With(logkey.JobID, s.ID, logkey.GitLabJobID, j.Job.ID),
	}
	var release func()
	x.concurrentID, x.projectConcurrentID, release = r.slots.acquire(
		j.ServerURL+"#"+strconv.FormatInt(j.Job.RunnerID, 10), j.Job.ProjectID)
	stop := r.afterFunc(ctx, h.Interrupt) // the node is stopping (FAIL-08)
	go func() {
		defer close(h.done)
		defer release()
		defer abort(nil)
		defer stop()
		h.res = x.run(abortCtx)
	}()
	return h, nil
}

// maskPhrases are the secrets the trace masks: the masked variables, the
// job token and the job's registry token (XFER-16).
func maskPhrases(j *job.CiJob, reg *CacheRegistry) []string {
	var out []string
	for _, v := range j.Variables {
		if v.Masked {
			out = append(out, v.Value)
		}
	}
	if j.Token != "" {
		out = append(out, j.Token)
	}
	if reg != nil && reg.Token != "" {
		out = append(out, reg.Token)
	}
	return out
}

// run is the state of one job's run.
type run struct {
	r     *Runner
	h     *Handle
	node  context.Context // Start's ctx: its end is the node stopping (FAIL-08)
	spec  Spec
	job   *job.CiJob
	ff    map[string]bool // the job's feature flags, resolved
	tr    *trace.Trace
	start time.Time
	log   *slog.Logger

	ej         exec.Job
	size       exec.Size
	projectDir string // as scripts see it
	tmpDir     string // projectDir + ".tmp": file variables, CA file
	pulled     string // a guest's project tree on the host, once pulled (guesttree.go)

	// concurrentID and projectConcurrentID are the job's slots
	// (CI_CONCURRENT_ID, CI_CONCURRENT_PROJECT_ID): see [slots].
	concurrentID, projectConcurrentID int

	failure  Failure
	exitCode int
	err      error
	msg      string        // the failure as the trace's last line says it; "" means err's text
	timeout  time.Duration // the timeout the last line names: the job's, or RUNNER_SCRIPT_TIMEOUT
}

// scriptTimeout is RUNNER_SCRIPT_TIMEOUT (a Go duration such as "10m"), 0
// when unset or not understood.
func (x *run) scriptTimeout() time.Duration {
	v, ok := x.lookup("RUNNER_SCRIPT_TIMEOUT")
	if !ok {
		return 0
	}
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil || d <= 0 {
		return 0
	}
	return d
}

// fail records the job's failure unless one is recorded already (the
// job's own error wins, reference §13).
func (x *run) fail(f Failure, err error) {
	if x.failure == FailureNone {
		x.failure, x.err = f, err
	}
}

func (x *run) failed() bool { return x.failure != FailureNone }

// aborted returns the hard-stop failure, if any.
func (x *run) aborted() Failure {
	if x.node.Err() != nil {
		// The node is stopping. Its AfterFunc marks the job interrupted,
		// but it runs on its own goroutine and may come after the step
		// the stop killed has returned: mark it here too, so the killed
		// step reads as interrupted, not as a script failure (exit 137).
		x.h.Interrupt()
	}
	x.h.mu.Lock()
	defer x.h.mu.Unlock()
	return x.h.aborted
}

func (x *run) setScripts(p scriptPhase) {
	x.h.mu.Lock()
	defer x.h.mu.Unlock()
	x.h.scripts = p
}

func (x *run) canceled() bool {
	x.h.mu.Lock()
	defer x.h.mu.Unlock()
	return x.h.canceled
}

// warn writes a backend's warning, which may already begin "WARNING: ",
// as one warning line.
func (x *run) warn(w string) {
	x.tr.Warningln(strings.TrimPrefix(strings.TrimRight(w, "\n"), "WARNING: "))
}

// sectionStart opens a stage's section and reports the stage
// ([Config.OnStage]).
func (x *run) sectionStart(name string) {
	if f := x.r.cfg.OnStage; f != nil {
		f(x.spec.ID, name)
	}
	x.tr.SectionStart(name, trace.SectionOptions{})
}

// scriptStage is section for a stage gitlab-runner runs as a shell script
// on the job's context (executeStage): when that context ended with the
// job's timeout, its timeout warning follows the section's end.
func (x *run) scriptStage(ctx context.Context, name, title string, fn func()) {
	x.section(name, title, fn)
	if errors.Is(context.Cause(ctx), errTimeout) {
		x.tr.Warningln(name + " could not run to completion because the timeout was exceeded. For more control over job and script timeouts see: " + timeoutDocsURL)
	}
}

func (x *run) section(name, title string, fn func()) {
	x.sectionStart(name)
	x.tr.Title(title)
	fn()
	x.tr.SectionEnd(name)
}

// run executes the stages in gitlab-runner's order (STAGE-01).
func (x *run) run(ctx context.Context) Result {
	j := x.job
	x.header()

	// The job's timeout runs from the start (FAIL-03).
	timeout := time.Duration(j.TimeoutSecs) * time.Second
	if timeout <= 0 {
		timeout = 7200 * time.Second
	}
	x.timeout = timeout
	jobCtx, jobCancel := context.WithCancelCause(ctx)
	defer jobCancel(nil)
	timer := x.r.clk.AfterFunc(timeout, func() { jobCancel(errTimeout) })
	defer timer.Stop()

	prepared := x.prepareExecutor(jobCtx)
	if prepared {
		prepared = x.prepareScript(jobCtx)
	}
	// Once the job's own context ended (its timeout, an immediate cancel,
	// the node stopping), gitlab-runner runs no further stage: each one
	// returns at once on the ended context, so the trace goes straight
	// from the interrupted stage to the last line. A graceful cancel or
	// RUNNER_SCRIPT_TIMEOUT ends only the script, and the later stages
	// run.
	ended := func() bool { return x.aborted() != "" || errors.Is(context.Cause(jobCtx), errTimeout) }
	if prepared {
		sourcesOK := x.getSources(jobCtx) && x.restoreCache(jobCtx) && x.downloadArtifacts(jobCtx)
		if sourcesOK {
			x.userSteps(jobCtx)
			if !ended() {
				x.afterScript(ctx)
			}
		}
		if !ended() {
			x.archiveCache(ctx)
		}
		var outcomes []ArtifactOutcome
		if !ended() {
			outcomes = x.uploadArtifacts(ctx)
		}
		x.cleanupFileVariables(!ended())
		x.finalLine()
		res := x.finish()
		res.Artifacts = outcomes
		return res
	}
	x.finalLine()
	return x.finish()
}

func (x *run) header() {
	x.tr.Println("Running with vk " + x.r.cfg.Version)
	if x.r.cfg.NodeName != "" {
		line := "  on " + x.r.cfg.NodeName
		if x.r.cfg.SystemID != "" {
			line += ", system ID: " + x.r.cfg.SystemID
		}
		x.tr.Println(line)
	}
	if line := flagsLine(x.ff); line != "" {
		x.tr.Println("  feature flags: " + line)
	}
	if errs := flagErrors(x.job); errs != "" {
		x.tr.Warningln(errs) // gitlab-runner's printSettingErrors
	}
	for _, n := range x.job.Notices {
		switch n.Level {
		case "info":
			x.tr.Infoln(n.Text)
		case "warning":
			x.tr.Warningln(n.Text)
		case "error":
			x.tr.Errorln(n.Text)
		default:
			x.tr.Println(n.Text)
		}
	}
}

func (x *run) lookup(key string) (string, bool) { return job.Lookup(x.job.Variables, key) }

// runScript runs one generated script with the job's streams.
func (x *run) runScript(ctx context.Context, name, body string) (exec.RunResult, error) {
	o := x.tr.Stream(trace.StreamWork, trace.Stdout)
	e := x.tr.Stream(trace.StreamWork, trace.Stderr)
	res, err := x.ej.Run(ctx, exec.Script{Name: name, Body: body}, o, e)
	_ = o.Close()
	_ = e.Close()
	return res, err
}

func (x *run) writer() *scriptWriter {
	w := &scriptWriter{tmpDir: x.tmpDir,
		// gitlab-runner sections multi-line commands only when GitLab
		// asked for trace sections too.
		scriptSections: x.ff[ffScriptSections] && x.job.Trace.Sections,
		checkErrors:    x.ff[ffBashExitCodeCheck],
		legacyEval:     x.ff[ffLegacyBashEval],
		posixEscape:    x.ff[ffPosixlyCorrectEscapes],
	}
	if v, _ := x.lookup("CI_DEBUG_TRACE"); v == "true" {
		w.xtrace = true
	}
	return w
}
