package client

import (
	"fmt"
	"net/http"

	"github.com/vk-ci/vk/proto/internal/enum"
)

// Error is the body of every error answer (API-55):
// {error, code, retry_after_secs?, approval_url?}. Set by the hub's single
// error writer; read by clients, which ignore unknown fields.
type Error struct {
	// Error is a human-readable message for logs and traces. Never parsed.
	Error string `json:"error"`
	// Code is the machine-readable reason; see the Code constants.
	Code Code `json:"code"`
	// RetryAfterSecs is when to retry, in seconds, for retryable 503s
	// (no_capacity, unavailable); 0 means not given.
	RetryAfterSecs int `json:"retry_after_secs,omitempty"`
	// ApprovalURL is the hub UI page where an operator approves the project
	// or server, on approval_pending and project_rejected when the hub
	// serves a UI (API-56); empty otherwise.
	ApprovalURL string `json:"approval_url,omitempty"`
	// Leader is the advertised URL of the hub instance that holds the
	// leader lease, on the unavailable a standby answers (docs/ha.md):
	// the client sends its request there instead. Empty when the standby
	// knows no live leader. Optional and additive.
	Leader string `json:"leader,omitempty"`
}

// Code is an error code of the client API (the spec's error table).
// Unknown codes decode to CodeOther.
type Code string

// Error codes. The HTTP status each is sent with is [Code.Status].
const (
	CodeInvalid         Code = "invalid"          // 400: unparseable or invalid request
	CodeUnauthorized    Code = "unauthorized"     // 401: signature missing, bad, stale; relay unknown or removed
	CodeForbidden       Code = "forbidden"        // 403: not allowed (API-48)
	CodeApprovalPending Code = "approval_pending" // 403: project or server awaits operator approval
	CodeProjectRejected Code = "project_rejected" // 403: an operator rejected the project or server
	CodeNotFound        Code = "not_found"        // 404 (410 for a create retried after its job left history)
	CodeConflict        Code = "conflict"         // 409: state forbids the request
	CodeReservationGone Code = "reservation_gone" // 410: reservation or ticket ended; reserve again
	CodeTooLarge        Code = "too_large"        // 413: spec over 512 KiB
	CodeInternal        Code = "internal"         // 500
	CodeNoCapacity      Code = "no_capacity"      // 503: no node accepted in time
	CodeUnavailable     Code = "unavailable"      // 503: hub busy or starting, queue full, session not connected
	// CodeOther stands for any code this version does not know.
	CodeOther Code = "other"
)

var knownCodes = []Code{CodeInvalid, CodeUnauthorized, CodeForbidden, CodeApprovalPending,
	CodeProjectRejected, CodeNotFound, CodeConflict, CodeReservationGone, CodeTooLarge,
	CodeInternal, CodeNoCapacity, CodeUnavailable, CodeOther}

// UnmarshalText maps unknown codes to CodeOther (API-55).
func (c *Code) UnmarshalText(b []byte) error {
	*c = enum.Parse(string(b), CodeOther, knownCodes)
	return nil
}

// Retryable reports whether a client may retry a request answered with c
// (API-46..54): internal, no_capacity and unavailable are retried (the
// 503s after retry_after_secs); reservation_gone means "reserve again",
// not "repeat this request", and is false here. conflict is false: only a
// settle answered conflict is retried, which the caller knows (API-51).
// other is false: a code we do not understand is not worth repeating.
func (c Code) Retryable() bool {
	switch c {
	case CodeInternal, CodeNoCapacity, CodeUnavailable:
		return true
	}
	return false
}

// Status returns the HTTP status the hub sends c with. not_found is 404
// here; the hub sends 410 for a create retried after its job left history
// (API-52). other answers 500.
func (c Code) Status() int {
	switch c {
	case CodeInvalid:
		return http.StatusBadRequest
	case CodeUnauthorized:
		return http.StatusUnauthorized
	case CodeForbidden, CodeApprovalPending, CodeProjectRejected:
		return http.StatusForbidden
	case CodeNotFound:
		return http.StatusNotFound
	case CodeConflict:
		return http.StatusConflict
	case CodeReservationGone:
		return http.StatusGone
	case CodeTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeNoCapacity, CodeUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// StatusError is an error answer as a client sees it: the HTTP status and
// the decoded body. It implements error for use with errors.As.
type StatusError struct {
	// Status is the HTTP status code.
	Status int
	// Body is the decoded error body; its Code is CodeOther when the body
	// was missing or not JSON.
	Body Error
}

// Error formats the status, code and message.
func (e *StatusError) Error() string {
	return fmt.Sprintf("hub: %d %s: %s", e.Status, e.Body.Code, e.Body.Error)
}

// Retryable reports whether the request may be retried as is: per the
// code, or for a 5xx whose body was unreadable.
func (e *StatusError) Retryable() bool {
	if e.Body.Code == CodeOther {
		return e.Status >= 500
	}
	return e.Body.Code.Retryable()
}
