package gitlab

import (
	"context"
	"fmt"
	"hash"
	"hash/crc32"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/vk-ci/vk/internal/logkey"
)

// JobStatus is GitLab's Job-Status response header: the job's state in
// GitLab after a PUT or PATCH (GL-17). Values GitLab may add later are
// kept verbatim.
type JobStatus string

// Job-Status values the relay acts on.
const (
	JobStatusNone      JobStatus = ""          // the header was absent
	JobStatusPending   JobStatus = "pending"   // waiting for the runner's commit
	JobStatusRunning   JobStatus = "running"   // running: carry on
	JobStatusCanceling JobStatus = "canceling" // canceled by a user, winding down: graceful cancel
	JobStatusCanceled  JobStatus = "canceled"  // over: immediate cancel, write nothing more
	JobStatusFailed    JobStatus = "failed"    // over (e.g. timed out in GitLab): as canceled
	JobStatusSuccess   JobStatus = "success"   // over, succeeded
)

// ParseJobStatus reads a Job-Status header value (trimmed, lower-cased).
func ParseJobStatus(v string) JobStatus {
	return JobStatus(strings.ToLower(strings.TrimSpace(v)))
}

// Aborted reports canceled or failed: the job is over in GitLab; the relay
// asks the hub for an immediate cancel and writes nothing more (GL-17).
func (s JobStatus) Aborted() bool { return s == JobStatusCanceled || s == JobStatusFailed }

// CancelRequested reports canceling: a user canceled the job and GitLab
// waits for it to wind down; the relay asks for a graceful cancel (GL-17).
func (s JobStatus) CancelRequested() bool { return s == JobStatusCanceling }

// parseUpdateInterval reads X-GitLab-Trace-Update-Interval as gitlab-runner
// does: integer seconds, possibly zero or negative; absent or unparsable
// gives 0 and ok false.
func parseUpdateInterval(h http.Header) (d time.Duration, ok bool) {
	raw := h.Get(HeaderUpdateInterval)
	if raw == "" {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(raw))
	if err != nil {
		return 0, false
	}
	return time.Duration(n) * time.Second, true
}

// Trace update intervals (GL-10).
const (
	// DefaultUpdateInterval is the trace update interval until GitLab
	// sends one: 3 s.
	DefaultUpdateInterval = 3 * time.Second
	// MaxUpdateInterval caps what GitLab may ask: 15 minutes.
	MaxUpdateInterval = 15 * time.Minute
	// KeepAliveInterval: with no new output for this long the relay sends a
	// keep-alive update (GL-13).
	KeepAliveInterval = 30 * time.Second
)

// NextUpdateInterval returns the trace update interval after an answer
// whose X-GitLab-Trace-Update-Interval parsed as remote (0 when absent):
// a positive remote replaces current, capped at MaxUpdateInterval;
// otherwise current stays, or DefaultUpdateInterval when current ≤ 0.
func NextUpdateInterval(current, remote time.Duration) time.Duration {
	if remote > 0 {
		return min(remote, MaxUpdateInterval)
	}
	if current <= 0 {
		return DefaultUpdateInterval
	}
	return current
}

// UpdateKind classifies an answer to PUT /jobs/:id (GL-16, GL-17, GL-20).
type UpdateKind int

// Update outcomes. The zero value is UpdateFailed.
const (
	// UpdateFailed: no answer, or one outside the table (400, 409, 5xx…);
	// the error says which. Retry after the update interval.
	UpdateFailed UpdateKind = iota
	// UpdateSucceeded: 200 (JobStatus may still ask for a graceful cancel).
	UpdateSucceeded
	// UpdateAccepted: 202, accepted but not completed (GitLab still
	// persists the trace): repeat the final update after UpdateInterval.
	UpdateAccepted
	// UpdateTraceValidationFailed: 412: resend the whole trace, then
	// repeat the update (legacy GitLab).
	UpdateTraceValidationFailed
	// UpdateAbort: 403, 404, or Job-Status canceled or failed with any
	// status: the job is over in GitLab; write nothing more for it.
	UpdateAbort
)

// String returns the kind's name.
func (k UpdateKind) String() string {
	switch k {
	case UpdateSucceeded:
		return "succeeded"
	case UpdateAccepted:
		return "accepted"
	case UpdateTraceValidationFailed:
		return "trace_validation_failed"
	case UpdateAbort:
		return "abort"
	}
	return "failed"
}

// UpdateOutcome is the result of [Client.UpdateJob].
type UpdateOutcome struct {
	// Kind classifies the answer.
	Kind UpdateKind
	// Status is the HTTP status; 0 when there was no answer.
	Status int
	// JobStatus is the answer's Job-Status.
	JobStatus JobStatus
	// UpdateInterval is X-GitLab-Trace-Update-Interval as sent (may be 0 or
	// negative; 0 when absent or unparsable); feed it to
	// [NextUpdateInterval].
	UpdateInterval time.Duration
	// CorrelationID is GitLab's X-Request-Id (or the one sent).
	CorrelationID string
}

// CancelRequested reports Job-Status canceling (graceful cancel).
func (o UpdateOutcome) CancelRequested() bool { return o.JobStatus.CancelRequested() }

// JobCredentials name a job and carry its token.
type JobCredentials struct {
	// ID is GitLab's job ID.
	ID int64
	// Token is the job token. Secret.
	Token string
}

// LogValue hides the token (STYLE C14).
func (j JobCredentials) LogValue() slog.Value {
	return slog.Int64Value(j.ID)
}

// UpdateJob sends PUT /jobs/:id with the job token (JOB-TOKEN header and
// body token), the client's info and u. It commits a job (state running,
// zero output: GL-08), keeps it alive (GL-13, see [Client.KeepAlive]) or
// finishes it (GL-15). The error is non-nil exactly for UpdateFailed.
func (c *Client) UpdateJob(ctx context.Context, job JobCredentials, u UpdateJobInfo) (UpdateOutcome, error) {
	body := UpdateJobRequest{
		Info:          c.info,
		Token:         job.Token,
		State:         u.State,
		FailureReason: u.FailureReason,
		Checksum:      u.Output.Checksum,
		Output:        u.Output,
		ExitCode:      u.ExitCode,
	}
	cl := call{
		method:      http.MethodPut,
		path:        "jobs/" + strconv.FormatInt(job.ID, 10),
		body:        mustJSON(body),
		contentType: "application/json",
		header:      jobTokenHeader(job.Token),
	}
	a, err := c.send(ctx, cl, maxErrorBody)
	if err != nil {
		return UpdateOutcome{}, err
	}
	out, err := updateJobOutcome(cl, a)
	lvl := slog.LevelInfo
	// GitLab echoing the state the relay just reported (a failed job's
	// final update answered Job-Status failed) is routine, not a warning.
	echo := string(out.JobStatus) != "" && string(out.JobStatus) == string(u.State)
	if out.Kind == UpdateFailed || out.Kind == UpdateAbort && !echo {
		lvl = slog.LevelWarn
	}
	c.log.LogAttrs(ctx, lvl, "updating job",
		slog.Int64(logkey.GitLabJobID, job.ID), slog.String("state", string(u.State)),
		slog.String("failure_reason", u.FailureReason), slog.Int64("bytesize", u.Output.Bytesize),
		slog.String("checksum", u.Output.Checksum),
		slog.String("outcome", out.Kind.String()), slog.Int(logkey.Status, a.status),
		slog.String("job_status", string(out.JobStatus)), slog.Duration("update_interval", out.UpdateInterval),
		slog.String(correlationKey, a.correlationID), slog.Any(logkey.Err, err))
	return out, err
}

// KeepAlive sends the keep-alive update: state running with the trace's
// checksum and byte size (GL-13), as gitlab-runner's touchJob does.
func (c *Client) KeepAlive(ctx context.Context, job JobCredentials, output TraceOutput) (UpdateOutcome, error) {
	return c.UpdateJob(ctx, job, UpdateJobInfo{State: StateRunning, Output: output})
}

// updateJobOutcome is PUT /jobs/:id's status → outcome table
// (gitlab-runner's createUpdateJobResult).
func updateJobOutcome(cl call, a answer) (UpdateOutcome, error) {
	out := UpdateOutcome{
		Status:        a.status,
		JobStatus:     ParseJobStatus(a.header.Get(HeaderJobStatus)),
		CorrelationID: a.correlationID,
	}
	out.UpdateInterval, _ = parseUpdateInterval(a.header)
	switch {
	case out.JobStatus.Aborted():
		out.Kind = UpdateAbort
	case a.status == http.StatusOK:
		out.Kind = UpdateSucceeded
	case a.status == http.StatusAccepted:
		out.Kind = UpdateAccepted
	case a.status == http.StatusPreconditionFailed:
		out.Kind = UpdateTraceValidationFailed
	case a.status == http.StatusNotFound, a.status == http.StatusForbidden:
		out.Kind = UpdateAbort
	default:
		out.Kind = UpdateFailed
		return out, statusError(cl, a)
	}
	return out, nil
}

// TraceDigest accumulates the checksum and size of a trace as it is
// written, for keep-alive and final updates. The zero value is ready.
// Not safe for concurrent use.
type TraceDigest struct {
	crc hash.Hash32 // nil until the first write
	n   int64
}

// Write adds p to the digest; it never fails.
func (d *TraceDigest) Write(p []byte) (int, error) {
	if d.crc == nil {
		d.crc = crc32.NewIEEE()
	}
	d.crc.Write(p)
	d.n += int64(len(p))
	return len(p), nil
}

// Output returns the digest so far as an update's output: "crc32:" and 8
// lower-case hex digits of the CRC-32 (IEEE) of every byte written, and
// their count.
func (d *TraceDigest) Output() TraceOutput {
	var sum uint32
	if d.crc != nil {
		sum = d.crc.Sum32()
	}
	return TraceOutput{Checksum: fmt.Sprintf("crc32:%08x", sum), Bytesize: d.n}
}

// TraceChecksum returns the output object for a whole trace held in memory.
func TraceChecksum(trace []byte) TraceOutput {
	var d TraceDigest
	_, _ = d.Write(trace)
	return d.Output()
}
