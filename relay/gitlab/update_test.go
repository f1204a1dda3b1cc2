package gitlab

import (
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"
)

// testUpdateJobHandler mirrors gitlab-runner's: the path picks the answer;
// on 200 the state decides (running ok, failed ok only for script or
// system failures, anything else 400).
func testUpdateJobHandler(t *testing.T, w http.ResponseWriter, r *http.Request) {
	w.Header().Add(HeaderRequestID, "foobar")
	if r.Method != http.MethodPut {
		w.WriteHeader(http.StatusNotAcceptable)
		return
	}
	switch r.URL.Path {
	case "/api/v4/jobs/200":
	case "/api/v4/jobs/202":
		w.WriteHeader(http.StatusAccepted)
		return
	case "/api/v4/jobs/403":
		w.WriteHeader(http.StatusForbidden)
		return
	case "/api/v4/jobs/412":
		w.WriteHeader(http.StatusPreconditionFailed)
		return
	default:
		w.WriteHeader(http.StatusNotFound)
		return
	}
	req := decodeBody(t, r)
	token, _ := req["token"].(string)
	if h := r.Header.Get("job-token"); h == "" || h != token {
		t.Errorf("JOB-TOKEN header %q, body token %q: must match", h, token)
	}
	if token != "token" {
		t.Errorf("token = %q", token)
	}
	switch req["state"] {
	case "running", "canceling":
		w.WriteHeader(http.StatusOK)
	case "failed":
		if fr, _ := req["failure_reason"].(string); fr == ReasonScriptFailure || fr == ReasonRunnerSystemFailure {
			w.WriteHeader(http.StatusOK)
		} else {
			w.WriteHeader(http.StatusBadRequest)
		}
	default:
		w.WriteHeader(http.StatusBadRequest)
	}
}

// Port of gitlab-runner's TestUpdateJob.
// spec: GL-15, GL-16, GL-20
func TestUpdateJob(t *testing.T) {
	output := TraceOutput{Checksum: "checksum", Bytesize: 42}
	tests := map[string]struct {
		id      int64
		info    UpdateJobInfo
		kind    UpdateKind
		wantErr bool
	}{
		"Update continues when running":                    {200, UpdateJobInfo{State: StateRunning, Output: output}, UpdateSucceeded, false},
		"Update aborts if the access is forbidden":         {403, UpdateJobInfo{State: StateSuccess, Output: output}, UpdateAbort, false},
		"Update fails for badly formatted request":         {200, UpdateJobInfo{State: "invalid-state", Output: output}, UpdateFailed, true},
		"Update aborts for unknown job":                    {404, UpdateJobInfo{State: StateSuccess, Output: output}, UpdateAbort, false},
		"Update returns accepted, but not completed (202)": {202, UpdateJobInfo{State: StateSuccess, Output: output}, UpdateAccepted, false},
		"Update returns trace validation failed (412)":     {412, UpdateJobInfo{State: StateSuccess, Output: output}, UpdateTraceValidationFailed, false},
		"Update should continue when script fails": {200,
			UpdateJobInfo{State: StateFailed, FailureReason: ReasonScriptFailure, Output: output}, UpdateSucceeded, false},
		"Update fails for invalid failure reason": {200,
			UpdateJobInfo{State: StateFailed, FailureReason: "invalid-failure-reason", Output: output}, UpdateFailed, true},
	}
	c, _ := newTestClient(t, func(w http.ResponseWriter, r *http.Request) { testUpdateJobHandler(t, w, r) })
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, err := c.UpdateJob(t.Context(), JobCredentials{ID: tc.id, Token: "token"}, tc.info)
			if out.Kind != tc.kind || (err != nil) != tc.wantErr {
				t.Errorf("UpdateJob = %v, %v; want %v, error %v", out.Kind, err, tc.kind, tc.wantErr)
			}
			if err != nil && !errors.Is(err, ErrUnexpectedStatus) {
				t.Errorf("err = %v, want ErrUnexpectedStatus", err)
			}
			if out.CorrelationID != "foobar" {
				t.Errorf("CorrelationID = %q", out.CorrelationID)
			}
		})
	}
}

// The body of a final failed update has the state, the failure reason,
// the exit code and the output's checksum and size; the commit is state
// running with an empty output object.
// spec: GL-08, GL-15, FAIL-02
func TestUpdateJobFinalBody(t *testing.T) {
	var mu sync.Mutex
	var got map[string]any
	c, _ := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		b := decodeBody(t, r)
		mu.Lock()
		got = b
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	})
	u := UpdateJobInfo{State: StateFailed, FailureReason: ReasonScriptFailure,
		Output: TraceOutput{Checksum: "crc32:2690bbf4", Bytesize: 80}, ExitCode: 1}
	if _, err := c.UpdateJob(t.Context(), JobCredentials{ID: 7, Token: "test-job-token"}, u); err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	if err := json.Unmarshal(readFixture(t, "update_job_failed.json"), &want); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	for _, k := range []string{"token", "state", "failure_reason", "checksum", "output", "exit_code"} {
		g, _ := json.Marshal(got[k])
		w, _ := json.Marshal(want[k])
		if string(g) != string(w) {
			t.Errorf("%s = %s, want %s", k, g, w)
		}
	}
	mu.Unlock()
	// The commit (state running, empty output) sends "output": {} and no
	// checksum, failure_reason or exit_code.
	if _, err := c.UpdateJob(t.Context(), JobCredentials{ID: 7, Token: "test-job-token"}, UpdateJobInfo{State: StateRunning}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	b, _ := json.Marshal(map[string]any{"output": got["output"], "checksum": got["checksum"], "failure_reason": got["failure_reason"], "exit_code": got["exit_code"]})
	if string(b) != `{"checksum":null,"exit_code":null,"failure_reason":null,"output":{}}` {
		t.Errorf("commit body parts = %s", b)
	}
}

// Port of gitlab-runner's TestUpdateJobAsKeepAlive: Job-Status canceled
// or failed aborts; canceling succeeds with a cancel request.
// spec: GL-13, GL-17, GL-20
func TestUpdateJobAsKeepAlive(t *testing.T) {
	var mu sync.Mutex
	var gotBody map[string]any
	c, _ := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add(HeaderRequestID, "foobar")
		switch r.URL.Path {
		case "/api/v4/jobs/10":
		case "/api/v4/jobs/11":
			w.Header().Set("Job-Status", "canceled")
		case "/api/v4/jobs/12":
			w.Header().Set("Job-Status", "failed")
		case "/api/v4/jobs/13":
			w.Header().Set("Job-Status", "canceling")
		default:
			w.WriteHeader(http.StatusNotFound)
			return
		}
		b := decodeBody(t, r)
		mu.Lock()
		gotBody = b
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	})
	tests := map[string]struct {
		id        int64
		kind      UpdateKind
		status    JobStatus
		cancelReq bool
	}{
		"Update should continue when running":               {10, UpdateSucceeded, JobStatusNone, false},
		"Update should be aborted when Job-Status=canceled": {11, UpdateAbort, JobStatusCanceled, false},
		"Update should be aborted when Job-Status=failed":   {12, UpdateAbort, JobStatusFailed, false},
		"Update should continue when Job-Status=canceling":  {13, UpdateSucceeded, JobStatusCanceling, true},
	}
	output := TraceChecksum([]byte("some trace"))
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, err := c.KeepAlive(t.Context(), JobCredentials{ID: tc.id, Token: "token"}, output)
			if err != nil || out.Kind != tc.kind || out.JobStatus != tc.status || out.CancelRequested() != tc.cancelReq {
				t.Errorf("KeepAlive = %+v, %v; want %v, %q, cancel %v", out, err, tc.kind, tc.status, tc.cancelReq)
			}
			mu.Lock()
			defer mu.Unlock()
			if gotBody["state"] != "running" || gotBody["token"] != "token" || gotBody["checksum"] != output.Checksum {
				t.Errorf("keep-alive body = %v", gotBody)
			}
			o, _ := gotBody["output"].(map[string]any)
			if o["checksum"] != output.Checksum || o["bytesize"] != float64(output.Bytesize) {
				t.Errorf("keep-alive output = %v, want %+v", o, output)
			}
		})
	}
}

// The update status → outcome table, case by case (STYLE C11).
// spec: GL-16, GL-17, GL-20
func TestUpdateJobOutcomeTable(t *testing.T) {
	tests := []struct {
		status    int
		jobStatus string
		interval  string
		kind      UpdateKind
		err       bool
		wantIvl   time.Duration
	}{
		{200, "", "", UpdateSucceeded, false, 0},
		{200, "running", "30", UpdateSucceeded, false, 30 * time.Second},
		{200, "canceling", "", UpdateSucceeded, false, 0},
		{200, "canceled", "", UpdateAbort, false, 0},
		{200, "failed", "", UpdateAbort, false, 0},
		{202, "", "4", UpdateAccepted, false, 4 * time.Second},
		{202, "canceled", "", UpdateAbort, false, 0},
		{412, "", "", UpdateTraceValidationFailed, false, 0},
		{403, "", "", UpdateAbort, false, 0},
		{403, "running", "", UpdateAbort, false, 0},
		{404, "", "", UpdateAbort, false, 0},
		{400, "", "", UpdateFailed, true, 0},
		{409, "", "", UpdateFailed, true, 0},
		{500, "", "", UpdateFailed, true, 0},
		{503, "", "", UpdateFailed, true, 0},
		{400, "failed", "", UpdateAbort, false, 0},
	}
	for _, tt := range tests {
		h := http.Header{}
		if tt.jobStatus != "" {
			h.Set("Job-Status", tt.jobStatus)
		}
		if tt.interval != "" {
			h.Set("X-GitLab-Trace-Update-Interval", tt.interval)
		}
		out, err := updateJobOutcome(call{method: "PUT", path: "jobs/1"}, answer{status: tt.status, header: h})
		if out.Kind != tt.kind || (err != nil) != tt.err || out.UpdateInterval != tt.wantIvl || string(out.JobStatus) != tt.jobStatus {
			t.Errorf("%d Job-Status %q: got %+v, %v; want %v err %v interval %v", tt.status, tt.jobStatus, out, err, tt.kind, tt.err, tt.wantIvl)
		}
	}
}

// Transport failures are errors with an UpdateFailed outcome.
func TestUpdateJobTransportError(t *testing.T) {
	c, s := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {})
	s.Close()
	out, err := c.UpdateJob(t.Context(), JobCredentials{ID: 1, Token: "t"}, UpdateJobInfo{State: StateRunning})
	if err == nil || out.Kind != UpdateFailed || errors.Is(err, ErrUnexpectedStatus) {
		t.Errorf("UpdateJob on a closed server = %v, %v", out.Kind, err)
	}
}

// spec: GL-17
func TestParseJobStatus(t *testing.T) {
	tests := []struct {
		in               string
		aborted, cancelR bool
	}{
		{"", false, false}, {"running", false, false}, {"canceling", false, true},
		{"Canceling ", false, true}, {"canceled", true, false}, {"failed", true, false},
		{"success", false, false}, {"pending", false, false}, {"something-new", false, false},
	}
	for _, tt := range tests {
		s := ParseJobStatus(tt.in)
		if s.Aborted() != tt.aborted || s.CancelRequested() != tt.cancelR {
			t.Errorf("ParseJobStatus(%q) = %q: aborted %v cancel %v", tt.in, s, s.Aborted(), s.CancelRequested())
		}
	}
}
