package gitlab

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/vk-ci/vk/internal/logkey"
)

// VerifyKind classifies an answer to POST /runners/verify.
type VerifyKind int

// Verify outcomes. The zero value is VerifyFailed.
const (
	// VerifyFailed: no answer, or one outside the table; the error says
	// which. The token's validity is unknown: keep the runner.
	VerifyFailed VerifyKind = iota
	// VerifyValid: 200; Response holds the runner ID and token expiry.
	VerifyValid
	// VerifyRefused: 403, GitLab does not know the token (or the runner was
	// deleted): the runner is token_refused (RSESS-05).
	VerifyRefused
)

// String returns the kind's name.
func (k VerifyKind) String() string {
	switch k {
	case VerifyValid:
		return "valid"
	case VerifyRefused:
		return "refused"
	}
	return "failed"
}

// VerifyOutcome is the result of [Client.VerifyRunner].
type VerifyOutcome struct {
	// Kind classifies the answer.
	Kind VerifyKind
	// Status is the HTTP status; 0 when there was no answer.
	Status int
	// Response is the 200 body. Zero for a legacy 200 without JSON.
	Response VerifyRunnerResponse
	// Legacy: GitLab answered 200 without a JSON body (old servers); the
	// token is valid but ID and expiry are unknown.
	Legacy bool
	// CorrelationID is GitLab's X-Request-Id (or the one sent).
	CorrelationID string
}

// VerifyRunner calls POST /runners/verify with the runner token (in the
// RUNNER-TOKEN header and the body), systemID and the client's info (GL-02).
// A non-nil error comes with Kind VerifyFailed: transport errors, ctx, or an
// unexpected status (*StatusError).
func (c *Client) VerifyRunner(ctx context.Context, runnerToken, systemID string) (VerifyOutcome, error) {
	cl := call{
		method:      http.MethodPost,
		path:        "runners/verify",
		body:        mustJSON(VerifyRunnerRequest{Token: runnerToken, SystemID: systemID, Info: c.info}),
		contentType: "application/json",
		accept:      "application/json",
		header:      runnerTokenHeader(runnerToken),
	}
	a, err := c.send(ctx, cl, maxErrorBody)
	if err != nil {
		return VerifyOutcome{}, err
	}
	out, err := verifyOutcome(cl, a)
	lvl := slog.LevelInfo
	if out.Kind != VerifyValid {
		lvl = slog.LevelError
	}
	c.log.LogAttrs(ctx, lvl, "verifying runner",
		slog.String("outcome", out.Kind.String()), slog.Int(logkey.Status, a.status),
		slog.String("short_token", ShortToken(runnerToken)),
		slog.String(correlationKey, a.correlationID), slog.Any(logkey.Err, err))
	return out, err
}

// verifyOutcome is /runners/verify's status → outcome table.
func verifyOutcome(cl call, a answer) (VerifyOutcome, error) {
	out := VerifyOutcome{Status: a.status, CorrelationID: a.correlationID}
	switch a.status {
	case http.StatusOK:
		out.Kind = VerifyValid
		if err := json.Unmarshal(a.body, &out.Response); err != nil || !isJSON(a.header) {
			out.Response = VerifyRunnerResponse{}
			out.Legacy = true
		}
		return out, nil
	case http.StatusForbidden:
		out.Kind = VerifyRefused
		return out, nil
	default:
		out.Kind = VerifyFailed
		return out, statusError(cl, a)
	}
}

// TokenExpiryWarning is how long before token_expires_at the relay starts
// warning about a runner token (GL-18: 7 days).
const TokenExpiryWarning = 7 * 24 * time.Hour

// TokenExpiry classifies a runner token's remaining life (GL-18).
type TokenExpiry int

// Token expiry states. The zero value is TokenNoExpiry.
const (
	// TokenNoExpiry: GitLab gave no expiry.
	TokenNoExpiry TokenExpiry = iota
	// TokenValid: expires more than TokenExpiryWarning from now.
	TokenValid
	// TokenExpiring: expires within TokenExpiryWarning: log a warning.
	TokenExpiring
	// TokenExpired: already expired: log an error.
	TokenExpired
)

// String returns the state's name.
func (e TokenExpiry) String() string {
	switch e {
	case TokenValid:
		return "valid"
	case TokenExpiring:
		return "expiring"
	case TokenExpired:
		return "expired"
	}
	return "no_expiry"
}

// CheckTokenExpiry classifies expiresAt (nil: no expiry) at now and returns
// the time left (negative once expired, 0 without expiry). The relay never
// rotates tokens; it only logs (GL-18).
func CheckTokenExpiry(expiresAt *time.Time, now time.Time) (TokenExpiry, time.Duration) {
	if expiresAt == nil || expiresAt.IsZero() {
		return TokenNoExpiry, 0
	}
	left := expiresAt.Sub(now)
	switch {
	case left <= 0:
		return TokenExpired, left
	case left <= TokenExpiryWarning:
		return TokenExpiring, left
	}
	return TokenValid, left
}

// createdRunnerTokenPrefix marks runner authentication tokens created in
// GitLab's UI (as opposed to legacy registration-created ones).
const createdRunnerTokenPrefix = "glrt-"

// IsCreatedRunnerToken reports whether token is a runner authentication
// token created in GitLab (prefix glrt-), as gitlab-runner's
// TokenIsCreatedRunnerToken does.
func IsCreatedRunnerToken(token string) bool {
	return strings.HasPrefix(token, createdRunnerTokenPrefix)
}

// shortTokenPrefixes are stripped before shortening, in order, as
// gitlab-runner's helpers/shorten_token.go does: runner authentication
// tokens (glrt-, with an optional t1_…t3_ partition, bare t1_…t3_, glrtr-),
// job tokens (glcbt-), old registration tokens (GR + 7 hex).
var shortTokenPrefixes = []*regexp.Regexp{
	regexp.MustCompile(`^glrt-(t[123]_)?|^t[123]_|^glrtr-`),
	regexp.MustCompile(`^glcbt-`),
	regexp.MustCompile(`^GR[0-9A-Fa-f]{7}`),
}

// ShortToken returns the token's short form: known prefixes stripped, then
// the first 9 characters. It is CI_RUNNER_SHORT_TOKEN and the default
// runner name (RELAY-04); it is not secret.
func ShortToken(token string) string {
	for _, re := range shortTokenPrefixes {
		token = re.ReplaceAllString(token, "")
	}
	if len(token) > 9 {
		token = token[:9]
	}
	return token
}
