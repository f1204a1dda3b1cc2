package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"time"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/node/exec"
	"github.com/vk-ci/vk/node/journal"
	"github.com/vk-ci/vk/node/ledger"
	"github.com/vk-ci/vk/node/spool"
	"github.com/vk-ci/vk/node/stage"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
	"github.com/vk-ci/vk/proto/job"
)

// validJobID bounds what a job ID may be: it names a spool directory and an
// executor environment.
var validJobID = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// jobRun is one job the node holds until the hub records its result.
//
//	waiting (ledger queue) ──granted──▶ running ──ended──▶ finished ──recorded──▶ (gone)
//	   └──────────── cancel ──────────────────────────────────▲
//
// Fields are guarded by Agent.mu unless noted.
type jobRun struct {
	id      string
	start   *dispatch.Start // nil for a job recovered from the journal
	sp      *spool.Spool    // safe for concurrent use itself
	size    exec.Size
	guest   *dispatch.Guest
	reserve exec.Size // the envelope the stage runner defaults to
	// received is when the node received start: the lifetime of the job's
	// registry token counts from it, for its cache stages (cache) and its
	// guest registry proxy alike (XFER-13). Zero for a recovered job,
	// which never runs again.
	received time.Time
	// cache is the start's own cache repository and token with its
	// expiry counted from the start's receipt (XFER-13); nil without.
	cache *stage.CacheRegistry

	egress   *egressMeter  // nil when the job's egress is not measured; detached at finish
	h        *stage.Handle // set once running
	stage    string        // last stage seen in the trace
	cancel   exec.CancelMode
	granted  chan struct{} // closed when the ledger granted the job's size
	canceled chan struct{} // closed by a cancel before the job ran
	wake     chan struct{} // capacity 1: the sender looks again

	sendOff     int64            // next output offset to send
	gen         uint64           // bumped whenever sendOff changes
	rewind      bool             // new session: the next ack sets sendOff, up or down (NSESS-24)
	result      *dispatch.Result // set once finished
	resultAt    time.Time        // when the result is due (again)
	resultEvery time.Duration    // the repeat interval; 0 before the first send
	recorded    bool
}

func newJobRun(id string, sp *spool.Spool) *jobRun {
	return &jobRun{id: id, sp: sp, granted: make(chan struct{}), canceled: make(chan struct{}), wake: make(chan struct{}, 1)}
}

func (jr *jobRun) kick() {
	select {
	case jr.wake <- struct{}{}:
	default:
	}
}

func (jr *jobRun) signalCancel() {
	select {
	case <-jr.canceled:
	default:
		close(jr.canceled)
	}
}

// onStart admits, journals and runs a job (NSESS-07, NODE-06..09).
func (a *Agent) onStart(m *dispatch.Start) {
	received := a.clk.Now()
	refuse := func(r dispatch.RefusalReason, msg string) {
		a.send(&dispatch.JobUpdate{Job: m.Job, State: dispatch.JobRefused, Reason: r, Message: msg})
		a.log.Info("start refused", logkey.JobID, m.Job, "reason", r, "message", msg)
	}
	if !validJobID.MatchString(m.Job) {
		refuse(dispatch.RefusalInvalid, "job ID must match "+validJobID.String())
		return
	}
	// A redelivered start is answered from the journal, never run twice
	// (NODE-06).
	if e, ok := a.journal.Get(m.Job); ok {
		a.answerFromJournal(e)
		return
	}
	if err := m.Spec.Validate(); err != nil || m.Spec.GitLabCI == nil {
		refuse(dispatch.RefusalInvalid, fmt.Sprintf("spec: %v", err))
		return
	}
	a.mu.Lock()
	rep := a.led.Start(a.now(), m.Job, m.Reservation, toLedger(m.Envelope))
	a.mu.Unlock()
	a.kickLease()
	if !rep.Accepted {
		refuse(dispatch.RefusalReason(rep.Reason), rep.Message)
		return
	}
	undo := func(why string, err error) {
		a.mu.Lock()
		a.led.Finish(m.Job)
		a.wakeLocked()
		a.mu.Unlock()
		a.log.Error("start failed", logkey.JobID, m.Job, "step", why, logkey.Err, err)
		refuse(dispatch.RefusalNotReady, why+": "+err.Error())
	}
	sp, err := spool.Open(filepath.Join(a.spools, m.Job), spool.Options{Limit: a.cfg.Output.SpoolLimit.Bytes()})
	if err != nil {
		undo("spool", err)
		return
	}
	// The journal keeps the start without its secrets: a job is never
	// resumed from it (the process executor's jobs die with the node), so
	// its tokens need not touch the disk (XFER-16).
	spec, err := json.Marshal(m.Redacted())
	if err == nil {
		_, _, err = a.journal.Accept(m.Job, m.Reservation, spec)
	}
	if err != nil {
		sp.Remove()
		undo("journal", err)
		return
	}
	jr := newJobRun(m.Job, sp)
	jr.start, jr.received = m, received
	jr.cache = cacheRegistry(m, received)
	granted := rep.Granted
	jr.reserve = exec.Size{CPUs: int(granted.CPUs), MemMiB: granted.MemBytes >> 20}
	jr.size = a.sizeJob(m.Spec.GitLabCI, jr.reserve)
	jr.guest = &dispatch.Guest{CPUs: jr.size.CPUs, MemMiB: jr.size.MemMiB}
	want := granted
	if jr.size.CPUs > 0 {
		want.CPUs = int64(jr.size.CPUs)
	}
	if jr.size.MemMiB > 0 {
		want.MemBytes = jr.size.MemMiB << 20
	}

	a.mu.Lock()
	a.jobs[m.Job] = jr
	a.send(&dispatch.JobUpdate{Job: m.Job, State: dispatch.JobAccepted})
	_, waiting, err := a.led.Resize(m.Job, want)
	if err != nil {
		a.log.Error("ledger resize", logkey.JobID, m.Job, logkey.Err, err)
	}
	if !waiting {
		close(jr.granted)
	}
	a.wakeLocked()
	a.broadcastLocked()
	a.follow(jr)
	a.mu.Unlock()
	a.log.Info("job accepted", logkey.JobID, m.Job, logkey.Reservation, m.Reservation,
		"converted", rep.Converted, "cpus", jr.size.CPUs, "mem_mib", jr.size.MemMiB, "waiting", waiting)
}

// sizeJob sizes j as the stage runner will (NODE-09, DECISIONS 9).
func (a *Agent) sizeJob(j *job.CiJob, reserve exec.Size) exec.Size {
	in := exec.SizeInput{Default: reserve, Ceiling: exec.Size{CPUs: int(a.capTotal.CPUs), MemMiB: a.capTotal.MemBytes >> 20}}
	in.CPUsVar, _ = job.Lookup(j.Variables, "MICROVM_CPUS")
	in.MemVar, _ = job.Lookup(j.Variables, "MICROVM_MEM")
	for _, s := range j.Steps {
		in.Script = append(in.Script, s.Script...)
	}
	size, _ := exec.SizeJob(in)
	return size
}

// answerFromJournal answers a start the node already journaled (NODE-06).
func (a *Agent) answerFromJournal(e journal.Entry) {
	a.send(&dispatch.JobUpdate{Job: e.Job, State: dispatch.JobAccepted})
	a.mu.Lock()
	defer a.mu.Unlock()
	jr := a.jobs[e.Job]
	switch {
	case e.Phase == journal.PhaseFinished || e.Phase == journal.PhaseRecorded:
		a.send(&dispatch.JobUpdate{Job: e.Job, State: dispatch.JobFinished})
		if jr != nil {
			jr.resultAt, jr.resultEvery = a.clk.Now(), 0
			jr.kick()
		}
	case jr != nil && jr.stage != "":
		a.send(&dispatch.JobUpdate{Job: e.Job, State: dispatch.JobRunning, Stage: jr.stage, Guest: jr.guest})
	}
	a.log.Info("redelivered start answered from the journal", logkey.JobID, e.Job, "phase", e.Phase)
}

// wakeLocked starts jobs the ledger granted their rest (NODE-09).
func (a *Agent) wakeLocked() {
	for _, id := range a.led.Granted() {
		if jr := a.jobs[id]; jr != nil {
			close(jr.granted)
		}
	}
}

// follow starts jr's goroutines: the run (unless finished) and the sender.
func (a *Agent) follow(jr *jobRun) {
	if jr.result == nil {
		a.jobsWG.Add(1)
		go func() { defer a.jobsWG.Done(); a.run(jr) }()
	}
	a.jobsWG.Add(1)
	go func() { defer a.jobsWG.Done(); a.sender(jr) }()
}

// run waits for the ledger, runs the stages and finishes the job.
func (a *Agent) run(jr *jobRun) {
	select {
	case <-jr.granted:
	case <-jr.canceled:
		a.finish(jr, stage.Result{Failure: stage.FailureCanceled, Err: errors.New("canceled before it started")})
		return
	case <-a.jobsCtx.Done():
		a.finish(jr, stage.Result{Failure: stage.FailureInterrupted, Err: errors.New("node stopped before the job started")})
		return
	}
	w := &spoolWriter{a: a, jr: jr}
	ex, exName, warns := a.be.choose(jr.start.Spec.GitLabCI, jr.start, jr.received)
	var src egressSource
	if _, refused := ex.(refuseExecutor); exName == BackendOCI && !refused {
		// The job's own network namespace: its counters are the job's
		// (NSESS-17). The process backend shares the host's and cannot
		// tell a job's traffic from the host's.
		src = a.ociEgress(jr.id)
	}
	if a.opts.egressSource != nil {
		src = a.opts.egressSource(jr.id)
	}
	var egressTimer clock.Timer
	if src != nil {
		a.mu.Lock()
		jr.egress = &egressMeter{src: src}
		a.mu.Unlock()
		egressTimer = a.clk.NewTimer(EgressEvery)
	}
	h, err := a.runner.Start(a.jobsCtx, stage.Spec{ID: jr.id, Job: jr.start.Spec.GitLabCI, Reserved: jr.reserve, Out: w,
		Executor: ex, ExecutorName: exName, Warnings: warns, WithoutCaches: a.withoutCaches(jr.start), Cache: jr.cache})
	if err != nil {
		if egressTimer != nil {
			egressTimer.Stop()
		}
		a.finish(jr, stage.Result{Failure: stage.FailureSystem, Err: err})
		return
	}
	a.mu.Lock()
	jr.h = h
	if jr.cancel != 0 {
		h.Cancel(jr.cancel)
	}
	if jr.stage == "" {
		// The runner reports prepare_executor through onStage as it
		// starts; this covers a start that has not got there yet.
		jr.stage = "prepare_executor"
		a.send(&dispatch.JobUpdate{Job: jr.id, State: dispatch.JobRunning, Stage: jr.stage, Guest: jr.guest})
	}
	a.broadcastLocked()
	a.mu.Unlock()
	if src != nil {
		a.jobsWG.Add(1)
		go func() { defer a.jobsWG.Done(); a.egressLoop(jr, h.Done(), egressTimer) }()
	}
	<-h.Done()
	a.finish(jr, h.Result())
}

// finish ends the spool, journals the result and frees the ledger; the
// sender sends the result once all output is acked (NODE-13).
func (a *Agent) finish(jr *jobRun, res stage.Result) {
	a.mu.Lock()
	egress := jr.finalEgressLocked()
	jr.egress = nil // no sample after this one (NSESS-19: the result's is the last)
	a.mu.Unlock()
	outLen, err := jr.sp.Finish()
	if err != nil {
		a.log.Error("spool finish", logkey.JobID, jr.id, logkey.Err, err)
		outLen = jr.sp.Status().Produced
	}
	wire := wireResult(res, outLen)
	b, _ := json.Marshal(journaledResult{JobResult: wire, Egress: egress})
	if err := a.journal.Finished(jr.id, b); err != nil {
		a.log.Error("journal finished", logkey.JobID, jr.id, logkey.Err, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.led.Finish(jr.id); err != nil && !errors.Is(err, ledger.ErrUnknownJob) {
		a.log.Error("ledger finish", logkey.JobID, jr.id, logkey.Err, err)
	}
	a.wakeLocked()
	a.checkDrainedLocked()
	jr.result = &dispatch.Result{Job: jr.id, Result: wire, Egress: egress}
	jr.resultAt, jr.resultEvery = a.clk.Now(), 0
	a.send(&dispatch.JobUpdate{Job: jr.id, State: dispatch.JobFinished})
	jr.kick()
	a.broadcastLocked()
	a.metrics.finished.WithLabelValues(failureLabel(wire.Failure)).Inc()
	a.log.Info("job finished", logkey.JobID, jr.id, "failure", wire.Failure, "output_len", outLen)
}

// journaledResult is what the journal keeps of a finished job: the
// result and its final egress report, so a result resent after a restart
// still carries it.
type journaledResult struct {
	client.JobResult
	Egress *dispatch.EgressReport `json:"egress,omitempty"`
}

func failureLabel(f client.Failure) string { return f.MetricLabel() }

// wireResult converts the stage runner's result.
func wireResult(r stage.Result, outLen int64) client.JobResult {
	w := client.JobResult{Failure: client.Failure(r.Failure), OutputLen: outLen}
	if r.Err != nil {
		w.Message = r.Err.Error()
	}
	if r.Failure == stage.FailureScript {
		code := r.ExitCode
		w.ExitCode = &code
	}
	if r.Usage.Wall > 0 || r.Usage.Size != (exec.Size{}) {
		w.Usage = &client.Usage{
			WallMS: r.Usage.Wall.Milliseconds(), CPUMS: r.Usage.CPU.Milliseconds(),
			PeakMemBytes: r.Usage.PeakMemBytes, CPUs: r.Usage.Size.CPUs, MemMiB: r.Usage.Size.MemMiB,
		}
	}
	for _, o := range r.Artifacts {
		u := client.ArtifactUpload{Name: o.Name, ArtifactType: o.Type, SizeBytes: o.Bytes, Message: o.Err}
		switch {
		case o.Uploaded:
			u.Outcome = client.ArtifactUploaded
		case o.Err != "":
			u.Outcome = client.ArtifactFailed
		default:
			u.Outcome = client.ArtifactSkipped
		}
		w.Artifacts = append(w.Artifacts, u)
	}
	return w
}

// sender streams jr's output from the spool (≤ 256 KiB a frame, ≤ 4 MiB
// unacked, NODE-11) while the session is up, then repeats the result
// once all of it is acked (NODE-13) until recorded (NSESS-16).
func (a *Agent) sender(jr *jobRun) {
	defer func() {
		a.mu.Lock()
		recorded := jr.recorded
		a.mu.Unlock()
		if !recorded {
			return
		}
		if err := jr.sp.Remove(); err != nil {
			a.log.Warn("spool remove", logkey.JobID, jr.id, logkey.Err, err)
		}
		a.mu.Lock()
		if a.jobs[jr.id] == jr {
			delete(a.jobs, jr.id)
		}
		a.broadcastLocked()
		a.mu.Unlock()
	}()
	for {
		var timer <-chan time.Time
		var t interface{ Stop() bool }
		a.mu.Lock()
		if jr.recorded {
			a.mu.Unlock()
			return
		}
		if a.connected {
			off, gen := jr.sendOff, jr.gen
			a.mu.Unlock()
			// ReadFrom may fsync: not under the agent's lock.
			chunk, err := jr.sp.ReadFrom(off, spool.MaxChunk)
			if err != nil {
				a.log.Error("spool read", logkey.JobID, jr.id, "offset", off, logkey.Err, err)
			}
			a.mu.Lock()
			if jr.gen != gen || !a.connected {
				a.mu.Unlock()
				continue // the offset moved under us: read again
			}
			if len(chunk) > 0 {
				a.send(&dispatch.Output{Job: jr.id, Offset: off, Data: chunk})
				jr.sendOff = off + int64(len(chunk))
				jr.gen++
				a.mu.Unlock()
				continue
			}
			if jr.result != nil && jr.sp.AllAcked() {
				now := a.clk.Now()
				if !now.Before(jr.resultAt) {
					a.send(jr.result)
					jr.resultEvery = min(max(2*jr.resultEvery, a.retry), MaxResultRetry)
					jr.resultAt = now.Add(jr.resultEvery)
				}
				tm := a.clk.NewTimer(jr.resultAt.Sub(now))
				timer, t = tm.C(), tm
			}
		}
		a.mu.Unlock()
		select {
		case <-jr.sp.Ready():
		case <-jr.wake:
		case <-timer:
		case <-a.runCtx.Done():
			if t != nil {
				t.Stop()
			}
			return
		}
		if t != nil {
			t.Stop()
		}
	}
}

// spoolWriter is the stage runner's Out: the trace into the job's spool.
type spoolWriter struct {
	a  *Agent
	jr *jobRun
}

func (w *spoolWriter) Write(p []byte) (int, error) {
	a := w.a
	// Append blocks while the job's unacked output is at the spool limit;
	// once the node interrupts its jobs it blocks no more, so an
	// interrupted job can end while the hub is unreachable.
	if _, err := w.jr.sp.Append(a.jobsCtx, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// onStage is the stage runner's hook (stage.Config.OnStage): each stage
// of a job as it starts.
func (a *Agent) onStage(id, name string) {
	a.mu.Lock()
	jr := a.jobs[id]
	a.mu.Unlock()
	if jr != nil {
		a.stageStarted(jr, name)
		a.sampleEgress(jr) // NSESS-20: at each stage start
	}
}

// stageStarted journals and reports a new stage (NSESS-14, NSESS-18).
func (a *Agent) stageStarted(jr *jobRun, name string) {
	a.mu.Lock()
	if jr.stage == name {
		a.mu.Unlock()
		return
	}
	jr.stage = name
	a.send(&dispatch.JobUpdate{Job: jr.id, State: dispatch.JobRunning, Stage: name, Guest: jr.guest})
	a.mu.Unlock()
	if err := a.journal.Running(jr.id, name); err != nil {
		a.log.Warn("journal running", logkey.JobID, jr.id, logkey.Err, err)
	}
}

// cacheRegistry is start s's own cache repository and registry token
// (XFER-13), nil when it carries none; the token's lifetime counts from
// received, the start's receipt (no wall-clock time crosses the wire).
// The repository's validity and the token's expiry are checked by each
// cache stage, which skips with a warning (XFER-14).
func cacheRegistry(s *dispatch.Start, received time.Time) *stage.CacheRegistry {
	if s == nil || s.Cache == nil {
		return nil
	}
	return &stage.CacheRegistry{Repository: s.Cache.Repository, Token: s.Cache.Token, Expires: tokenExpiry(s.Cache, received)}
}

// tokenExpiry is when the job registry token of c stops working: its
// lifetime after received, the start's receipt; zero (never) without a
// lifetime.
func tokenExpiry(c *dispatch.CacheRegistry, received time.Time) time.Time {
	if c.ExpiresInSecs <= 0 {
		return time.Time{}
	}
	return received.Add(time.Duration(c.ExpiresInSecs) * time.Second)
}

// withoutCaches is why a start runs without caches, or "": under
// [registry] guest_credential = "job" the node's own registry credential
// is never used for a job's caches, so a start the hub gave no cache
// repository (and token) gets none (XFER-15). Under "node", the default,
// the node's credential keeps serving caches.
func (a *Agent) withoutCaches(s *dispatch.Start) string {
	if a.cfg.Registry.GuestCredential != GuestCredentialJob || (s != nil && s.Cache != nil) {
		return ""
	}
	return "this node keeps caches only in a cache repository minted for the job ([registry] guest_credential = \"job\"), " +
		"and the hub gave this job none: it runs without caches"
}
