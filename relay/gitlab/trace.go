package gitlab

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/vk-ci/vk/internal/logkey"
)

// MaxTracePatch is the most bytes one trace patch carries (GL-10: 1 MiB,
// gitlab-runner's DefaultTracePatchLimit).
const MaxTracePatch = 1 << 20

// PatchKind classifies an answer to PATCH /jobs/:id/trace (GL-11, GL-12).
type PatchKind int

// Patch outcomes. The zero value is PatchFailed.
const (
	// PatchFailed: no answer, or one outside the table (5xx, …); the
	// error says which. Retry from the same offset later.
	PatchFailed PatchKind = iota
	// PatchSucceeded: 202 (or nothing to send); NewOffset is past the bytes
	// sent.
	PatchSucceeded
	// PatchRangeMismatch: 416; NewOffset is GitLab's stored length from
	// `Range: 0-<n>` (0 when missing or garbled): continue from there. Also
	// how a restarted relay finds its resume point (GL-11).
	PatchRangeMismatch
	// PatchNotFound: 404; GitLab no longer has the job (GL-12: abort).
	PatchNotFound
	// PatchAbort: 403, or Job-Status canceled or failed with any status
	// (GL-12, GL-17).
	PatchAbort
)

// String returns the kind's name.
func (k PatchKind) String() string {
	switch k {
	case PatchSucceeded:
		return "succeeded"
	case PatchRangeMismatch:
		return "range_mismatch"
	case PatchNotFound:
		return "not_found"
	case PatchAbort:
		return "abort"
	}
	return "failed"
}

// PatchOutcome is the result of [Client.PatchTrace].
type PatchOutcome struct {
	// Kind classifies the answer.
	Kind PatchKind
	// Status is the HTTP status; 0 when nothing was sent or no answer came.
	Status int
	// NewOffset is the trace offset to continue from: start+sent after a
	// 202, GitLab's length after a 416, the start offset otherwise.
	NewOffset int64
	// Sent is how many bytes the patch carried (at most MaxTracePatch; 0
	// for an empty patch, which is never sent).
	Sent int
	// JobStatus is the answer's Job-Status.
	JobStatus JobStatus
	// UpdateInterval is X-GitLab-Trace-Update-Interval as sent (0 when
	// absent or unparsable); feed it to [NextUpdateInterval].
	UpdateInterval time.Duration
	// RemoteRange is the answer's Range header, e.g. "0-1024".
	RemoteRange string
	// CorrelationID is GitLab's X-Request-Id (or the one sent).
	CorrelationID string
}

// CancelRequested reports Job-Status canceling (graceful cancel, GL-17).
func (o PatchOutcome) CancelRequested() bool { return o.JobStatus.CancelRequested() }

// Aborts reports an answer that ends the job for the relay: 403, 404 or
// Job-Status canceled/failed (GL-12, GL-17).
func (o PatchOutcome) Aborts() bool { return o.Kind == PatchAbort || o.Kind == PatchNotFound }

// PatchTrace appends content at offset to the job's trace in GitLab:
// PATCH /jobs/:id/trace?debug_trace=<debug> with JOB-TOKEN, Content-Type
// text/plain and `Content-Range: <start>-<end>` (end inclusive, no unit)
// (GL-10). Only the first MaxTracePatch bytes of content are sent; the
// caller patches the rest from NewOffset. An empty content sends nothing
// and succeeds at offset. The error is non-nil exactly for PatchFailed.
func (c *Client) PatchTrace(ctx context.Context, job JobCredentials, offset int64, content []byte, debug bool) (PatchOutcome, error) {
	if len(content) == 0 {
		return PatchOutcome{Kind: PatchSucceeded, NewOffset: offset}, nil
	}
	if len(content) > MaxTracePatch {
		content = content[:MaxTracePatch]
	}
	h := jobTokenHeader(job.Token)
	h.Set("Content-Range", ContentRange(offset, len(content)))
	cl := call{
		method:      http.MethodPatch,
		path:        "jobs/" + strconv.FormatInt(job.ID, 10) + "/trace",
		query:       url.Values{"debug_trace": {strconv.FormatBool(debug)}},
		body:        content,
		contentType: "text/plain",
		header:      h,
	}
	a, err := c.send(ctx, cl, maxErrorBody)
	if err != nil {
		return PatchOutcome{NewOffset: offset}, err
	}
	out, err := patchTraceOutcome(cl, a, offset, len(content))
	lvl := slog.LevelDebug
	if out.Kind != PatchSucceeded {
		lvl = slog.LevelWarn
	}
	c.log.LogAttrs(ctx, lvl, "appending trace",
		slog.Int64(logkey.GitLabJobID, job.ID), slog.String("sent_range", h.Get("Content-Range")),
		slog.String("remote_range", out.RemoteRange), slog.String("outcome", out.Kind.String()),
		slog.Int(logkey.Status, a.status), slog.String("job_status", string(out.JobStatus)),
		slog.Duration("update_interval", out.UpdateInterval),
		slog.String(correlationKey, a.correlationID), slog.Any(logkey.Err, err))
	return out, err
}

// ContentRange returns the Content-Range value for n > 0 bytes at start:
// "<start>-<start+n-1>".
func ContentRange(start int64, n int) string {
	return fmt.Sprintf("%d-%d", start, start+int64(n)-1)
}

// patchTraceOutcome is the trace PATCH's status → outcome table
// (gitlab-runner's createPatchTraceResult).
func patchTraceOutcome(cl call, a answer, offset int64, sent int) (PatchOutcome, error) {
	out := PatchOutcome{
		Status:        a.status,
		NewOffset:     offset,
		Sent:          sent,
		JobStatus:     ParseJobStatus(a.header.Get(HeaderJobStatus)),
		RemoteRange:   a.header.Get("Range"),
		CorrelationID: a.correlationID,
	}
	out.UpdateInterval, _ = parseUpdateInterval(a.header)
	switch {
	case out.JobStatus.Aborted(), a.status == http.StatusForbidden:
		out.Kind = PatchAbort
	case a.status == http.StatusAccepted:
		out.Kind = PatchSucceeded
		out.NewOffset = offset + int64(sent)
	case a.status == http.StatusNotFound:
		out.Kind = PatchNotFound
	case a.status == http.StatusRequestedRangeNotSatisfiable:
		out.Kind = PatchRangeMismatch
		out.NewOffset = RangeEnd(out.RemoteRange)
	default:
		out.Kind = PatchFailed
		return out, statusError(cl, a)
	}
	return out, nil
}

// RangeEnd reads GitLab's `Range: 0-<n>` answer and returns n, the length
// GitLab stores; 0 when the value is missing or garbled, as gitlab-runner
// reads it.
func RangeEnd(v string) int64 {
	parts := strings.Split(strings.TrimSpace(v), "-")
	if len(parts) != 2 {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(parts[1]), 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}
