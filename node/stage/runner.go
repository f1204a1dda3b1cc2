package stage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"runtime"
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
		MaskPhrases:   maskPhrases(j),
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

func maskPhrases(j *job.CiJob) []string {
	var out []string
	for _, v := range j.Variables {
		if v.Masked {
			out = append(out, v.Value)
		}
	}
	if j.Token != "" {
		out = append(out, j.Token)
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

// finish closes the trace, cleans the environment up and assembles the
// result.
func (x *run) finish() Result {
	if err := x.tr.Close(); err != nil {
		x.log.Warn("trace", slog.Any(logkey.Err, err))
	}
	if err := x.tr.Err(); err != nil && x.failure == FailureNone {
		// The trace could not be kept: the job's outcome cannot be shown.
		x.fail(FailureSystem, fmt.Errorf("%w: %w", ErrSystem, err))
	}
	res := Result{Failure: x.failure, Err: x.err, OutputLen: x.tr.Len(), Truncated: x.tr.Truncated()}
	if x.failure == FailureScript {
		res.ExitCode = x.exitCode
	}
	if x.ej != nil {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := x.ej.Cleanup(cctx); err != nil {
			x.log.Warn("cleanup", slog.Any(logkey.Err, err))
		}
		cancel()
		res.Usage = x.ej.Usage()
	}
	res.Usage.Size = x.size
	res.Usage.Wall = x.r.clk.Now().Sub(x.start) // driver's start to the end, cleanup included (NODE-14)
	return res
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

// prepareExecutor sizes the job and prepares its environment.
func (x *run) prepareExecutor(ctx context.Context) bool {
	ok := true
	x.section("prepare_executor", `Preparing the "vk" executor`, func() {
		exName, executor := x.r.cfg.ExecutorName, x.r.cfg.Executor
		if x.spec.Executor != nil {
			executor = x.spec.Executor
			if x.spec.ExecutorName != "" {
				exName = x.spec.ExecutorName
			}
		}
		x.tr.Println("Using the " + exName + " executor with bash...")
		for _, w := range x.spec.Warnings {
			x.warn(w)
		}
		in := exec.SizeInput{Default: x.spec.Reserved, Ceiling: x.r.cfg.Ceiling}
		in.CPUsVar, _ = x.lookup("MICROVM_CPUS")
		in.MemVar, _ = x.lookup("MICROVM_MEM")
		for _, s := range x.job.Steps {
			in.Script = append(in.Script, s.Script...)
		}
		var notes []string
		x.size, notes = exec.SizeJob(in)
		for _, n := range notes {
			x.tr.Warningln(n)
		}
		if msg := x.validate(); msg != "" {
			x.fail(FailureConfiguration, fmt.Errorf("%w: %s", ErrConfiguration, msg))
			x.msg = msg
			ok = false
			return
		}
		ej, err := executor.Prepare(ctx, exec.PrepareRequest{ID: x.spec.ID, Size: x.size})
		if err != nil {
			x.failStage(ctx, err, FailureSystem)
			ok = false
			return
		}
		x.ej = ej
		if wj, isW := ej.(interface{ Warnings() []string }); isW {
			// Backends' notes on the prepared environment: dropped service
			// aliases (DECISIONS 8), services that did not start.
			for _, w := range wj.Warnings() {
				x.warn(w)
			}
		}
		x.projectDir = path.Join(ej.BuildsDir(), projectPath(x.job))
		x.tmpDir = x.projectDir + ".tmp"
	})
	return ok
}

// validate refuses jobs the node cannot run as asked (FAIL-05); it returns
// why, or "".
func (x *run) validate() string {
	user := 0
	for _, st := range x.job.Steps {
		if st.Name != job.StepAfterScript {
			user++
		}
	}
	if user == 0 {
		return "the job has no script steps (run: jobs need step-runner, which this node does not support)"
	}
	if v, _ := x.lookup("GIT_STRATEGY"); v != "" && v != "clone" && v != "fetch" && v != "none" && v != "empty" {
		return fmt.Sprintf("unknown GIT_STRATEGY %q", v)
	}
	if v, _ := x.lookup("GIT_SUBMODULE_STRATEGY"); v != "" && v != "none" && v != "normal" && v != "recursive" {
		return fmt.Sprintf("unknown GIT_SUBMODULE_STRATEGY %q", v)
	}
	return ""
}

func projectPath(j *job.CiJob) string {
	p := path.Clean("/" + j.Job.ProjectPath)
	if p == "/" {
		return "project-" + strconv.FormatInt(j.Job.ProjectID, 10)
	}
	return p[1:]
}

// failStage records err as the stage's failure: timeout or cancellation
// when the job's context ended, a marked failure, or def.
func (x *run) failStage(ctx context.Context, err error, def Failure) {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errTimeout):
		x.fail(FailureTimeout, err)
	case x.aborted() != "":
		x.fail(x.aborted(), err)
	case errors.Is(err, ErrConfiguration):
		x.fail(FailureConfiguration, err)
	case errors.Is(err, ErrImagePull):
		x.fail(FailureImagePull, err)
	case errors.Is(err, ErrSystem), errors.Is(err, exec.ErrPrepare), errors.Is(err, exec.ErrStart):
		x.fail(FailureSystem, err)
	default:
		x.fail(def, err)
	}
}

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

func (x *run) prepareScript(ctx context.Context) bool {
	ok := true
	x.scriptStage(ctx, "prepare_script", "Preparing environment", func() {
		w := x.writer()
		w.line(`echo "Running on $(hostname)..."`)
		// As gitlab-runner's writePrepareScript: no GITLAB_ENV file or
		// masking database is left from an earlier job.
		w.rmFile(path.Join(x.tmpDir, gitlabEnvFile))
		w.rmFile(path.Join(x.tmpDir, "masking.db"))
		res, err := x.runScript(ctx, "prepare_script", w.finish())
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("%w: prepare script: exit code %d", ErrSystem, res.ExitCode)
		}
		if err != nil {
			x.failStage(ctx, err, FailureSystem)
			ok = false
		}
	})
	return ok
}

// mkProjectDir makes sure the project directory exists and belongs to the
// job's user after host-side transfers wrote into it.
func (x *run) mkProjectDir(ctx context.Context) error {
	if guest, err := x.guestMkdir(ctx); guest {
		return err
	}
	dir := x.ej.HostPath(x.projectDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("%w: %w", ErrSystem, err)
	}
	if err := x.ej.Adopt(dir); err != nil {
		return fmt.Errorf("%w: %w", ErrSystem, err)
	}
	return nil
}

func (x *run) getSources(ctx context.Context) bool {
	ok := true
	x.scriptStage(ctx, "get_sources", "Getting source from Git repository", func() {
		var err error
		strategy, _ := x.lookup("GIT_STRATEGY")
		switch {
		case strategy == "none" || strategy == "empty":
			w := x.writer()
			w.exports(x.exports("running"))
			// As gitlab-runner's handleGetSourcesStrategy: empty starts
			// from a new directory; both make it with MkDir, a command.
			if strategy == "empty" {
				w.notice("Skipping Git repository setup and creating an empty build directory")
				w.rmDir(x.projectDir)
			} else {
				w.notice("Skipping Git repository setup")
			}
			w.command("mkdir", "-p", x.projectDir)
			w.notice("Skipping Git checkout")
			w.notice("Skipping Git submodules setup")
			var res exec.RunResult
			res, err = x.runScript(ctx, "get_sources", w.finish())
			if err == nil && res.ExitCode != 0 {
				err = fmt.Errorf("get_sources script: exit code %d", res.ExitCode)
			}
		case x.r.cfg.Transfers == nil:
			x.tr.Warningln("Skipping Git repository setup: this node has no transfer service; the project directory is empty")
			err = x.mkProjectDir(ctx)
		default:
			err = x.runHook(ctx, job.HookPreGetSources, "pre_clone_script", false)
			if err == nil {
				err = x.attempt(ctx, "GET_SOURCES_ATTEMPTS", func() error {
					return x.intoProject(ctx, "sources", func(dir string) error {
						return x.r.cfg.Transfers.GetSources(ctx, x.job, dir, x.tr)
					})
				})
			}
			if err == nil {
				err = x.mkProjectDir(ctx)
			}
			if err == nil {
				err = x.runHook(ctx, job.HookPostGetSources, "post_clone_script", true)
			}
		}
		var he *hookError
		if errors.As(err, &he) {
			x.fail(FailureScript, err)
			ok = false
			return
		}
		if err != nil {
			x.tr.Errorln("Getting sources failed: " + err.Error())
			x.failStage(ctx, err, FailureExternalDependency)
			ok = false
		}
	})
	return ok
}

func cachePolicyPulls(c job.Cache) bool { return c.Policy == "" || strings.Contains(c.Policy, "pull") }
func cachePolicyPushes(c job.Cache) bool {
	return c.Policy == "" || strings.HasSuffix(c.Policy, "push")
}

func (x *run) restoreCache(ctx context.Context) bool {
	pulls := false
	for _, c := range x.job.Caches {
		pulls = pulls || cachePolicyPulls(c)
	}
	if !pulls {
		return true
	}
	ok := true
	x.scriptStage(ctx, "restore_cache", "Restoring cache", func() {
		if x.r.cfg.Transfers == nil {
			x.tr.Warningln("Restoring cache is not supported on this node (no transfer service); continuing without it")
			return
		}
		err := x.attempt(ctx, "RESTORE_CACHE_ATTEMPTS", func() error {
			return x.intoProject(ctx, "cache", func(dir string) error {
				return x.r.cfg.Transfers.RestoreCache(ctx, x.job, dir, x.tr)
			})
		})
		if err == nil {
			err = x.mkProjectDir(ctx)
		}
		if err != nil {
			x.tr.Errorln("Restoring cache failed: " + err.Error())
			x.failStage(ctx, err, FailureExternalDependency)
			ok = false
		}
	})
	return ok
}

func (x *run) downloadArtifacts(ctx context.Context) bool {
	has := false
	for _, d := range x.job.Dependencies {
		has = has || d.ArtifactsFile != nil
	}
	if !has {
		return true
	}
	ok := true
	x.scriptStage(ctx, "download_artifacts", "Downloading artifacts", func() {
		if x.r.cfg.Transfers == nil {
			x.tr.Warningln("Downloading artifacts is not supported on this node (no transfer service); continuing without them")
			return
		}
		err := x.attempt(ctx, "ARTIFACT_DOWNLOAD_ATTEMPTS", func() error {
			return x.intoProject(ctx, "artifacts", func(dir string) error {
				return x.r.cfg.Transfers.DownloadArtifacts(ctx, x.job, dir, x.tr)
			})
		})
		if err == nil {
			err = x.mkProjectDir(ctx)
		}
		if err != nil {
			x.tr.Errorln("Downloading artifacts failed: " + err.Error())
			x.failStage(ctx, err, FailureExternalDependency)
			ok = false
		}
	})
	return ok
}

// attempt runs fn up to the number of attempts the job variable key asks
// for (1 to 10, default 1, as gitlab-runner's GET_SOURCES_ATTEMPTS and
// friends), stopping at the first success or when ctx ends.
func (x *run) attempt(ctx context.Context, key string, fn func() error) error {
	n := 1
	if v, ok := x.lookup(key); ok {
		if k, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && k >= 1 && k <= 10 {
			n = k
		} else {
			x.tr.Warningln(fmt.Sprintf("%s=%q is not a number from 1 to 10; trying once", key, v))
		}
	}
	var err error
	for i := 1; i <= n; i++ {
		if err = fn(); err == nil || ctx.Err() != nil {
			return err
		}
		if i < n {
			x.tr.Warningln(fmt.Sprintf("%s (attempt %d of %d); retrying", err, i, n))
		}
	}
	return err
}

// stepRuns decides whether a user step runs given its `when` and whether
// an earlier step failed.
func stepRuns(when string, failed bool) bool {
	switch when {
	case "always":
		return true
	case "on_failure":
		return failed
	default:
		return !failed
	}
}

func (x *run) userSteps(ctx context.Context) {
	x.setScripts(inScripts)
	defer x.setScripts(afterScripts)
	for _, st := range x.job.Steps {
		if st.Name == job.StepAfterScript {
			continue
		}
		if x.aborted() != "" || ctx.Err() != nil {
			return // nothing more runs after an abort or the timeout
		}
		if x.canceled() {
			// Canceled between two steps: as gitlab-runner once its
			// script context ended.
			if x.failure != FailureCanceled {
				x.tr.Warningln("script canceled externally (UI, API)")
			}
			x.fail(FailureCanceled, errCanceled)
			return
		}
		if !stepRuns(st.When, x.failed()) {
			continue
		}
		name := "step_" + strings.ToLower(st.Name)
		x.sectionStart(name)
		x.tr.Title(`Executing "` + name + `" stage of the job script`)
		w := x.writer()
		w.exports(x.exports("running"))
		w.cd(x.projectDir)
		w.commands("script_step", st.Script...)
		stepCtx, stepStop := context.WithCancelCause(ctx)
		x.h.mu.Lock()
		x.h.current, x.h.inUserStep, x.h.stepStop = x.ej, true, stepStop
		alreadyCanceled := x.h.canceled
		x.h.mu.Unlock()
		if alreadyCanceled {
			x.h.Cancel(exec.Graceful)
		}
		var scriptTimer clock.Timer
		if d := x.scriptTimeout(); d > 0 {
			scriptTimer = x.r.clk.AfterFunc(d, func() { stepStop(errTimeout) })
		}
		res, err := x.runScript(stepCtx, name, w.finish())
		if scriptTimer != nil {
			scriptTimer.Stop()
		}
		x.h.mu.Lock()
		x.h.current, x.h.inUserStep, x.h.stepStop = nil, false, nil
		if x.h.graceTimer != nil {
			x.h.graceTimer.Stop()
			x.h.graceTimer = nil
		}
		x.h.mu.Unlock()
		stepStop(nil)
		x.tr.SectionEnd(name)
		switch {
		case err != nil:
			x.tr.Errorln(err.Error())
			x.failStage(ctx, err, FailureSystem)
		case errors.Is(context.Cause(ctx), errTimeout), errors.Is(context.Cause(stepCtx), errTimeout):
			x.tr.Warningln(name + " could not run to completion because the timeout was exceeded. For more control over job and script timeouts see: " + timeoutDocsURL)
			if !errors.Is(context.Cause(ctx), errTimeout) {
				x.timeout = x.scriptTimeout()
				if x.failure == FailureNone {
					// gitlab-runner's ErrJobScriptTimeout wrapping the
					// script context's error.
					x.msg = "script timeout: context deadline exceeded"
				}
			}
			x.fail(FailureTimeout, fmt.Errorf("%w after %v", errTimeout, x.timeout))
		case x.aborted() != "":
			x.fail(x.aborted(), context.Cause(ctx))
		case x.canceled():
			x.tr.Warningln("script canceled externally (UI, API)")
			x.fail(FailureCanceled, errCanceled)
		case res.ExitCode != 0:
			if res.OOMKilled {
				x.tr.Warningln(fmt.Sprintf("%s ran out of memory: a process was killed for using more than the job's %d MiB", name, x.size.MemMiB))
			}
			if x.failure == FailureNone {
				x.exitCode = exitCode(res)
			}
			x.fail(FailureScript, fmt.Errorf("%s: exit code %d", name, exitCode(res)))
		}
	}
}

func exitCode(res exec.RunResult) int {
	if res.ExitCode < 0 {
		return 137 // killed: what a shell reports for SIGKILL
	}
	return res.ExitCode
}

// jobStatus is CI_JOB_STATUS for after_script.
func (x *run) jobStatus() string {
	switch x.failure {
	case FailureNone:
		return "success"
	case FailureTimeout:
		return "timedout"
	case FailureCanceled:
		return "canceled"
	default:
		return "failed"
	}
}

func (x *run) afterScript(ctx context.Context) {
	var st *job.Step
	for i := range x.job.Steps {
		if x.job.Steps[i].Name == job.StepAfterScript {
			st = &x.job.Steps[i]
			break
		}
	}
	if st == nil || len(st.Script) == 0 || x.aborted() != "" {
		return
	}
	limit := DefaultAfterScriptTimeout
	if v, ok := x.lookup("RUNNER_AFTER_SCRIPT_TIMEOUT"); ok {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			limit = d
		}
	}
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	t := x.r.clk.AfterFunc(limit, func() { cancel(errTimeout) })
	defer t.Stop()
	var res exec.RunResult
	var err error
	x.section("after_script", "Running after_script", func() {
		w := x.writer()
		w.exports(x.exports(x.jobStatus()))
		w.cd(x.projectDir)
		w.notice("Running after script...")
		w.commands("after_script_step", st.Script...)
		res, err = x.runScript(actx, "after_script", w.finish())
	})
	// Like gitlab-runner, the outcome is reported after the section ends.
	var why string
	switch {
	case err != nil:
		why = err.Error()
	case errors.Is(context.Cause(actx), errTimeout):
		why = "execution took longer than " + limit.String()
	case x.aborted() != "":
		why = "context canceled"
	case res.ExitCode != 0:
		why = "exit status " + strconv.Itoa(exitCode(res))
	default:
		return
	}
	if v, _ := x.lookup("AFTER_SCRIPT_IGNORE_ERRORS"); v == "false" {
		x.tr.Errorln("after_script failed: " + why)
		if x.failure == FailureNone {
			x.exitCode = exitCode(res)
		}
		x.fail(FailureScript, errors.New("after_script: "+why))
		return
	}
	x.tr.Warningln("after_script failed, but job will continue unaffected: " + why)
}

func (x *run) archiveCache(ctx context.Context) {
	failed := x.failed()
	applies := false
	for _, c := range x.job.Caches {
		when := c.When
		if when == "" {
			when = "on_success"
		}
		if cachePolicyPushes(c) && (when == "always" || (when == "on_failure") == failed) {
			applies = true
		}
	}
	if !applies {
		return
	}
	name, title := "archive_cache", "Saving cache for successful job"
	if failed {
		name, title = "archive_cache_on_failure", "Saving cache for failed job"
	}
	x.section(name, title, func() {
		if x.r.cfg.Transfers == nil {
			x.tr.Warningln("Saving cache is not supported on this node (no transfer service); the cache is not saved")
			return
		}
		err := x.fromProject(ctx, func(dir string) error {
			return x.r.cfg.Transfers.ArchiveCache(ctx, x.job, dir, failed, x.tr)
		})
		if err != nil {
			x.tr.Errorln("Saving cache failed: " + err.Error())
			x.failStage(ctx, err, FailureExternalDependency)
		}
	})
}

func (x *run) uploadArtifacts(ctx context.Context) []ArtifactOutcome {
	failed := x.failed()
	applies := false
	for _, a := range x.job.Artifacts {
		when := a.When
		if when == "" {
			when = "on_success"
		}
		if when == "always" || (when == "on_failure") == failed {
			applies = true
		}
	}
	if !applies {
		return nil
	}
	name, title := "upload_artifacts_on_success", "Uploading artifacts for successful job"
	if failed {
		name, title = "upload_artifacts_on_failure", "Uploading artifacts for failed job"
	}
	var out []ArtifactOutcome
	x.section(name, title, func() {
		if x.r.cfg.Transfers == nil {
			x.tr.Warningln("Uploading artifacts is not supported on this node (no transfer service); no artifacts are uploaded")
			return
		}
		err := x.fromProject(ctx, func(dir string) error {
			var err error
			out, err = x.r.cfg.Transfers.UploadArtifacts(ctx, x.job, dir, failed, x.tr)
			return err
		})
		if err != nil {
			x.tr.Errorln("Uploading artifacts failed: " + err.Error())
			x.failStage(ctx, err, FailureExternalDependency)
		}
	})
	return out
}

// cleanupFileVariables removes the file variables, in its own section when
// the stage runs as gitlab-runner's would (shown), silently otherwise: the
// files hold secrets and never outlive the job.
func (x *run) cleanupFileVariables(shown bool) {
	remove := func() {
		if err := os.RemoveAll(x.ej.HostPath(x.tmpDir)); err != nil {
			x.log.Warn("remove file variables", slog.Any(logkey.Err, err))
		}
	}
	if !shown {
		remove()
		return
	}
	x.section("cleanup_file_variables", "Cleaning up project directory and file based variables", remove)
}

// finalLine writes gitlab-runner's last line for the outcome, on a new
// runner stream as gitlab-runner does (its entry's flag is ' ', not the
// '+' that follows the last section's end marker).
func (x *run) finalLine() {
	if err := x.tr.NewRunnerStream(); err != nil {
		x.log.Warn("trace", slog.Any(logkey.Err, err))
	}
	if f := x.aborted(); f != "" && (x.failure == FailureNone || x.failure == f) {
		x.failure = f
		if f == FailureInterrupted {
			x.err = errInterrupted
			x.tr.Errorln("Job failed (system failure): the node stopped the job")
			return
		}
	}
	if x.failure == FailureNone && x.canceled() {
		x.fail(FailureCanceled, errCanceled)
	}
	switch x.failure {
	case FailureNone:
		x.tr.Infoln("Job succeeded")
	case FailureScript:
		x.tr.Errorln("Job failed: exit status " + strconv.Itoa(x.exitCode))
	case FailureTimeout:
		if x.msg != "" {
			x.tr.Errorln("Job failed: " + x.msg)
			return
		}
		// gitlab-runner formats the time.Duration with %v, then "seconds".
		x.tr.Errorln(fmt.Sprintf("Job failed: execution took longer than %v seconds", x.timeout))
	case FailureCanceled:
		x.tr.Errorln("Job failed: canceled")
	case FailureSystem:
		x.tr.Errorln("Job failed (system failure): " + x.failText())
	default:
		x.tr.Errorln("Job failed: " + x.failText())
	}
}

func (x *run) failText() string {
	switch {
	case x.msg != "":
		return x.msg
	case x.err != nil:
		return x.err.Error()
	}
	return "unknown error"
}

// exports returns the variables every stage script exports (STAGE-05), in
// gitlab-runner's GetAllVariables order: every feature flag with its
// resolved value; CI_JOB_IMAGE when the job names one; the node's own
// (CI_BUILDS_DIR, CI_PROJECT_DIR, CI_CONCURRENT_ID, CI_CONCURRENT_PROJECT_ID,
// CI_SERVER, CI_JOB_STATUS, CI_JOB_TIMEOUT,
// CI_SERVER_TLS_CA_FILE as a file); the job's in order (expanded unless
// raw; file variables as files; its FF_* give way to the resolved ones);
// then CI_DISPOSABLE_ENVIRONMENT, the node's CI_RUNNER_VERSION and
// CI_RUNNER_EXECUTABLE_ARCH and RUNNER_TEMP_PROJECT_DIR.
func (x *run) exports(status string) []exportVar {
	type v struct {
		key, value string
		file, raw  bool
	}
	all := make([]v, 0, len(featureFlags)+len(x.job.Variables)+16)
	for _, f := range featureFlags {
		all = append(all, v{key: f.name, value: strconv.FormatBool(x.ff[f.name]), raw: true})
	}
	if img := x.job.Image; img != nil && img.Name != "" {
		all = append(all, v{key: "CI_JOB_IMAGE", value: img.Name, raw: true})
	}
	timeout := x.job.TimeoutSecs
	if timeout <= 0 {
		timeout = 7200
	}
	all = append(all,
		v{key: "CI_BUILDS_DIR", value: x.ej.BuildsDir(), raw: true},
		v{key: "CI_PROJECT_DIR", value: x.projectDir, raw: true},
		v{key: "CI_CONCURRENT_ID", value: strconv.Itoa(x.concurrentID), raw: true},
		v{key: "CI_CONCURRENT_PROJECT_ID", value: strconv.Itoa(x.projectConcurrentID), raw: true},
		v{key: "CI_SERVER", value: "yes", raw: true},
		v{key: "CI_JOB_STATUS", value: status, raw: true},
		v{key: "CI_JOB_TIMEOUT", value: strconv.FormatInt(timeout, 10), raw: true},
	)
	if x.job.ServerCAPEM != "" {
		all = append(all, v{key: "CI_SERVER_TLS_CA_FILE", value: x.job.ServerCAPEM, file: true, raw: true})
	}
	for _, jv := range x.job.Variables {
		if isFeatureFlag(jv.Key) {
			continue
		}
		all = append(all, v{key: jv.Key, value: jv.Value, file: jv.File, raw: jv.Raw})
	}
	// Each job has an environment of its own, removed after it: the
	// disposable kind, as gitlab-runner's Docker executor says.
	all = append(all,
		v{key: "CI_DISPOSABLE_ENVIRONMENT", value: "true", raw: true},
		v{key: "CI_RUNNER_VERSION", value: x.r.cfg.Version, raw: true},
		v{key: "CI_RUNNER_EXECUTABLE_ARCH", value: runtime.GOOS + "/" + runtime.GOARCH, raw: true},
		v{key: "RUNNER_TEMP_PROJECT_DIR", value: x.tmpDir, raw: true},
	)
	// Expansion sees every variable, the last of a key winning, a file
	// variable as its path.
	lookup := func(key string) (string, bool) {
		for i := len(all) - 1; i >= 0; i-- {
			if all[i].key == key {
				if all[i].file {
					return path.Join(x.tmpDir, key), true
				}
				return all[i].value, true
			}
		}
		return "", false
	}
	out := make([]exportVar, 0, len(all))
	for _, e := range all {
		val := e.value
		if !e.raw {
			val = job.Expand(val, lookup)
		}
		out = append(out, exportVar{Key: e.key, Value: val, File: e.file})
	}
	return out
}
