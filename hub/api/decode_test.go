package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/job"
)

// spec: API-46, API-55
func TestDecodeStrict(t *testing.T) {
	for _, tc := range []struct {
		name    string
		body    string
		emptyOK bool
		wantErr bool
	}{
		{"valid", `{"mode":"graceful"}`, false, false},
		{"spaces around", " \n{\"mode\":\"immediate\"}\n ", false, false},
		{"unknown field", `{"mode":"graceful","why":"x"}`, false, true},
		{"trailing object", `{"mode":"graceful"}{}`, false, true},
		{"trailing garbage", `{"mode":"graceful"} x`, false, true},
		{"truncated", `{"mode":`, false, true},
		{"not an object", `"graceful"`, false, true},
		{"wrong type", `{"mode":1}`, false, true},
		{"empty refused", ``, false, true},
		{"empty allowed", ``, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v client.CancelRequest
			err := decode([]byte(tc.body), &v, tc.emptyOK)
			if (err != nil) != tc.wantErr {
				t.Fatalf("decode(%q) = %v, want error %v", tc.body, err, tc.wantErr)
			}
			var ae *Error
			if err != nil && (!errors.As(err, &ae) || ae.Code != client.CodeInvalid || ae.status() != 400) {
				t.Fatalf("decode(%q) error %v is not 400 invalid", tc.body, err)
			}
		})
	}
}

// spec: API-55
func TestWriteError(t *testing.T) {
	a := New(Config{})
	for _, tc := range []struct {
		name   string
		err    error
		status int
		body   client.Error
	}{
		{"typed", Errorf(client.CodeConflict, "job not finished"), 409, client.Error{Error: "job not finished", Code: client.CodeConflict}},
		{"wrapped typed", errors.Join(errors.New("ctx"), &Error{Code: client.CodeUnavailable, Msg: "busy", RetryAfter: 3, Err: errors.New("secret detail")}),
			503, client.Error{Error: "busy", Code: client.CodeUnavailable, RetryAfterSecs: 3}},
		{"status override", &Error{Status: 410, Code: client.CodeNotFound, Msg: "gone"}, 410, client.Error{Error: "gone", Code: client.CodeNotFound}},
		{"approval", &Error{Code: client.CodeApprovalPending, Msg: "wait", ApprovalURL: "https://ui/gitlab/x/projects/1"}, 403,
			client.Error{Error: "wait", Code: client.CodeApprovalPending, ApprovalURL: "https://ui/gitlab/x/projects/1"}},
		{"plain error is internal", errors.New("disk on fire"), 500, client.Error{Error: "internal error", Code: client.CodeInternal}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			a.writeError(w, httptest.NewRequest("GET", "/v1/x", nil), "GET /v1/x", tc.err)
			if w.Code != tc.status {
				t.Fatalf("status = %d, want %d", w.Code, tc.status)
			}
			var got client.Error
			if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			if got != tc.body {
				t.Fatalf("body = %+v, want %+v", got, tc.body)
			}
			if strings.Contains(w.Body.String(), "secret detail") || strings.Contains(w.Body.String(), "disk on fire") {
				t.Fatalf("Err leaked to the client: %s", w.Body)
			}
		})
	}
}

// spec: API-10
func TestWaitParam(t *testing.T) {
	for q, want := range map[string]int{"": 0, "wait=0": 0, "wait=5": 5, "wait=60": 60, "wait=600": 60} {
		r := httptest.NewRequest("GET", "/v1/jobs/x?"+q, nil)
		got, err := waitParam(r)
		if err != nil || int(got.Seconds()) != want {
			t.Errorf("waitParam(%q) = %v, %v; want %d s", q, got, err, want)
		}
	}
	for _, q := range []string{"wait=-1", "wait=x", "wait=1.5"} {
		if _, err := waitParam(httptest.NewRequest("GET", "/v1/jobs/x?"+q, nil)); err == nil {
			t.Errorf("waitParam(%q) accepted", q)
		}
	}
	if _, err := uintParam(httptest.NewRequest(http.MethodGet, "/x?offset=-3", nil), "offset"); err == nil {
		t.Error("negative offset accepted")
	}
}

// fuzzDecode checks that decode never panics, and that whatever it
// accepts re-encodes to something it accepts as the same value.
func fuzzDecode[T any](f *testing.F, seeds ...string) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var v T
		if err := decode(b, &v, false); err != nil {
			var ae *Error
			if !errors.As(err, &ae) || ae.Code != client.CodeInvalid {
				t.Fatalf("decode error %v is not invalid", err)
			}
			return
		}
		enc, err := json.Marshal(v)
		if err != nil {
			return // e.g. a Size that does not re-encode; decode accepted it, the handler validates
		}
		var w T
		if err := decode(enc, &w, false); err != nil {
			t.Fatalf("re-decoding %s: %v", enc, err)
		}
		if !reflect.DeepEqual(normalize(v), normalize(w)) {
			t.Fatalf("round trip changed the value:\n%+v\n%+v", v, w)
		}
	})
}

// normalize re-encodes v so nil and empty slices compare equal.
func normalize(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

const seedPlacement = `{"pool":"linux","labels":["ssd"],"envelope":{"mem":"2G","cpus":2,"disk":"10G"}}`

func FuzzDecodeCapacityRequest(f *testing.F) {
	fuzzDecode[client.CapacityRequest](f, `{"placement":`+seedPlacement+`,"after":3,"wait_secs":30}`, `{}`, `{"after":-1}`)
}

func FuzzDecodeReservationRequest(f *testing.F) {
	fuzzDecode[client.ReservationRequest](f,
		`{"runner":"r1","queue":true,"request_id":"00112233445566778899aabbccddeeff","placement":`+seedPlacement+`}`,
		`{"runner":"r1","request_id":"x","placement":{"pool":"p","envelope":{"mem":1024,"cpus":1,"disk":"1T"}},"wait_secs":5,"lease_secs":90}`)
}

func FuzzDecodeOutcomeRequest(f *testing.F) {
	fuzzDecode[client.OutcomeRequest](f, `{"admission":"a1","outcome":"job"}`, `{"admission":"a1","outcome":"whatever"}`,
		`{"admission":"a1","outcome":"empty","next":{"runner":"r1","queue":true,"request_id":"00112233445566778899aabbccddeeff","placement":`+seedPlacement+`}}`,
		`{"admission":"a1","outcome":"empty","next":null}`)
}

func FuzzDecodeRenewRequest(f *testing.F) {
	fuzzDecode[client.RenewRequest](f, `{"lease_secs":90}`, `{}`)
}

func FuzzDecodeCancelRequest(f *testing.F) {
	fuzzDecode[client.CancelRequest](f, `{"mode":"graceful"}`, `{"mode":"immediate"}`, `{"mode":""}`)
}

func FuzzDecodeClientHello(f *testing.F) {
	fuzzDecode[client.ClientHello](f, `{"name":"dash","version":"1.0"}`)
}

func FuzzDecodeJobSubmission(f *testing.F) {
	spec, _ := json.Marshal(job.NewGitLabCI(&job.CiJob{Job: job.JobInfo{ID: 1, ProjectID: 2}, Token: "t",
		Sources: job.Sources{RepoURL: "https://g/x.git", Ref: "main"}, TimeoutSecs: 60,
		Variables: []job.Variable{{Key: "K", Value: "v", Masked: true}}, Steps: []job.Step{{Name: "script", Script: []string{"true"}}},
		Trace: job.TraceSettings{LimitBytes: 1 << 20}, ServerURL: "https://g"}))
	fuzzDecode[client.JobSubmission](f,
		`{"runner":"r1","admission":"a1","request_id":"00112233445566778899aabbccddeeff","placement":`+seedPlacement+`,"reservation":"r2","place_within_secs":300,"spec":`+string(spec)+`}`,
		`{"spec":{"kind":"other"}}`)
}

// An answer the client did not wait for (its request's context ended) is
// logged at info; a real internal error at warn.
func TestWriteErrorLevels(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want slog.Level
	}{
		{"client gone", context.Canceled, slog.LevelInfo},
		{"internal", errors.New("disk on fire"), slog.LevelWarn},
		{"refused", Errorf(client.CodeConflict, "job not finished"), slog.LevelInfo},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			a := New(Config{Log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			a.writeError(httptest.NewRecorder(), httptest.NewRequest("GET", "/v1/x", nil), "GET /v1/x", tc.err)
			if want := "level=" + tc.want.String(); !strings.Contains(logs.String(), want) {
				t.Fatalf("log %q, want %s", logs.String(), want)
			}
		})
	}
}
