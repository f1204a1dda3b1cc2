package gitlab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/vk-ci/vk/internal/logkey"
)

// RequestKind classifies an answer to POST /jobs/request (GL-04).
type RequestKind int

// Job request outcomes. The zero value is RequestFailed.
const (
	// RequestFailed: no answer, or one outside the table (409, 5xx other
	// than 503, …); the error says which. GitLab assigned no job: ask again
	// later. Does not make the runner unhealthy.
	RequestFailed RequestKind = iota
	// RequestJobReceived: 201 with a decodable JSON job in Job.
	RequestJobReceived
	// RequestNoJob: 204, nothing to do.
	RequestNoJob
	// RequestTokenRefused: 403, GitLab refuses the runner token; the
	// runner stops asking (token_refused).
	RequestTokenRefused
	// RequestThrottled: 429 or 503; back off for RetryAfter (when GitLab
	// said) before asking again.
	RequestThrottled
	// RequestUndecodable: 201 whose body is not a decodable JSON job (or
	// not served as application/json). GitLab considers the job assigned:
	// the relay must fail it (Identity holds its id and token when they
	// were readable). The error wraps ErrDecode.
	RequestUndecodable
)

// String returns the kind's name.
func (k RequestKind) String() string {
	switch k {
	case RequestJobReceived:
		return "job"
	case RequestNoJob:
		return "no_job"
	case RequestTokenRefused:
		return "token_refused"
	case RequestThrottled:
		return "throttled"
	case RequestUndecodable:
		return "undecodable"
	}
	return "failed"
}

// RequestOutcome is the result of [Client.RequestJob].
type RequestOutcome struct {
	// Kind classifies the answer.
	Kind RequestKind
	// Status is the HTTP status; 0 when there was no answer.
	Status int
	// Job is the decoded job (RequestJobReceived only).
	Job *JobResponse
	// Body is the raw 201 body (RequestJobReceived, RequestUndecodable).
	// It holds secrets.
	Body []byte
	// Identity is what could be read of an undecodable job
	// (RequestUndecodable only); zero when nothing was.
	Identity JobIdentity
	// RetryAfter is GitLab's requested wait for RequestThrottled, from
	// Retry-After (integer seconds) or RateLimit-ResetTime; 0 when GitLab
	// gave none.
	RetryAfter time.Duration
	// LastUpdate is this answer's X-GitLab-Last-Update, "" when absent.
	LastUpdate string
	// LongPolling: GitLab's Workhorse long-polls job requests (the answer
	// carried Gitlab-Ci-Builds-Polling: yes).
	LongPolling bool
	// WorkhorseAnswered (RequestNoJob only): Workhorse held the request
	// and answered 204 itself, without X-GitLab-Last-Update, because the
	// runner's queue changed or the long poll ran out. Rails was not
	// asked for a job: the answer says nothing about whether one waits.
	WorkhorseAnswered bool
	// CorrelationID is GitLab's X-Request-Id (or the one sent).
	CorrelationID string
}

// PrepareJobRequest returns the body RequestJob sends for this runner:
// the client's info, the token, systemID and the runner's last_update
// (omitted before the first answer carrying one).
func (c *Client) PrepareJobRequest(runnerToken, systemID string) JobRequest {
	return JobRequest{
		Info:       c.info,
		Token:      runnerToken,
		SystemID:   systemID,
		LastUpdate: c.LastUpdate(runnerToken),
	}
}

// RequestJob asks GitLab for a job for the runner with this token
// (POST /jobs/request with RUNNER-TOKEN, info and last_update, GL-03). Any
// X-GitLab-Last-Update in the answer, whatever its status, becomes the
// runner's last_update for the next request.
//
// The error is non-nil exactly for RequestFailed and RequestUndecodable.
// ctx should not end while the request is out: GitLab may assign a job
// the relay then never sees (ARB-29).
func (c *Client) RequestJob(ctx context.Context, runnerToken, systemID string) (RequestOutcome, error) {
	req := c.PrepareJobRequest(runnerToken, systemID)
	cl := call{
		method:      http.MethodPost,
		path:        "jobs/request",
		body:        mustJSON(req),
		contentType: "application/json",
		accept:      "application/json",
		header:      runnerTokenHeader(runnerToken),
	}
	a, err := c.send(ctx, cl, maxJobBody)
	if err != nil {
		return RequestOutcome{}, err
	}
	c.SetLastUpdate(runnerToken, a.header.Get(HeaderLastUpdate))
	out, err := requestJobOutcome(cl, a, c.now())
	// Workhorse holds only a request that carries a last_update; its own
	// 204 is the one without X-GitLab-Last-Update.
	out.WorkhorseAnswered = out.Kind == RequestNoJob && out.LongPolling && out.LastUpdate == "" && req.LastUpdate != ""
	attrs := []slog.Attr{
		slog.String("outcome", out.Kind.String()), slog.Int(logkey.Status, a.status),
		slog.String("short_token", ShortToken(runnerToken)),
		slog.String(correlationKey, a.correlationID),
	}
	switch out.Kind {
	case RequestJobReceived:
		attrs = append(attrs, slog.Int64(logkey.GitLabJobID, out.Job.ID),
			slog.String("repo_url", CleanURL(out.Job.GitInfo.RepoURL)))
		c.log.LogAttrs(ctx, slog.LevelInfo, "checking for jobs: received", attrs...)
	case RequestNoJob:
		c.log.LogAttrs(ctx, slog.LevelDebug, "checking for jobs: none", attrs...)
	case RequestTokenRefused:
		c.log.LogAttrs(ctx, slog.LevelError, "checking for jobs: forbidden", attrs...)
	default:
		attrs = append(attrs, slog.Duration("retry_after", out.RetryAfter), slog.Any(logkey.Err, err))
		c.log.LogAttrs(ctx, slog.LevelWarn, "checking for jobs: failed", attrs...)
	}
	return out, err
}

// requestJobOutcome is /jobs/request's status → outcome table (GL-04).
func requestJobOutcome(cl call, a answer, now time.Time) (RequestOutcome, error) {
	out := RequestOutcome{
		Status:        a.status,
		LastUpdate:    a.header.Get(HeaderLastUpdate),
		LongPolling:   a.header.Get(HeaderBuildsPolling) == "yes",
		CorrelationID: a.correlationID,
	}
	switch a.status {
	case http.StatusCreated:
		out.Body = a.body
		if !isJSON(a.header) {
			out.Kind = RequestUndecodable
			out.Identity, _ = DecodeJobIdentity(a.body)
			return out, fmt.Errorf("%w: served as %q, not application/json", ErrDecode, a.header.Get("Content-Type"))
		}
		job, err := DecodeJobResponse(a.body)
		if err != nil {
			out.Kind = RequestUndecodable
			out.Identity, _ = DecodeJobIdentity(a.body)
			return out, err
		}
		out.Kind = RequestJobReceived
		out.Job = job
		return out, nil
	case http.StatusNoContent:
		out.Kind = RequestNoJob
		return out, nil
	case http.StatusForbidden:
		out.Kind = RequestTokenRefused
		return out, nil
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		out.Kind = RequestThrottled
		out.RetryAfter, _ = serverWait(a.header, now)
		return out, nil
	default:
		out.Kind = RequestFailed
		return out, statusError(cl, a)
	}
}

// IsUndecodable reports whether err is a job response decoding failure.
func IsUndecodable(err error) bool { return errors.Is(err, ErrDecode) }
