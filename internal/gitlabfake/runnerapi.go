package gitlabfake

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"math/bits"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// maxJSONBody bounds JSON request bodies the fake decodes (Workhorse reads at
// most 32 KiB of a long-polled job request; other bodies get 1 MiB).
const (
	maxJobRequestBody = 32 << 10
	maxJSONBody       = 1 << 20
	maxPatchBody      = 16 << 20
)

// runnerInfo is the part of the runner's info object the fake reads.
type runnerInfo struct {
	Features map[string]bool `json:"features"`
}

type verifyRequest struct {
	Token    string     `json:"token"`
	SystemID string     `json:"system_id"`
	Info     runnerInfo `json:"info"`
}

// handleVerify serves POST /runners/verify: 200 {id, token,
// token_expires_at} for a known runner token, 403 otherwise. Idempotent.
func (s *Server) handleVerify(w http.ResponseWriter, r *http.Request) {
	var req verifyRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, maxJSONBody)).Decode(&req); err != nil {
		writeMessage(w, http.StatusBadRequest, "400 Bad request - "+err.Error())
		return
	}
	s.mu.Lock()
	rn := s.runners[req.Token]
	s.mu.Unlock()
	if rn == nil {
		forbidden(w, "")
		return
	}
	var exp *string
	if !s.opts.RunnerTokenExpiresAt.IsZero() && rn.id == 1 {
		e := s.opts.RunnerTokenExpiresAt.UTC().Format(time.RFC3339)
		exp = &e
	}
	b, _ := json.Marshal(struct {
		ID             int64   `json:"id"`
		Token          string  `json:"token"`
		TokenExpiresAt *string `json:"token_expires_at"`
	}{rn.id, rn.token, exp})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(b)
}

type jobRequest struct {
	Token      string     `json:"token"`
	SystemID   string     `json:"system_id"`
	LastUpdate string     `json:"last_update"`
	Info       runnerInfo `json:"info"`
}

// handleJobRequest serves POST /jobs/request, Workhorse long poll first,
// then Rails' register-job logic. Not idempotent: a 201 assigns a job.
func (s *Server) handleJobRequest(w http.ResponseWriter, r *http.Request) {
	longPoll := s.opts.LongPoll > 0
	limit := int64(maxJSONBody)
	if longPoll {
		limit = maxJobRequestBody + 1
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit))
	if err != nil {
		return
	}
	if longPoll {
		w.Header().Set("Gitlab-Ci-Builds-Polling", "yes")
		if len(body) > maxJobRequestBody {
			writeMessage(w, http.StatusRequestEntityTooLarge, "413 Request Entity Too Large")
			return
		}
	}
	var req jobRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeMessage(w, http.StatusBadRequest, "400 Bad request - "+err.Error())
		return
	}
	s.mu.Lock()
	rn := s.runners[req.Token]
	// Workhorse: with both token and last_update, hold the request while
	// the queue version still equals last_update.
	if longPoll && rn != nil && req.LastUpdate != "" && req.LastUpdate == rn.queueVersion {
		wake := rn.wake
		hook := s.holdHook
		s.mu.Unlock()
		if hook != nil {
			hook()
		}
		t := time.NewTimer(s.opts.LongPoll)
		defer t.Stop()
		select {
		case <-wake:
		case <-t.C:
		case <-r.Context().Done():
		}
		// Workhorse answers itself, without X-GitLab-Last-Update.
		w.WriteHeader(http.StatusNoContent)
		return
	}
	defer s.mu.Unlock()
	if rn == nil {
		forbidden(w, "")
		return
	}
	if rn.paused || req.LastUpdate == rn.queueVersion {
		w.Header().Set("X-GitLab-Last-Update", rn.queueVersion)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	var pick *job
	for _, id := range slices.Sorted(maps.Keys(s.jobs)) {
		if j := s.jobs[id]; j.state == StatePending && !j.waitingAck {
			pick = j
			break
		}
	}
	if pick == nil {
		w.Header().Set("X-GitLab-Last-Update", rn.queueVersion)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	pick.runner = rn
	pick.features = req.Info.Features
	if s.opts.TwoPhaseCommit && req.Info.Features["two_phase_job_commit"] {
		pick.waitingAck = true
	} else {
		pick.state = StateRunning
	}
	out, err := s.renderJobLocked(pick, s.now())
	if err != nil {
		writeMessage(w, http.StatusInternalServerError, "500 Internal Server Error")
		return
	}
	s.notifyLocked()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	w.WriteHeader(http.StatusCreated)
	w.Write(out)
}

// Update is one PUT /jobs/:id the fake received.
type Update struct {
	// State, FailureReason, ExitCode as sent.
	State         string
	FailureReason string
	ExitCode      int
	// Checksum and Bytesize are output.checksum/output.bytesize as sent.
	Checksum string
	Bytesize int64
	// Status is the HTTP status answered; JobStatus the Job-Status header.
	Status    int
	JobStatus JobState
}

type updateRequest struct {
	Token         string `json:"token"`
	State         string `json:"state"`
	FailureReason string `json:"failure_reason"`
	Checksum      string `json:"checksum"`
	ExitCode      int    `json:"exit_code"`
	Output        struct {
		Checksum string `json:"checksum"`
		Bytesize int64  `json:"bytesize"`
	} `json:"output"`
}

// jobForToken resolves {id} and the job token (body token first, then the
// JOB-TOKEN header, as Rails does). It answers 404/403 itself and returns
// nil then. s.mu must be held.
func (s *Server) jobForTokenLocked(w http.ResponseWriter, r *http.Request, bodyToken string) *job {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	j := s.jobs[id]
	if err != nil || j == nil {
		writeMessage(w, http.StatusNotFound, "404 Not Found")
		return nil
	}
	tok := bodyToken
	if tok == "" {
		tok = r.Header.Get("Job-Token")
	}
	if tok == "" {
		tok = r.URL.Query().Get("token")
	}
	if tok != j.token {
		forbidden(w, "")
		return nil
	}
	return j
}

// handleUpdateJob serves PUT /jobs/:id (state running/success/failed).
// Idempotent for keep-alives; the first final update finishes the job and
// expires its token, so a repeat gets 403 with the final Job-Status.
func (s *Server) handleUpdateJob(w http.ResponseWriter, r *http.Request) {
	var req updateRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, maxJSONBody)).Decode(&req); err != nil {
		writeMessage(w, http.StatusBadRequest, "400 Bad request - "+err.Error())
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobForTokenLocked(w, r, req.Token)
	if j == nil {
		return
	}
	if req.Checksum != "" && req.Output.Checksum == "" {
		req.Output.Checksum = req.Checksum
	}
	up := Update{State: req.State, FailureReason: req.FailureReason, ExitCode: req.ExitCode, Checksum: req.Output.Checksum, Bytesize: req.Output.Bytesize}
	status := s.updateLocked(j, req, w)
	up.Status, up.JobStatus = status, j.state
	j.updates = append(j.updates, up)
	s.notifyLocked()
	w.Header().Set("Job-Status", string(j.state))
	switch status {
	case http.StatusOK, http.StatusAccepted:
		if w.Header().Get("X-GitLab-Trace-Update-Interval") == "" {
			w.Header().Set("X-GitLab-Trace-Update-Interval", strconv.Itoa(s.updateInterval()))
		}
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(status)
		io.WriteString(w, strconv.Itoa(status))
	case http.StatusBadRequest:
		writeMessage(w, status, "400 Bad request - state transition not allowed")
	case http.StatusForbidden:
		forbidden(w, "Job is not processing on runner")
	case http.StatusPreconditionFailed:
		writeMessage(w, status, "412 Precondition Failed")
	default:
		writeMessage(w, status, strconv.Itoa(status)+" "+http.StatusText(status))
	}
}

// updateLocked applies an update and returns the status to answer; it may
// set X-GitLab-Trace-Update-Interval on w.
func (s *Server) updateLocked(j *job, req updateRequest, w http.ResponseWriter) int {
	if j.waitingAck {
		switch req.State {
		case "running":
			j.waitingAck = false
			j.state = StateRunning
			return http.StatusOK
		case "pending":
			return http.StatusOK
		}
		return http.StatusBadRequest
	}
	if !j.executing() {
		return http.StatusForbidden
	}
	switch req.State {
	case "running":
		return http.StatusOK
	case "success", "failed":
	default:
		return http.StatusBadRequest
	}
	crc := fmt.Sprintf("crc32:%08x", crc32.ChecksumIEEE(j.trace))
	mismatch := req.Output.Checksum != "" && (req.Output.Checksum != crc || req.Output.Bytesize != int64(len(j.trace)))
	now := s.now()
	if j.firstFinalAt.IsZero() {
		j.firstFinalAt = now
	}
	if mismatch {
		switch s.opts.TraceMismatch {
		case Mismatch412:
			return http.StatusPreconditionFailed
		case MismatchPending:
			timeout := s.opts.AcceptTimeout
			if timeout <= 0 {
				timeout = 5 * time.Minute
			}
			if elapsed := now.Sub(j.firstFinalAt); elapsed < timeout {
				w.Header().Set("X-GitLab-Trace-Update-Interval", strconv.Itoa(backoffSeconds(elapsed)))
				return http.StatusAccepted
			}
		}
	}
	j.mismatch = mismatch
	j.exitCode = req.ExitCode
	switch {
	case j.state == StateCanceling:
		s.finishLocked(j, StateCanceled)
	case req.State == "success":
		s.finishLocked(j, StateSuccess)
	default:
		j.failureReason = req.FailureReason
		if !slices.Contains(FailureReasons, j.failureReason) {
			j.failureReason = "unknown_failure"
		}
		s.finishLocked(j, StateFailed)
	}
	return http.StatusOK
}

// backoffSeconds mirrors Gitlab::Ci::Runner::Backoff: the largest power of
// two not above the elapsed seconds, from 1 up to 64.
func backoffSeconds(elapsed time.Duration) int {
	sec := uint(elapsed / time.Second)
	if sec < 1 {
		return 1
	}
	return min(1<<(bits.Len(sec)-1), 64)
}

// Patch is one PATCH /jobs/:id/trace the fake received.
type Patch struct {
	// Start and End are the Content-Range values as sent (End inclusive).
	Start, End int64
	// Len is the body length.
	Len int
	// DebugTrace is the debug_trace query value.
	DebugTrace string
	// Status is the answered status.
	Status int
}

// handlePatchTrace serves PATCH /jobs/:id/trace. A patch whose start is
// not the stored length changes nothing (416), so re-sending is safe.
func (s *Server) handlePatchTrace(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxPatchBody))
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobForTokenLocked(w, r, "")
	if j == nil {
		return
	}
	p := Patch{Len: len(body), DebugTrace: r.URL.Query().Get("debug_trace"), Start: -1, End: -1}
	defer func() {
		j.patches = append(j.patches, p)
		s.notifyLocked()
	}()
	if !j.executing() {
		p.Status = http.StatusForbidden
		w.Header().Set("Job-Status", string(j.state))
		forbidden(w, "Job is not processing on runner")
		return
	}
	cr := r.Header.Get("Content-Range")
	if cr == "" {
		p.Status = http.StatusBadRequest
		writeMessage(w, p.Status, "400 Bad request - Missing header Content-Range")
		return
	}
	start, end, ok := parseContentRange(cr)
	if !ok {
		p.Status = http.StatusBadRequest
		writeMessage(w, p.Status, "400 Bad request - Content-Range is invalid")
		return
	}
	p.Start, p.End = start, end
	if start != int64(len(j.trace)) {
		p.Status = http.StatusRequestedRangeNotSatisfiable
		w.Header().Set("Range", fmt.Sprintf("0-%d", len(j.trace)))
		w.WriteHeader(p.Status)
		return
	}
	if s.opts.MaxTraceSize > 0 && int64(len(j.trace)+len(body)) > s.opts.MaxTraceSize {
		j.failureReason = "trace_size_exceeded"
		s.finishLocked(j, StateFailed)
		p.Status = http.StatusForbidden
		w.Header().Set("Job-Status", string(j.state))
		forbidden(w, "The job log size limit was reached")
		return
	}
	// Rails' hide_secrets: the job token is overwritten with 'x' in place.
	body = bytes.ReplaceAll(body, []byte(j.token), bytes.Repeat([]byte("x"), len(j.token)))
	j.trace = append(j.trace, body...)
	p.Status = http.StatusAccepted
	w.Header().Set("Job-Status", string(j.state))
	w.Header().Set("Range", fmt.Sprintf("0-%d", len(j.trace)))
	w.Header().Set("X-GitLab-Trace-Update-Interval", strconv.Itoa(s.updateInterval()))
	w.WriteHeader(p.Status)
}

func (s *Server) updateInterval() int {
	if s.opts.TraceUpdateInterval > 0 {
		return s.opts.TraceUpdateInterval
	}
	return 3
}

// parseContentRange parses "<start>-<end>" (no unit, no total).
func parseContentRange(v string) (start, end int64, ok bool) {
	a, b, found := strings.Cut(v, "-")
	if !found || !allDigits(a) || !allDigits(b) {
		return 0, 0, false
	}
	start, err1 := strconv.ParseInt(a, 10, 64)
	end, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || start < 0 || end < 0 {
		return 0, 0, false
	}
	return start, end, true
}

// CancelJob cancels job id from the GitLab side. A pending or created job
// is canceled at once. A running job goes to canceling when graceful and
// its runner advertised cancel_gracefully (the next PATCH/PUT answer
// carries Job-Status: canceling and the final PUT ends it as canceled),
// else straight to canceled (the next PATCH/PUT gets 403 with Job-Status:
// canceled). Canceling a finished job returns ErrInvalid.
func (s *Server) CancelJob(id int64, graceful bool) error {
	if err := s.init(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[id]
	if j == nil {
		return fmt.Errorf("%w: job %d", ErrNotFound, id)
	}
	switch {
	case j.state.Finished():
		return fmt.Errorf("%w: job %d already %s", ErrInvalid, id, j.state)
	case j.state == StateRunning && graceful && j.features["cancel_gracefully"]:
		j.state = StateCanceling
		s.notifyLocked()
	default:
		s.finishLocked(j, StateCanceled)
	}
	return nil
}

// JobInfo is a snapshot of one job for test assertions.
type JobInfo struct {
	ID         int64
	PipelineID int64
	Name       string
	Stage      string
	// Token is the job token (glcbt-…); it is accepted only while the job
	// is running or canceling.
	Token string
	State JobState
	// WaitingAck: two-phase commit, handed out but not yet PUT running.
	WaitingAck bool
	// RunnerFeatures is info.features of the request that took the job.
	RunnerFeatures map[string]bool
	Trace          []byte
	Patches        []Patch
	Updates        []Update
	Artifacts      []StoredArtifact
	// FailureReason as stored (unknown reasons become unknown_failure).
	FailureReason string
	ExitCode      int
	// ChecksumMismatch: the accepted final update's output disagreed with the trace.
	ChecksumMismatch bool
}

// Job returns a snapshot of job id.
func (s *Server) Job(id int64) (JobInfo, error) {
	if err := s.init(); err != nil {
		return JobInfo{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[id]
	if j == nil {
		return JobInfo{}, fmt.Errorf("%w: job %d", ErrNotFound, id)
	}
	return JobInfo{
		ID: j.id, PipelineID: j.pipeline.id, Name: j.spec.Name, Stage: j.spec.Stage,
		Token: j.token, State: j.state, WaitingAck: j.waitingAck, RunnerFeatures: maps.Clone(j.features),
		Trace: slices.Clone(j.trace), Patches: slices.Clone(j.patches), Updates: slices.Clone(j.updates),
		Artifacts: slices.Clone(j.artifacts), FailureReason: j.failureReason, ExitCode: j.exitCode,
		ChecksumMismatch: j.mismatch,
	}, nil
}

// JobState returns job id's state, or "" for an unknown job.
func (s *Server) JobState(id int64) JobState {
	ji, err := s.Job(id)
	if err != nil {
		return ""
	}
	return ji.State
}

// Trace returns a copy of job id's stored trace.
func (s *Server) Trace(id int64) []byte {
	ji, _ := s.Job(id)
	return ji.Trace
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
