package client

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/vk-ci/vk/internal/deptest"
)

// TestDeps fences proto/client to the standard library (and proto itself).
//
// spec: PROTO-01
func TestDeps(t *testing.T) {
	deptest.StdlibOnly(t, "github.com/vk-ci/vk/proto/client", "github.com/vk-ci/vk/proto/")
}

// TestErrorCodes: every code of the spec's table with its status and
// retry rule.
//
// spec: API-46, API-47, API-48, API-49, API-50, API-51, API-52, API-53, API-54, API-55
func TestErrorCodes(t *testing.T) {
	for _, tc := range []struct {
		code      Code
		status    int
		retryable bool
	}{
		{CodeInvalid, http.StatusBadRequest, false},
		{CodeUnauthorized, http.StatusUnauthorized, false},
		{CodeForbidden, http.StatusForbidden, false},
		{CodeApprovalPending, http.StatusForbidden, false},
		{CodeProjectRejected, http.StatusForbidden, false},
		{CodeNotFound, http.StatusNotFound, false},
		{CodeConflict, http.StatusConflict, false},
		{CodeReservationGone, http.StatusGone, false},
		{CodeTooLarge, http.StatusRequestEntityTooLarge, false},
		{CodeInternal, http.StatusInternalServerError, true},
		{CodeNoCapacity, http.StatusServiceUnavailable, true},
		{CodeUnavailable, http.StatusServiceUnavailable, true},
		{CodeOther, http.StatusInternalServerError, false},
	} {
		if got := tc.code.Status(); got != tc.status {
			t.Errorf("%s.Status() = %d, want %d", tc.code, got, tc.status)
		}
		if got := tc.code.Retryable(); got != tc.retryable {
			t.Errorf("%s.Retryable() = %v, want %v", tc.code, got, tc.retryable)
		}
		var back Error
		if err := json.Unmarshal([]byte(`{"error":"x","code":"`+string(tc.code)+`"}`), &back); err != nil || back.Code != tc.code {
			t.Errorf("decode code %q = %q, %v", tc.code, back.Code, err)
		}
	}
}

// TestUnknownEnumsDecodeAsOther: codes and enum strings this version does
// not know read as other; unknown fields are ignored.
//
// spec: API-55, PROTO-06, PROTO-10, RSESS-05
func TestUnknownEnumsDecodeAsOther(t *testing.T) {
	var e Error
	if err := json.Unmarshal([]byte(`{"error":"x","code":"quota_exceeded","new_field":[1]}`), &e); err != nil || e.Code != CodeOther {
		t.Errorf("Error code = %q, %v", e.Code, err)
	}
	var v JobView
	if err := json.Unmarshal([]byte(`{"id":"j","state":"paused","cancel":"later","result":{"failure":"oom","artifacts":[{"outcome":"deferred"}]}}`), &v); err != nil {
		t.Fatal(err)
	}
	if v.State != JobStateOther || v.Cancel != CancelOther || v.Result.Failure != FailureOther || v.Result.Artifacts[0].Outcome != ArtifactOther {
		t.Errorf("decoded %+v / %+v", v, v.Result)
	}
	var o OutcomeRequest
	if err := json.Unmarshal([]byte(`{"admission":"a","outcome":"maybe"}`), &o); err != nil || o.Outcome != OutcomeOther {
		t.Errorf("outcome = %q, %v", o.Outcome, err)
	}
	if !errors.Is(o.Validate(), ErrInvalid) {
		t.Error("OutcomeRequest with unknown outcome validated")
	}
	var h RunnerHeartbeat
	if err := json.Unmarshal([]byte(`{"name":"ci","state":"hibernating"}`), &h); err != nil || h.State != RunnerOther {
		t.Errorf("runner state = %q, %v", h.State, err)
	}
	var s ServerStatus
	if err := json.Unmarshal([]byte(`{"status":"frozen"}`), &s); err != nil || s.Status != ApprovalOther {
		t.Errorf("approval = %q, %v", s.Status, err)
	}
	var re RelayError
	if err := json.Unmarshal([]byte(`{"code":"moved"}`), &re); err != nil || re.Code != RelayErrorOther {
		t.Errorf("relay error = %q, %v", re.Code, err)
	}
}

// TestStatusError: a client's view of an error answer.
//
// spec: API-53, API-54, API-55
func TestStatusError(t *testing.T) {
	for _, tc := range []struct {
		err  StatusError
		want bool
	}{
		{StatusError{Status: 503, Body: Error{Code: CodeUnavailable, RetryAfterSecs: 2}}, true},
		{StatusError{Status: 410, Body: Error{Code: CodeReservationGone}}, false},
		{StatusError{Status: 502, Body: Error{Code: CodeOther}}, true},
		{StatusError{Status: 418, Body: Error{Code: CodeOther}}, false},
	} {
		var err error = &tc.err
		var se *StatusError
		if !errors.As(err, &se) || se.Retryable() != tc.want {
			t.Errorf("%v: Retryable = %v, want %v", err, se.Retryable(), tc.want)
		}
		if !strings.Contains(err.Error(), string(tc.err.Body.Code)) {
			t.Errorf("Error() = %q lacks the code", err)
		}
	}
}

// TestRequestID: 16 random bytes, lower-case hex; validation.
//
// spec: API-42
func TestRequestID(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		id := NewRequestID()
		if err := ValidateRequestID(id); err != nil {
			t.Fatalf("NewRequestID() = %q invalid: %v", id, err)
		}
		if seen[id] {
			t.Fatalf("NewRequestID repeated %q", id)
		}
		seen[id] = true
	}
	for _, bad := range []string{"", "abc", strings.Repeat("A", 32), strings.Repeat("g", 32), strings.Repeat("0", 31), strings.Repeat("0", 33), strings.Repeat("0", 30) + "é"} {
		if err := ValidateRequestID(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateRequestID(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

// TestNegotiateVersion: the highest common version, or an error naming both
// ranges.
//
// spec: RSESS-10
func TestNegotiateVersion(t *testing.T) {
	for _, tc := range []struct {
		local, remote VersionRange
		want          int
		hint          string
	}{
		{RelayHubVersions, RelayClientVersions, 4, ""},
		{RelayHubVersions, VersionRange{2, 3}, 3, ""},
		{RelayHubVersions, VersionRange{2, 2}, 2, ""},
		{RelayHubVersions, VersionRange{2, 9}, 4, ""},
		{RelayHubVersions, VersionRange{1, 1}, 1, ""},
		{RelayClientVersions, VersionRange{1, 1}, 0, "peer is too old"},
		{RelayHubVersions, VersionRange{5, 6}, 0, "this side is too old"},
		{RelayHubVersions, VersionRange{3, 2}, 0, "invalid range"},
		{RelayHubVersions, VersionRange{0, 3}, 0, "invalid range"},
	} {
		got, err := NegotiateVersion("relay", tc.local, tc.remote)
		if got != tc.want {
			t.Errorf("NegotiateVersion(%v, %v) = %d, want %d", tc.local, tc.remote, got, tc.want)
		}
		if tc.hint == "" {
			if err != nil {
				t.Errorf("NegotiateVersion(%v, %v) error %v", tc.local, tc.remote, err)
			}
			continue
		}
		if !errors.Is(err, ErrVersion) {
			t.Errorf("NegotiateVersion(%v, %v) error %v, want ErrVersion", tc.local, tc.remote, err)
			continue
		}
		msg := err.Error()
		for _, s := range []string{tc.local.String(), tc.remote.String(), tc.hint, "relay session"} {
			if !strings.Contains(msg, s) {
				t.Errorf("error %q does not mention %q", msg, s)
			}
		}
	}
}

// spec: PROTO-04, PROTO-06, PROTO-07, PROTO-08, PROTO-09
func TestValidate(t *testing.T) {
	ok := []interface{ Validate() error }{
		envelope, placement,
		OutcomeRequest{Admission: "a", Outcome: OutcomeReleased},
		CancelRequest{Mode: CancelGraceful},
		JobView{State: JobRunning},
		JobView{State: JobFinished, Result: &JobResult{}},
		*sampleResult(),
	}
	for _, v := range ok {
		if err := v.Validate(); err != nil {
			t.Errorf("%T %+v: %v", v, v, err)
		}
	}
	bad := []interface{ Validate() error }{
		Envelope{Mem: GiB, CPUs: 0, Disk: GiB},
		Envelope{},
		Placement{Envelope: envelope},
		OutcomeRequest{Outcome: OutcomeJob},
		OutcomeRequest{Admission: "a"},
		CancelRequest{},
		CancelRequest{Mode: CancelOther},
		JobView{State: JobFinished},
		JobView{State: JobRunning, Result: &JobResult{}},
		JobResult{OutputLen: -1},
		JobResult{Failure: FailureOther},
		JobResult{Artifacts: []ArtifactUpload{{Outcome: ArtifactOther}}},
		JobResult{Usage: &Usage{WallMS: -1}},
	}
	for _, v := range bad {
		if err := v.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%T %+v: Validate() = %v, want ErrInvalid", v, v, err)
		}
	}
	if !(Envelope{Mem: GiB, CPUs: 1, Disk: GiB}).Fits(envelope) || envelope.Fits(Envelope{Mem: GiB, CPUs: 8, Disk: 16 * GiB}) {
		t.Error("Fits wrong")
	}
	if got := envelope.String(); got != "mem=16G cpus=8 disk=16G" {
		t.Errorf("String() = %q", got)
	}
}

// TestSubmissionRedacted: the hub's stored submission keeps no secret.
//
// spec: AUTH-07
func TestSubmissionRedacted(t *testing.T) {
	s := JobSubmission{Runner: "ci", RequestID: requestID, Placement: placement, Spec: sampleSpec()}
	r := s.Redacted()
	if r.Spec.GitLabCI.Token != "" || s.Spec.GitLabCI.Token == "" || r.RequestID != requestID {
		t.Errorf("Redacted = %+v (original token %q)", r.Spec.GitLabCI, s.Spec.GitLabCI.Token)
	}
}

// TestRoutes: every route is a valid ServeMux pattern under /v1/, and no
// two collide (registering them all on one mux does not panic).
//
// spec: API-01, API-02, API-03, API-04, API-05, API-06, API-07, API-08, API-09
func TestRoutes(t *testing.T) {
	mux := http.NewServeMux()
	for _, r := range []string{RouteCapacity, RouteReserve, RouteTicketGet, RouteTicketDelete, RouteClaim,
		RouteOutcome, RouteRenew, RouteReservationDelete, RouteSubmit, RouteJobGet, RouteOutput, RouteCancel,
		RouteSettle, RouteClients, RouteRelaySession} {
		if _, path, _ := strings.Cut(r, " "); !strings.HasPrefix(path, "/v1/") {
			t.Errorf("%q is not under /v1/", r)
		}
		mux.HandleFunc(r, func(http.ResponseWriter, *http.Request) {})
	}
	for _, tc := range []struct{ method, path, want string }{
		{"POST", "/v1/reservations/adm-7/outcome", RouteOutcome},
		{"POST", "/v1/reservations/res-9/claim", RouteClaim},
		{"GET", "/v1/reservations/tickets/tkt-5", RouteTicketGet},
		{"DELETE", "/v1/reservations/res-9", RouteReservationDelete},
		{"GET", "/v1/jobs/job-1/output", RouteOutput},
	} {
		req, _ := http.NewRequest(tc.method, "https://hub"+tc.path, nil)
		if _, pat := mux.Handler(req); pat != tc.want {
			t.Errorf("%s %s routes to %q, want %q", tc.method, tc.path, pat, tc.want)
		}
	}
}
