// Package gitlab is vk-gitlab's client for GitLab's runner API, spoken as
// gitlab-runner 19.5 speaks it (network/gitlab.go, network/trace.go; GL-01),
// and GitLab's wire types for it (the job response, request bodies).
//
// Every [Client] method takes the caller's context and returns a typed
// outcome and an error (STYLE C11). The status → outcome table of each
// endpoint is one function, tested case by case:
//
//	POST /runners/verify   verifyOutcome      200 valid, 403 refused
//	POST /jobs/request     requestJobOutcome  201 job, 204 none, 403 token refused,
//	                                          429/503 throttled (Retry-After)
//	PUT  /jobs/:id         updateJobOutcome   200 ok, 202 accepted, 412 trace
//	                                          validation, 403/404/Job-Status abort
//	PATCH /jobs/:id/trace  patchTraceOutcome  202 ok, 416 range mismatch,
//	                                          403/Job-Status abort, 404 not found
//
// An error accompanies exactly the outcomes a caller cannot act on from the
// status alone: no answer (transport, context), an answer outside the
// table (*StatusError, errors.Is ErrUnexpectedStatus), and a 201 whose job
// cannot be decoded (ErrDecode; GitLab considers that job assigned, so the
// outcome still carries what could be read of its id and token).
//
// # Tokens
//
// The runner token goes only to /runners/verify and /jobs/request, in the
// RUNNER-TOKEN header and the body; per-job endpoints get the job token
// only (AUTH-01, AUTH-03). Tokens are never logged; [ShortToken] is.
//
// # Retries
//
// The client itself sends each request once. [RetryDoer] is
// gitlab-runner's retry layer as a Doer decorator (408, 429, 5xx; waits
// from RateLimit-ResetTime, Retry-After, or backoff), with one addition: a
// MaxWait cap, past which the answer goes straight back to the caller
// (whose outcome still carries RetryAfter). Correlation IDs (X-Request-Id,
// ours and GitLab's) are logged with every request.
//
// # Choices where gitlab-runner or the spec leave room
//
//   - info.name is "vk-gitlab" and info.version vk's own; executor "vk",
//     shell "bash" (GL-07); info.config is always {"gpus": ""} like
//     gitlab-runner's, so Rails sees the same shape.
//   - last_update is kept per runner token, in memory only; the first
//     request after a start goes without it (GL-03), as gitlab-runner's does.
//   - A 201 not served as application/json is undecodable, as in
//     gitlab-runner; a 409 to a job request is a plain failure (ask again).
//   - PatchTrace sends at most [MaxTracePatch] bytes and reports how many;
//     the caller continues from NewOffset.
//   - The trace update interval from GitLab is reported raw (as
//     gitlab-runner's tests expect, negative values included);
//     [NextUpdateInterval] applies the 3 s default and the 15 min cap.
//   - The failure-reason mapping lives here ([FailureReasonFor],
//     [MapFailureReason]), next to the update that sends it: the relay maps
//     a vk failure kind to GitLab's reason, then through the older-GitLab
//     fallback of gitlab-runner 19.5's failure_reason_mapper.go using the
//     job's features.failure_reasons (FAIL-01..12, DECISIONS 7). An unknown
//     vk failure kind (from a newer node) is sent as runner_system_failure.
//   - Token expiry (GL-18): [CheckTokenExpiry] warns from
//     [TokenExpiryWarning] (7 days) before token_expires_at; the relay never
//     rotates tokens.
//
// Tests port gitlab-runner's network/gitlab_test.go and common/network_test.go
// cases (MIT, see NOTICE) against httptest servers.
package gitlab
