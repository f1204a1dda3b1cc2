package gitlab

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"
)

const patchToken = "token"

var patchTraceContent = []byte("trace trace trace")

// patchHandler is called with the body and the parsed Content-Range.
type patchHandler func(w http.ResponseWriter, r *http.Request, body []byte, offset, last int)

// getPatchServer mirrors gitlab-runner's: it checks path, method and job
// token and parses Content-Range before calling handler.
func getPatchServer(t *testing.T, handler patchHandler) *Client {
	t.Helper()
	c, _ := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(HeaderRequestID) == "" {
			t.Error("patch without X-Request-Id")
		}
		if r.URL.Path != "/api/v4/jobs/1/trace" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		if r.Method != http.MethodPatch {
			w.WriteHeader(http.StatusNotAcceptable)
			return
		}
		if got := r.Header.Get("JOB-TOKEN"); got != patchToken {
			t.Errorf("JOB-TOKEN = %q", got)
		}
		if got := r.Header.Get("Content-Type"); got != "text/plain" {
			t.Errorf("Content-Type = %q", got)
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Error(err)
		}
		parts := strings.Split(r.Header.Get("Content-Range"), "-")
		if len(parts) != 2 {
			t.Errorf("Content-Range = %q", r.Header.Get("Content-Range"))
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		offset, err1 := strconv.Atoi(parts[0])
		last, err2 := strconv.Atoi(parts[1])
		if err1 != nil || err2 != nil {
			t.Errorf("Content-Range = %q", r.Header.Get("Content-Range"))
		}
		handler(w, r, body, offset, last)
	})
	return c
}

var job1 = JobCredentials{ID: 1, Token: patchToken}

// Ports of gitlab-runner's TestUnknownPatchTrace, TestForbiddenPatchTrace
// and TestJobFailedStatePatchTrace.
// spec: GL-12, GL-17, GL-21
func TestJobFailedStatePatchTrace(t *testing.T) {
	tests := []struct {
		name    string
		handler patchHandler
		kind    PatchKind
	}{
		{"unknown (404)", func(w http.ResponseWriter, r *http.Request, body []byte, offset, last int) {
			w.WriteHeader(http.StatusNotFound)
		}, PatchNotFound},
		{"forbidden (403)", func(w http.ResponseWriter, r *http.Request, body []byte, offset, last int) {
			w.WriteHeader(http.StatusForbidden)
		}, PatchAbort},
		{"Job-Status failed", func(w http.ResponseWriter, r *http.Request, body []byte, offset, last int) {
			w.Header().Set("Job-Status", "failed")
			w.WriteHeader(http.StatusAccepted)
		}, PatchAbort},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := getPatchServer(t, tt.handler)
			out, err := c.PatchTrace(t.Context(), job1, 0, patchTraceContent, false)
			if err != nil || out.Kind != tt.kind || !out.Aborts() || out.NewOffset != 0 {
				t.Errorf("PatchTrace = %+v, %v; want %v aborting at offset 0", out, err, tt.kind)
			}
		})
	}
}

// Port of gitlab-runner's TestPatchTrace: 202 advances the offset past the
// bytes sent; canceling asks for a cancel.
// spec: GL-10, GL-11, GL-17, GL-21
func TestPatchTrace(t *testing.T) {
	for _, remoteState := range []string{"running", "canceling"} {
		t.Run(remoteState, func(t *testing.T) {
			c := getPatchServer(t, func(w http.ResponseWriter, r *http.Request, body []byte, offset, last int) {
				if !bytes.Equal(patchTraceContent[offset:last+1], body) {
					t.Errorf("body %q does not match range %d-%d", body, offset, last)
				}
				w.Header().Add("Job-Status", remoteState)
				w.Header().Add(HeaderRequestID, "foobar")
				w.WriteHeader(http.StatusAccepted)
			})
			cancel := remoteState == "canceling"
			for _, step := range []struct {
				offset, end int
				want        int64
			}{{0, len(patchTraceContent), 17}, {3, len(patchTraceContent), 17}, {3, 10, 10}} {
				out, err := c.PatchTrace(t.Context(), job1, int64(step.offset), patchTraceContent[step.offset:step.end], false)
				if err != nil || out.Kind != PatchSucceeded || out.CancelRequested() != cancel || out.NewOffset != step.want ||
					out.CorrelationID != "foobar" || out.Sent != step.end-step.offset {
					t.Errorf("PatchTrace(%d..%d) = %+v, %v; want succeeded at %d, cancel %v", step.offset, step.end, out, err, step.want, cancel)
				}
			}
		})
	}
}

// Port of gitlab-runner's TestRangeMismatchPatchTrace: 416 moves the
// offset to the end of GitLab's Range.
// spec: GL-11, GL-21
func TestRangeMismatchPatchTrace(t *testing.T) {
	for _, remoteState := range []string{"running", "canceling"} {
		t.Run(remoteState, func(t *testing.T) {
			c := getPatchServer(t, func(w http.ResponseWriter, r *http.Request, body []byte, offset, last int) {
				if offset > 10 {
					w.Header().Set("Range", "0-10")
					w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
					return
				}
				w.Header().Add("Job-Status", remoteState)
				w.WriteHeader(http.StatusAccepted)
			})
			for _, off := range []int{11, 15} {
				out, err := c.PatchTrace(t.Context(), job1, int64(off), patchTraceContent[off:], false)
				if err != nil || out.Kind != PatchRangeMismatch || out.NewOffset != 10 || out.CancelRequested() {
					t.Errorf("PatchTrace(%d) = %+v, %v; want range mismatch to 10", off, out, err)
				}
			}
			out, err := c.PatchTrace(t.Context(), job1, 5, patchTraceContent[5:], false)
			if err != nil || out.Kind != PatchSucceeded || out.NewOffset != int64(len(patchTraceContent)) ||
				out.CancelRequested() != (remoteState == "canceling") {
				t.Errorf("PatchTrace(5) = %+v, %v", out, err)
			}
		})
	}
}

// Port of gitlab-runner's TestPatchTraceUpdatedTrace and
// TestPatchTraceContentRangeAndLength: Content-Range is "<start>-<end>",
// end inclusive, no unit; Content-Length is the body's; empty patches are
// never sent.
// spec: GL-10, GL-21
func TestPatchTraceContentRangeAndLength(t *testing.T) {
	tests := map[string]struct {
		trace       []byte
		offset      int64
		remote      string
		wantRange   string
		wantNew     int64
		wantCancel  bool
		notExpected bool
	}{
		"0 bytes":               {trace: []byte{}, notExpected: true},
		"1 byte":                {trace: []byte("1"), wantRange: "0-0", wantNew: 1},
		"2 bytes":               {trace: []byte("12"), wantRange: "0-1", wantNew: 2},
		"2 bytes canceling job": {trace: []byte("12"), remote: "canceling", wantRange: "0-1", wantNew: 2, wantCancel: true},
		"4 bytes at 5":          {trace: []byte("test"), offset: 5, wantRange: "5-8", wantNew: 9},
		"1 byte at 13":          {trace: []byte(" "), offset: 13, wantRange: "13-13", wantNew: 14},
		"empty at 14":           {trace: nil, offset: 14, wantNew: 14, notExpected: true},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			var calls atomic.Int32
			c, _ := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				if got := r.Header.Get("Content-Range"); got != tt.wantRange {
					t.Errorf("Content-Range = %q, want %q", got, tt.wantRange)
				}
				if r.ContentLength != int64(len(tt.trace)) {
					t.Errorf("Content-Length = %d, want %d", r.ContentLength, len(tt.trace))
				}
				if tt.remote != "" {
					w.Header().Set("Job-Status", tt.remote)
				}
				w.WriteHeader(http.StatusAccepted)
			})
			out, err := c.PatchTrace(t.Context(), job1, tt.offset, tt.trace, false)
			if err != nil || out.Kind != PatchSucceeded || out.NewOffset != tt.wantNew || out.CancelRequested() != tt.wantCancel {
				t.Errorf("PatchTrace = %+v, %v; want succeeded at %d cancel %v", out, err, tt.wantNew, tt.wantCancel)
			}
			if n := calls.Load(); (n == 0) != tt.notExpected {
				t.Errorf("PATCH sent %d times, want it sent: %v", n, !tt.notExpected)
			}
		})
	}
}

// Port of gitlab-runner's TestPatchTraceContentRangeHeaderValues.
// spec: GL-10, GL-21
func TestPatchTraceContentRangeHeaderValues(t *testing.T) {
	c := getPatchServer(t, func(w http.ResponseWriter, r *http.Request, body []byte, offset, last int) {
		if offset != 0 || last != len(patchTraceContent)-1 {
			t.Errorf("Content-Range = %d-%d, want 0-%d", offset, last, len(patchTraceContent)-1)
		}
		w.WriteHeader(http.StatusAccepted)
	})
	if out, err := c.PatchTrace(t.Context(), job1, 0, patchTraceContent, false); err != nil || out.Kind != PatchSucceeded {
		t.Errorf("PatchTrace = %+v, %v", out, err)
	}
	for _, tt := range []struct {
		start int64
		n     int
		want  string
	}{{0, 17, "0-16"}, {0, 1, "0-0"}, {1 << 40, 2, "1099511627776-1099511627777"}} {
		if got := ContentRange(tt.start, tt.n); got != tt.want {
			t.Errorf("ContentRange(%d, %d) = %q, want %q", tt.start, tt.n, got, tt.want)
		}
	}
}

// Port of gitlab-runner's TestPatchTraceUrlParams: debug_trace is always
// sent.
// spec: GL-10, GL-21
func TestPatchTraceUrlParams(t *testing.T) {
	want := "debug_trace=false"
	c := getPatchServer(t, func(w http.ResponseWriter, r *http.Request, body []byte, offset, last int) {
		if r.URL.RawQuery != want {
			t.Errorf("query = %q, want %q", r.URL.RawQuery, want)
		}
		w.WriteHeader(http.StatusAccepted)
	})
	if out, _ := c.PatchTrace(t.Context(), job1, 0, patchTraceContent, false); out.Kind != PatchSucceeded {
		t.Errorf("PatchTrace(debug false) = %v", out.Kind)
	}
	want = "debug_trace=true"
	if out, _ := c.PatchTrace(t.Context(), job1, 0, patchTraceContent, true); out.Kind != PatchSucceeded {
		t.Errorf("PatchTrace(debug true) = %v", out.Kind)
	}
}

// Port of gitlab-runner's TestUpdateIntervalHeaderHandling, for PUT and
// PATCH: the header is reported as sent, 0 when absent or unparsable.
// spec: GL-10, GL-21
func TestUpdateIntervalHeaderHandling(t *testing.T) {
	tests := map[string]struct {
		send  bool
		value string
		want  time.Duration
	}{
		"header set to negative integer": {true, "-10", -10 * time.Second},
		"header set to zero":             {true, "0", 0},
		"header set to positive integer": {true, "10", 10 * time.Second},
		"header set to invalid format":   {true, "some text", 0},
		"empty header":                   {true, "", 0},
		"header not set":                 {false, "", 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, _ := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
				if tc.send {
					w.Header().Add(HeaderUpdateInterval, tc.value)
				}
				if r.Method == http.MethodPatch {
					w.WriteHeader(http.StatusAccepted)
					return
				}
				w.WriteHeader(http.StatusNotFound)
			})
			u, _ := c.UpdateJob(t.Context(), JobCredentials{ID: 10}, UpdateJobInfo{State: StateSuccess})
			if u.UpdateInterval != tc.want || u.Kind != UpdateAbort {
				t.Errorf("UpdateJob: interval %v kind %v, want %v abort (404)", u.UpdateInterval, u.Kind, tc.want)
			}
			p, _ := c.PatchTrace(t.Context(), job1, 0, patchTraceContent, false)
			if p.UpdateInterval != tc.want || p.Kind != PatchSucceeded {
				t.Errorf("PatchTrace: interval %v kind %v, want %v succeeded", p.UpdateInterval, p.Kind, tc.want)
			}
		})
	}
}

// The interval the trace loop uses: default 3 s, positive values from
// GitLab replace it, capped at 15 minutes.
// spec: GL-10
func TestNextUpdateInterval(t *testing.T) {
	tests := []struct{ cur, remote, want time.Duration }{
		{0, 0, 3 * time.Second},
		{0, -10 * time.Second, 3 * time.Second},
		{5 * time.Second, 0, 5 * time.Second},
		{5 * time.Second, 60 * time.Second, 60 * time.Second},
		{5 * time.Second, time.Hour, 15 * time.Minute},
		{3 * time.Second, 15 * time.Minute, 15 * time.Minute},
		{60 * time.Second, -1, 60 * time.Second},
	}
	for _, tt := range tests {
		if got := NextUpdateInterval(tt.cur, tt.remote); got != tt.want {
			t.Errorf("NextUpdateInterval(%v, %v) = %v, want %v", tt.cur, tt.remote, got, tt.want)
		}
	}
}

// Port of gitlab-runner's TestAbortedPatchTrace.
// spec: GL-12, GL-17, GL-21
func TestAbortedPatchTrace(t *testing.T) {
	tests := map[string]PatchOutcome{
		"canceling": {Kind: PatchSucceeded, NewOffset: 17, JobStatus: JobStatusCanceling},
		"canceled":  {Kind: PatchAbort, NewOffset: 0, JobStatus: JobStatusCanceled},
		"failed":    {Kind: PatchAbort, NewOffset: 0, JobStatus: JobStatusFailed},
	}
	for status, want := range tests {
		t.Run(status, func(t *testing.T) {
			c := getPatchServer(t, func(w http.ResponseWriter, r *http.Request, body []byte, offset, last int) {
				w.Header().Set("Job-Status", status)
				w.WriteHeader(http.StatusAccepted)
			})
			out, err := c.PatchTrace(t.Context(), job1, 0, patchTraceContent, false)
			if err != nil || out.Kind != want.Kind || out.NewOffset != want.NewOffset || out.JobStatus != want.JobStatus {
				t.Errorf("PatchTrace = %+v, %v; want %+v", out, err, want)
			}
			if out.CancelRequested() != (status == "canceling") || out.Aborts() != (want.Kind == PatchAbort) {
				t.Errorf("cancel %v aborts %v", out.CancelRequested(), out.Aborts())
			}
		})
	}
}

// A patch carries at most 1 MiB; the rest goes in the next patch from
// NewOffset.
// spec: GL-10
func TestPatchTraceMaxSize(t *testing.T) {
	var mu sync.Mutex
	var ranges []string
	c, _ := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if len(b) > MaxTracePatch {
			t.Errorf("patch of %d bytes", len(b))
		}
		mu.Lock()
		ranges = append(ranges, fmt.Sprintf("%s/%d", r.Header.Get("Content-Range"), len(b)))
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	})
	trace := bytes.Repeat([]byte("x"), 2*MaxTracePatch+5)
	var off int64
	for off < int64(len(trace)) {
		out, err := c.PatchTrace(t.Context(), job1, off, trace[off:], false)
		if err != nil || out.Kind != PatchSucceeded {
			t.Fatalf("PatchTrace(%d) = %+v, %v", off, out, err)
		}
		off = out.NewOffset
	}
	want := "0-1048575/1048576 1048576-2097151/1048576 2097152-2097156/5"
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(ranges, " "); got != want {
		t.Errorf("patches = %s, want %s", got, want)
	}
}

// The patch status → outcome table, case by case (STYLE C11).
// spec: GL-11, GL-12, GL-17
func TestPatchTraceOutcomeTable(t *testing.T) {
	tests := []struct {
		status    int
		rangeHdr  string
		jobStatus string
		kind      PatchKind
		newOffset int64
		err       bool
	}{
		{202, "0-115", "", PatchSucceeded, 115, false},
		{202, "", "running", PatchSucceeded, 115, false},
		{202, "", "canceled", PatchAbort, 100, false},
		{416, "0-42", "", PatchRangeMismatch, 42, false},
		{416, "0-0", "", PatchRangeMismatch, 0, false},
		{416, "", "", PatchRangeMismatch, 0, false},
		{416, "garbage", "", PatchRangeMismatch, 0, false},
		{416, "0-x", "", PatchRangeMismatch, 0, false},
		{416, "0-200", "failed", PatchAbort, 100, false},
		{403, "", "", PatchAbort, 100, false},
		{404, "", "", PatchNotFound, 100, false},
		{400, "", "", PatchFailed, 100, true},
		{500, "", "", PatchFailed, 100, true},
		{200, "", "", PatchFailed, 100, true},
	}
	for _, tt := range tests {
		h := http.Header{}
		if tt.rangeHdr != "" {
			h.Set("Range", tt.rangeHdr)
		}
		if tt.jobStatus != "" {
			h.Set("Job-Status", tt.jobStatus)
		}
		out, err := patchTraceOutcome(call{method: "PATCH", path: "jobs/1/trace"}, answer{status: tt.status, header: h}, 100, 15)
		if out.Kind != tt.kind || out.NewOffset != tt.newOffset || (err != nil) != tt.err {
			t.Errorf("%d Range %q Job-Status %q: got %v at %d err %v; want %v at %d err %v",
				tt.status, tt.rangeHdr, tt.jobStatus, out.Kind, out.NewOffset, err, tt.kind, tt.newOffset, tt.err)
		}
	}
}

// Transport failures keep the offset and are errors.
func TestPatchTraceCantConnect(t *testing.T) {
	c, s := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {})
	s.Close()
	out, err := c.PatchTrace(t.Context(), job1, 4, patchTraceContent, false)
	if err == nil || out.Kind != PatchFailed || out.NewOffset != 4 {
		t.Errorf("PatchTrace on a closed server = %+v, %v", out, err)
	}
}

// Whatever bytes the relay patches reach GitLab unaltered (invalid UTF-8,
// NULs, carriage returns, escape sequences), with the range they cover.
// spec: TRACE-06, GL-10
func TestPatchTraceBytesUnaltered(t *testing.T) {
	var mu sync.Mutex
	var got []byte
	var gotRange string
	c, _ := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got, gotRange = b, r.Header.Get("Content-Range")
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	})
	rapid.Check(t, func(rt *rapid.T) {
		content := rapid.SliceOfN(rapid.Byte(), 1, 4096).Draw(rt, "content")
		offset := rapid.Int64Range(0, 1<<40).Draw(rt, "offset")
		out, err := c.PatchTrace(t.Context(), job1, offset, content, false)
		if err != nil || out.Kind != PatchSucceeded || out.NewOffset != offset+int64(len(content)) {
			rt.Fatalf("PatchTrace = %+v, %v", out, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if !bytes.Equal(got, content) {
			rt.Fatalf("GitLab received %q, sent %q", got, content)
		}
		if want := fmt.Sprintf("%d-%d", offset, offset+int64(len(content))-1); gotRange != want {
			rt.Fatalf("Content-Range = %q, want %q", gotRange, want)
		}
	})
}
