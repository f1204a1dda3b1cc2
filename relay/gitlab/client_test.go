package gitlab

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/testlog"
)

// Tokens of gitlab-runner's network/gitlab_test.go.
const (
	invalidToken   = "invalid"
	testSystemID   = "test-system-id"
	validGlrtToken = "glrt-valid-token"
	validToken     = "valid"
)

var testNow = time.Date(2026, 8, 22, 10, 0, 0, 0, time.UTC)

// newTestClient starts an httptest server with h and returns a client for it.
func newTestClient(t *testing.T, h http.HandlerFunc) (*Client, *httptest.Server) {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	c, err := New(Config{URL: s.URL, Logger: testlog.New(t), Clock: clock.NewFake(testNow)})
	if err != nil {
		t.Fatal(err)
	}
	return c, s
}

func decodeBody(t *testing.T, r *http.Request) map[string]any {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Errorf("read body: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Errorf("body is not JSON: %v: %s", err, b)
	}
	return m
}

// mockRequestJobHandler mirrors gitlab-runner's: checks the runner token in
// header and body, the system ID and Accept, and answers by token.
func mockRequestJobHandler(t *testing.T, w http.ResponseWriter, r *http.Request, jobResponse []byte) {
	w.Header().Add(HeaderRequestID, "foobar")
	if r.URL.Path != "/api/v4/jobs/request" {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	if r.Method != http.MethodPost {
		w.WriteHeader(http.StatusNotAcceptable)
		return
	}
	if r.Header.Get(HeaderRequestID) == "" {
		t.Error("request without X-Request-Id")
	}
	req := decodeBody(t, r)
	if req["system_id"] != testSystemID {
		t.Errorf("system_id = %v", req["system_id"])
	}
	token, _ := req["token"].(string)
	if h := r.Header.Get("RUNNER-TOKEN"); h == "" || h != token {
		t.Errorf("RUNNER-TOKEN header %q, body token %q: must match", h, token)
	}
	switch token {
	case validToken:
	case "no-jobs":
		w.Header().Add("X-GitLab-Last-Update", "a nice timestamp")
		w.WriteHeader(http.StatusNoContent)
		return
	case invalidToken:
		w.WriteHeader(http.StatusForbidden)
		return
	default:
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if r.Header.Get("Accept") != "application/json" {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(jobResponse)
}

// Port of gitlab-runner's TestGitLabClient_RequestJob.
// spec: GL-03, GL-04, GL-19
func TestGitLabClient_RequestJob(t *testing.T) {
	full := readFixture(t, "job_response_full.json")
	unsupported := readFixture(t, "job_response_unsupported_executor_opts.json")
	h := func(w http.ResponseWriter, r *http.Request) {
		response := full
		if strings.HasPrefix(r.URL.Path, "/unsupported") {
			r.URL.Path = strings.TrimPrefix(r.URL.Path, "/unsupported")
			response = unsupported
		}
		if strings.HasPrefix(r.URL.Path, "/unavailable") {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if strings.HasPrefix(r.URL.Path, "/too-many") {
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		if strings.HasPrefix(r.URL.Path, "/conflict") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`{"message":"409 Conflict"}`))
			return
		}
		if strings.HasPrefix(r.URL.Path, "/text") {
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write(full)
			return
		}
		if strings.HasPrefix(r.URL.Path, "/garbled") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"id": 77, "token": "tok", "variables": {"not": "a list"}}`))
			return
		}
		mockRequestJobHandler(t, w, r, response)
	}
	s := httptest.NewServer(http.HandlerFunc(h))
	defer s.Close()

	tests := []struct {
		name        string
		token       string
		path        string
		wantKind    RequestKind
		wantErr     error
		wantRetry   time.Duration
		unsupported bool
	}{
		{name: "valid token", token: validToken, wantKind: RequestJobReceived},
		{name: "no jobs token", token: "no-jobs", wantKind: RequestNoJob},
		{name: "invalid token", token: invalidToken, wantKind: RequestTokenRefused},
		{name: "unsupported executor options", token: validToken, path: "/unsupported", wantKind: RequestJobReceived, unsupported: true},
		{name: "service unavailable", token: validToken, path: "/unavailable", wantKind: RequestThrottled, wantRetry: time.Second},
		{name: "too many requests", token: validToken, path: "/too-many", wantKind: RequestThrottled, wantRetry: 7 * time.Second},
		{name: "conflict", token: validToken, path: "/conflict", wantKind: RequestFailed, wantErr: ErrUnexpectedStatus},
		{name: "bad request", token: "other", wantKind: RequestFailed, wantErr: ErrUnexpectedStatus},
		{name: "job not served as JSON", token: validToken, path: "/text", wantKind: RequestUndecodable, wantErr: ErrDecode},
		{name: "job not decodable", token: validToken, path: "/garbled", wantKind: RequestUndecodable, wantErr: ErrDecode},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(Config{URL: s.URL + tc.path, Logger: testlog.New(t)})
			if err != nil {
				t.Fatal(err)
			}
			out, err := c.RequestJob(t.Context(), tc.token, testSystemID)
			if out.Kind != tc.wantKind {
				t.Fatalf("RequestJob kind = %v (err %v), want %v", out.Kind, err, tc.wantKind)
			}
			if tc.wantErr == nil && err != nil || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("RequestJob err = %v, want %v", err, tc.wantErr)
			}
			if out.RetryAfter != tc.wantRetry {
				t.Errorf("RetryAfter = %v, want %v", out.RetryAfter, tc.wantRetry)
			}
			switch tc.wantKind {
			case RequestJobReceived:
				assertOnJobResponse(t, out.Job, tc.unsupported)
				if out.CorrelationID != "foobar" {
					t.Errorf("CorrelationID = %q, want the server's foobar", out.CorrelationID)
				}
			case RequestNoJob:
				if got := c.LastUpdate(tc.token); got != "a nice timestamp" {
					t.Errorf("LastUpdate = %q, want it set from X-GitLab-Last-Update", got)
				}
			case RequestUndecodable:
				if tc.path == "/garbled" && out.Identity != (JobIdentity{ID: 77, Token: "tok"}) {
					t.Errorf("Identity = %+v, want id 77 and its token", out.Identity)
				}
				if tc.path == "/text" && out.Identity.ID != 10 {
					t.Errorf("Identity = %+v, want id 10", out.Identity)
				}
			}
			if tc.wantKind != RequestJobReceived && out.Job != nil {
				t.Errorf("Job = %+v, want nil", out.Job)
			}
		})
	}
}

// assertOnJobResponse checks what gitlab-runner's assertOnJobResponse does.
func assertOnJobResponse(t *testing.T, res *JobResponse, unsupported bool) {
	t.Helper()
	if res == nil || res.ID == 0 {
		t.Fatalf("job = %+v", res)
	}
	if res.Image.Name != "ruby:3.3" || strings.Join(res.Image.Entrypoint, " ") != "/bin/sh" {
		t.Errorf("image = %+v", res.Image)
	}
	if len(res.Services) != 2 {
		t.Fatalf("services = %+v", res.Services)
	}
	s0, s1 := res.Services[0], res.Services[1]
	if s0.Name != "postgresql:9.5" || strings.Join(s0.Command, " ") != "sleep 30" || s0.Alias != "db-pg" ||
		strings.Join(s0.Entrypoint, " ") != "/bin/sh" {
		t.Errorf("services[0] = %+v", s0)
	}
	if s1.Name != "mysql:5.6" || s1.Alias != "db-mysql" || s1.ExecutorOptions.Docker.Platform != "arm" {
		t.Errorf("services[1] = %+v", s1)
	}
	if len(res.Variables) != 1 || res.Variables[0] != (Variable{Key: "CI_REF_NAME", Value: "main", Public: true, File: true, Raw: true}) {
		t.Errorf("variables = %+v", res.Variables)
	}
	err := res.UnsupportedOptions()
	if unsupported {
		if err == nil || !strings.Contains(err.Error(), "blammo") || !strings.Contains(err.Error(), "powpow") {
			t.Errorf("UnsupportedOptions() = %v, want blammo and powpow", err)
		}
		return
	}
	if err != nil {
		t.Errorf("UnsupportedOptions() = %v", err)
	}
	if res.Image.ExecutorOptions.Docker.Platform != "arm64/v8" || s0.ExecutorOptions.Docker.Platform != "amd64/linux" {
		t.Errorf("platforms = %q, %q", res.Image.ExecutorOptions.Docker.Platform, s0.ExecutorOptions.Docker.Platform)
	}
}

// Port of gitlab-runner's TestSetLastUpdate: the stored value is echoed as
// last_update on the next request; none before.
// spec: GL-03, GL-19
func TestSetLastUpdate(t *testing.T) {
	c, err := New(Config{URL: "https://gitlab.example.com/"})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.LastUpdate("test-token"); got != "" {
		t.Fatalf("LastUpdate before any = %q", got)
	}
	if got := c.PrepareJobRequest("test-token", "").LastUpdate; got != "" {
		t.Fatalf("first request's last_update = %q, want none", got)
	}
	c.SetLastUpdate("test-token", "queue-v1")
	if got := c.LastUpdate("test-token"); got != "queue-v1" {
		t.Errorf("LastUpdate = %q", got)
	}
	if got := c.PrepareJobRequest("test-token", "").LastUpdate; got != "queue-v1" {
		t.Errorf("PrepareJobRequest().LastUpdate = %q", got)
	}
	if got := c.LastUpdate("other-token"); got != "" {
		t.Errorf("another runner's LastUpdate = %q, want its own (none)", got)
	}
	c.SetLastUpdate("test-token", "")
	if got := c.LastUpdate("test-token"); got != "queue-v1" {
		t.Errorf("an empty value replaced last_update: %q", got)
	}
}

// Long polling over the wire: the first request carries no last_update;
// each later one carries the previous answer's X-GitLab-Last-Update, per
// runner; an answer without the header (Workhorse's own 204) keeps it.
// spec: GL-03, GL-19
func TestRequestJobCarriesLastUpdatePerRunner(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	n := 0
	c, _ := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		req := decodeBody(t, r)
		mu.Lock()
		defer mu.Unlock()
		lu, has := req["last_update"]
		if !has {
			lu = "<none>"
		}
		seen = append(seen, req["token"].(string)+":"+lu.(string))
		n++
		if n != 3 { // the third answer is Workhorse's bare 204
			w.Header().Set("X-GitLab-Last-Update", "v"+string(rune('0'+n)))
		}
		w.WriteHeader(http.StatusNoContent)
	})
	for _, tok := range []string{"a", "a", "a", "a", "b"} {
		out, err := c.RequestJob(t.Context(), tok, "")
		if err != nil || out.Kind != RequestNoJob {
			t.Fatalf("RequestJob = %v, %v", out.Kind, err)
		}
	}
	want := "a:<none> a:v1 a:v2 a:v2 b:<none>"
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(seen, " "); got != want {
		t.Errorf("last_update sent = %s, want %s", got, want)
	}
}

// Port of gitlab-runner's TestGitLabClient_RequestJob_TransmitsTwoPhaseJobCommit
// (and the verify/update variants): info.features.two_phase_job_commit
// travels on every call that carries info.
// spec: GL-05, GL-19
func TestGitLabClient_RequestJob_TransmitsTwoPhaseJobCommit(t *testing.T) {
	var paths []string
	var mu sync.Mutex
	c, _ := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Info Info `json:"info"`
		}
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &body); err != nil {
			t.Errorf("%s: %v", r.URL.Path, err)
		}
		if !body.Info.Features.TwoPhaseJobCommit || !body.Info.Features.CancelGracefully {
			t.Errorf("%s: two_phase_job_commit/cancel_gracefully not transmitted: %+v", r.URL.Path, body.Info.Features)
		}
		if body.Info.Executor != "vk" || body.Info.Shell != "bash" {
			t.Errorf("%s: info executor %q shell %q", r.URL.Path, body.Info.Executor, body.Info.Shell)
		}
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		switch r.URL.Path {
		case "/api/v4/jobs/request":
			w.WriteHeader(http.StatusNoContent)
		case "/api/v4/runners/verify":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"id":12345,"token":"valid"}`))
		default:
			w.WriteHeader(http.StatusOK)
		}
	})
	if out, err := c.RequestJob(t.Context(), validToken, ""); err != nil || out.Kind != RequestNoJob {
		t.Errorf("RequestJob = %v, %v", out.Kind, err)
	}
	if out, err := c.VerifyRunner(t.Context(), validToken, "s_some_system_id"); err != nil || out.Response.ID != 12345 {
		t.Errorf("VerifyRunner = %+v, %v", out, err)
	}
	if out, err := c.UpdateJob(t.Context(), JobCredentials{ID: 123, Token: validToken}, UpdateJobInfo{State: StateSuccess}); err != nil || out.Kind != UpdateSucceeded {
		t.Errorf("UpdateJob = %v, %v", out.Kind, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(paths) != 3 {
		t.Errorf("calls = %v", paths)
	}
}

// mockVerifyRunnerHandler mirrors gitlab-runner's.
func mockVerifyRunnerHandler(t *testing.T, w http.ResponseWriter, r *http.Request, legacy bool) {
	if r.URL.Path != "/api/v4/runners/verify" || r.Method != http.MethodPost {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	req := decodeBody(t, r)
	token, _ := req["token"].(string)
	if h := r.Header.Get("runner-token"); h == "" || h != token {
		t.Errorf("RUNNER-TOKEN header %q, body token %q: must match", h, token)
	}
	switch token {
	case validToken, validGlrtToken:
		if legacy {
			w.Header().Set("Content-Type", "plain/text")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte("200"))
			return
		}
	case invalidToken:
		w.WriteHeader(http.StatusForbidden)
		return
	default:
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(map[string]any{"id": 54321, "token": token, "token_expires_at": "2684-10-16T13:25:59Z"})
}

// Port of gitlab-runner's TestVerifyRunner and TestVerifyRunnerOnLegacyServer.
// spec: GL-02, GL-19
func TestVerifyRunner(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		c, _ := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
			mockVerifyRunnerHandler(t, w, r, legacy)
		})
		expires := time.Date(2684, 10, 16, 13, 25, 59, 0, time.UTC)
		tests := []struct {
			name    string
			token   string
			kind    VerifyKind
			id      int64
			wantErr bool
		}{
			{name: "valid token", token: validToken, kind: VerifyValid, id: 54321},
			{name: "valid glrt token", token: validGlrtToken, kind: VerifyValid, id: 54321},
			{name: "invalid token", token: invalidToken, kind: VerifyRefused},
			{name: "other token", token: "other", kind: VerifyFailed, wantErr: true},
		}
		for _, tc := range tests {
			name := tc.name
			if legacy {
				name = "legacy/" + name
			}
			t.Run(name, func(t *testing.T) {
				out, err := c.VerifyRunner(t.Context(), tc.token, "s_0123456789ab")
				if out.Kind != tc.kind || (err != nil) != tc.wantErr {
					t.Fatalf("VerifyRunner = %v, %v; want %v, error %v", out.Kind, err, tc.kind, tc.wantErr)
				}
				if tc.kind != VerifyValid {
					return
				}
				if legacy {
					if !out.Legacy || out.Response.ID != 0 {
						t.Errorf("legacy answer = %+v", out)
					}
					return
				}
				if out.Response.ID != tc.id || out.Response.TokenExpiresAt == nil || !out.Response.TokenExpiresAt.Equal(expires) {
					t.Errorf("Response = %+v, want id %d expiring %v", out.Response, tc.id, expires)
				}
			})
		}
	}
	if _, err := New(Config{URL: "broken"}); !errors.Is(err, ErrBadURL) {
		t.Errorf("New(broken) err = %v, want ErrBadURL", err)
	}
}

// The verify response fixture decodes.
// spec: GL-02, SPEC-25
func TestVerifyResponseFixture(t *testing.T) {
	var r VerifyRunnerResponse
	if err := json.Unmarshal(readFixture(t, "verify_response.json"), &r); err != nil {
		t.Fatal(err)
	}
	if r.ID != 54321 || r.TokenExpiresAt == nil || r.TokenExpiresAt.Year() != 2684 {
		t.Errorf("verify response = %+v", r)
	}
	var none VerifyRunnerResponse
	if err := json.Unmarshal([]byte(`{"id":1,"token":"t","token_expires_at":null}`), &none); err != nil || none.TokenExpiresAt != nil {
		t.Errorf("null expiry = %+v, %v", none, err)
	}
}

// Port of gitlab-runner's TestTokenIsCreatedRunnerToken (and its
// helpers/shorten_token tests).
// spec: GL-19
func TestTokenIsCreatedRunnerToken(t *testing.T) {
	tests := []struct {
		token   string
		created bool
		short   string
	}{
		{"glrt-t1_EXAMPLErunnerTOKENnotREAL", true, "EXAMPLEru"},
		{"glrt-abcdefghijkl", true, "abcdefghi"},
		{"glrt-", true, ""},
		{"t2_abcdefghijkl", false, "abcdefghi"},
		{"glrtr-abcdefghijkl", false, "abcdefghi"},
		{"glcbt-64_abcdefghijkl", false, "64_abcdef"},
		{"GR1348941abcdefghijkl", false, "abcdefghi"},
		{"abc", false, "abc"},
		{"", false, ""},
		{"GLRT-abc", false, "GLRT-abc"},
	}
	for _, tt := range tests {
		if got := IsCreatedRunnerToken(tt.token); got != tt.created {
			t.Errorf("IsCreatedRunnerToken(%q) = %v, want %v", tt.token, got, tt.created)
		}
		if got := ShortToken(tt.token); got != tt.short {
			t.Errorf("ShortToken(%q) = %q, want %q", tt.token, got, tt.short)
		}
	}
}

// spec: GL-18
func TestCheckTokenExpiry(t *testing.T) {
	at := func(d time.Duration) *time.Time { x := testNow.Add(d); return &x }
	tests := []struct {
		name    string
		expires *time.Time
		want    TokenExpiry
	}{
		{"no expiry", nil, TokenNoExpiry},
		{"zero expiry", &time.Time{}, TokenNoExpiry},
		{"far", at(30 * 24 * time.Hour), TokenValid},
		{"just over a week", at(7*24*time.Hour + time.Second), TokenValid},
		{"exactly a week", at(7 * 24 * time.Hour), TokenExpiring},
		{"tomorrow", at(24 * time.Hour), TokenExpiring},
		{"now", at(0), TokenExpired},
		{"past", at(-time.Hour), TokenExpired},
	}
	for _, tt := range tests {
		got, left := CheckTokenExpiry(tt.expires, testNow)
		if got != tt.want {
			t.Errorf("%s: CheckTokenExpiry = %v, want %v", tt.name, got, tt.want)
		}
		if tt.expires != nil && !tt.expires.IsZero() && left != tt.expires.Sub(testNow) {
			t.Errorf("%s: left = %v", tt.name, left)
		}
	}
}

// Which token each endpoint receives: the runner token only on
// /runners/verify and /jobs/request, the job token only on per-job
// endpoints, never the other (header or body).
// spec: AUTH-01, AUTH-03
func TestTokensPerEndpoint(t *testing.T) {
	const runnerTok, jobTok = "glrt-RUNNERsecret", "glcbt-JOBsecret"
	type seen struct{ runnerHdr, jobHdr, body string }
	var mu sync.Mutex
	got := map[string]seen{}
	c, _ := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		key := r.Method + " " + r.URL.Path
		mu.Lock()
		got[key] = seen{r.Header.Get("RUNNER-TOKEN"), r.Header.Get("JOB-TOKEN"), string(b)}
		mu.Unlock()
		switch {
		case strings.HasSuffix(r.URL.Path, "/trace"):
			w.WriteHeader(http.StatusAccepted)
		case strings.HasSuffix(r.URL.Path, "/jobs/request"):
			w.WriteHeader(http.StatusNoContent)
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"id":1}`))
		}
	})
	ctx := t.Context()
	job := JobCredentials{ID: 42, Token: jobTok}
	if _, err := c.VerifyRunner(ctx, runnerTok, "s_x"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RequestJob(ctx, runnerTok, "s_x"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UpdateJob(ctx, job, UpdateJobInfo{State: StateRunning}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.KeepAlive(ctx, job, TraceOutput{Checksum: "crc32:00000000"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PatchTrace(ctx, job, 0, []byte("hello"), false); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	runnerLevel := []string{"POST /api/v4/runners/verify", "POST /api/v4/jobs/request"}
	jobLevel := []string{"PUT /api/v4/jobs/42", "PATCH /api/v4/jobs/42/trace"}
	for _, k := range runnerLevel {
		s, ok := got[k]
		if !ok {
			t.Fatalf("%s not called", k)
		}
		if s.runnerHdr != runnerTok || s.jobHdr != "" || !strings.Contains(s.body, runnerTok) || strings.Contains(s.body, jobTok) {
			t.Errorf("%s got runner header %q, job header %q, body %s", k, s.runnerHdr, s.jobHdr, s.body)
		}
	}
	for _, k := range jobLevel {
		s, ok := got[k]
		if !ok {
			t.Fatalf("%s not called", k)
		}
		if s.jobHdr != jobTok || s.runnerHdr != "" || strings.Contains(s.body, runnerTok) || strings.Contains(s.body, "glrt-") {
			t.Errorf("%s got runner header %q, job header %q, body %s", k, s.runnerHdr, s.jobHdr, s.body)
		}
	}
	if s := got["PUT /api/v4/jobs/42"]; !strings.Contains(s.body, `"token":"`+jobTok+`"`) {
		t.Errorf("PUT body lacks the job token: %s", s.body)
	}
}

// The API base is built as gitlab-runner's fixCIURL builds it.
func TestAPIBase(t *testing.T) {
	tests := map[string]string{
		"https://gitlab.example.com":         "https://gitlab.example.com/api/v4/",
		"https://gitlab.example.com/":        "https://gitlab.example.com/api/v4/",
		"https://gitlab.example.com/ci":      "https://gitlab.example.com/api/v4/",
		"https://gitlab.example.com/ci/":     "https://gitlab.example.com/api/v4/",
		"http://host:8080/gitlab":            "http://host:8080/gitlab/api/v4/",
		"https://gitlab.example.com/?x=1#ab": "https://gitlab.example.com/api/v4/",
	}
	for in, want := range tests {
		c, err := New(Config{URL: in})
		if err != nil {
			t.Errorf("New(%q): %v", in, err)
			continue
		}
		if got := c.BaseURL(); got != want {
			t.Errorf("BaseURL(%q) = %q, want %q", in, got, want)
		}
	}
	for _, bad := range []string{"", "broken", "ftp://x", "https://", "://x"} {
		if _, err := New(Config{URL: bad}); !errors.Is(err, ErrBadURL) {
			t.Errorf("New(%q) err = %v, want ErrBadURL", bad, err)
		}
	}
}

// spec: SPEC-07
func TestStripCredentials(t *testing.T) {
	got, err := StripCredentials("https://gitlab-ci-token:glcbt-64_SECRET@gitlab.example.com/acme/demo.git")
	if err != nil || got != "https://gitlab.example.com/acme/demo.git" {
		t.Errorf("StripCredentials = %q, %v", got, err)
	}
	if _, err := StripCredentials("https://user:glcbt-SECRET@host/%zz"); err == nil || strings.Contains(err.Error(), "SECRET") {
		t.Errorf("StripCredentials(bad) err = %v: must fail without quoting the token", err)
	}
	if got := CleanURL("https://user:password@gitlab.com/gitlab?key=value#fragment"); got != "https://gitlab.com/gitlab" {
		t.Errorf("CleanURL = %q", got)
	}
}

// Error bodies' messages reach the *StatusError.
func TestStatusErrorMessage(t *testing.T) {
	c, _ := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"message":{"state":["is invalid"]}}`))
	})
	_, err := c.UpdateJob(t.Context(), JobCredentials{ID: 1, Token: "t"}, UpdateJobInfo{State: "bogus"})
	var se *StatusError
	if !errors.As(err, &se) || se.Status != 400 || se.Message != "state is invalid" || !errors.Is(err, ErrUnexpectedStatus) {
		t.Errorf("err = %#v", err)
	}
}

// The job request status → outcome table, case by case (STYLE C11).
// spec: GL-04
func TestRequestJobOutcomeTable(t *testing.T) {
	jsonHdr := http.Header{"Content-Type": {"application/json"}}
	body := readFixture(t, "job_response_successful.json")
	tests := []struct {
		status int
		header http.Header
		body   []byte
		kind   RequestKind
		err    error
		retry  time.Duration
	}{
		{201, jsonHdr, body, RequestJobReceived, nil, 0},
		{201, http.Header{"Content-Type": {"application/json; charset=utf-8"}}, body, RequestJobReceived, nil, 0},
		{201, http.Header{}, body, RequestUndecodable, ErrDecode, 0},
		{201, jsonHdr, []byte(`{`), RequestUndecodable, ErrDecode, 0},
		{204, http.Header{}, nil, RequestNoJob, nil, 0},
		{403, http.Header{}, nil, RequestTokenRefused, nil, 0},
		{429, http.Header{"Retry-After": {"60"}}, nil, RequestThrottled, nil, time.Minute},
		{429, http.Header{"Ratelimit-Resettime": {testNow.Add(90 * time.Second).Format(http.TimeFormat)}}, nil, RequestThrottled, nil, 90 * time.Second},
		{503, http.Header{}, nil, RequestThrottled, nil, 0},
		{503, http.Header{"Retry-After": {testNow.Format(http.TimeFormat)}}, nil, RequestThrottled, nil, 0},
		{409, http.Header{}, nil, RequestFailed, ErrUnexpectedStatus, 0},
		{422, http.Header{}, nil, RequestFailed, ErrUnexpectedStatus, 0},
		{500, http.Header{}, nil, RequestFailed, ErrUnexpectedStatus, 0},
		{200, http.Header{}, nil, RequestFailed, ErrUnexpectedStatus, 0},
	}
	for _, tt := range tests {
		out, err := requestJobOutcome(call{method: "POST", path: "jobs/request"},
			answer{status: tt.status, header: tt.header, body: tt.body}, testNow)
		if out.Kind != tt.kind || !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) || out.RetryAfter != tt.retry {
			t.Errorf("%d %v: got %v, %v, retry %v; want %v, %v, retry %v", tt.status, tt.header, out.Kind, err, out.RetryAfter, tt.kind, tt.err, tt.retry)
		}
	}
}

// The verify status → outcome table, case by case.
// spec: GL-02
func TestVerifyOutcomeTable(t *testing.T) {
	jsonHdr := http.Header{"Content-Type": {"application/json"}}
	tests := []struct {
		status int
		header http.Header
		body   string
		kind   VerifyKind
		legacy bool
		err    bool
	}{
		{200, jsonHdr, `{"id":5,"token":"t","token_expires_at":null}`, VerifyValid, false, false},
		{200, http.Header{"Content-Type": {"text/plain"}}, `200`, VerifyValid, true, false},
		{200, jsonHdr, `not json`, VerifyValid, true, false},
		{403, nil, ``, VerifyRefused, false, false},
		{422, nil, ``, VerifyFailed, false, true},
		{500, nil, ``, VerifyFailed, false, true},
	}
	for _, tt := range tests {
		out, err := verifyOutcome(call{}, answer{status: tt.status, header: tt.header, body: []byte(tt.body)})
		if out.Kind != tt.kind || out.Legacy != tt.legacy || (err != nil) != tt.err {
			t.Errorf("%d %s: got %v legacy=%v err=%v", tt.status, tt.body, out.Kind, out.Legacy, err)
		}
	}
}

// recordingHandler keeps every log record's text for inspection.
type recordingHandler struct {
	mu    *sync.Mutex
	lines *[]string
	attrs []slog.Attr
}

func (h recordingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recordingHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	for _, a := range h.attrs {
		b.WriteString(" " + a.String())
	}
	r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.String()); return true })
	h.mu.Lock()
	*h.lines = append(*h.lines, b.String())
	h.mu.Unlock()
	return nil
}
func (h recordingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	h.attrs = append(slices.Clone(h.attrs), as...)
	return h
}
func (h recordingHandler) WithGroup(string) slog.Handler { return h }

// Every request's correlation IDs are logged: the one sent and the
// server's X-Request-Id; tokens never are.
// spec: AUTH-01, AUTH-03
func TestCorrelationIDsLoggedTokensNot(t *testing.T) {
	const runnerTok, jobTok = "glrt-RUNNERsecret123", "glcbt-JOBsecret456"
	var mu sync.Mutex
	var lines []string
	var sent []string
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sent = append(sent, r.Header.Get(HeaderRequestID))
		mu.Unlock()
		w.Header().Set(HeaderRequestID, "srv-"+r.Method)
		switch r.Method {
		case http.MethodPatch:
			w.WriteHeader(http.StatusAccepted)
		case http.MethodPut:
			w.WriteHeader(http.StatusOK)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	defer s.Close()
	c, err := New(Config{URL: s.URL, Logger: slog.New(recordingHandler{mu: &mu, lines: &lines})})
	if err != nil {
		t.Fatal(err)
	}
	job := JobCredentials{ID: 5, Token: jobTok}
	if _, err := c.RequestJob(t.Context(), runnerTok, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UpdateJob(t.Context(), job, UpdateJobInfo{State: StateRunning}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PatchTrace(t.Context(), job, 0, []byte("x"), false); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	all := strings.Join(lines, "\n")
	for _, m := range []string{"POST", "PUT", "PATCH"} {
		if !strings.Contains(all, "correlation_id=srv-"+m) {
			t.Errorf("no log line with the server's correlation ID for %s:\n%s", m, all)
		}
	}
	for _, id := range sent {
		if len(id) != 32 || !strings.Contains(all, "request_correlation_id="+id) {
			t.Errorf("sent X-Request-Id %q not logged (or not 32 hex digits)", id)
		}
	}
	if strings.Contains(all, "RUNNERsecret") || strings.Contains(all, "JOBsecret") {
		t.Errorf("a token was logged:\n%s", all)
	}
}

// A 204 is Workhorse's own (the queue changed or the long poll ran out,
// Rails not asked) only when GitLab long-polls, the request carried a
// last_update, and the answer has no X-GitLab-Last-Update; Rails' 204s
// carry one, and without long polling no request is held.
// spec: GL-04
func TestRequestJobTellsWorkhorseAnswer(t *testing.T) {
	var mu sync.Mutex
	n := 0
	polling := true
	c, _ := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		n++
		if polling {
			w.Header().Set("Gitlab-Ci-Builds-Polling", "yes")
		}
		if n != 2 && n != 4 { // the second and fourth answers are bare
			w.Header().Set("X-GitLab-Last-Update", "v1")
		}
		w.WriteHeader(http.StatusNoContent)
	})
	for i, want := range []struct{ workhorse, polling bool }{
		{false, true}, // first request: no last_update sent, Rails answered
		{true, true},  // held, answered bare
		{false, true}, // Rails' 204 with the version
		{false, false},
	} {
		if i == 3 {
			mu.Lock()
			polling = false // a bare 204 from a GitLab that does not long-poll
			mu.Unlock()
		}
		out, err := c.RequestJob(t.Context(), "tok", "")
		if err != nil || out.Kind != RequestNoJob {
			t.Fatalf("request %d: %v, %v", i+1, out.Kind, err)
		}
		if out.WorkhorseAnswered != want.workhorse || out.LongPolling != want.polling {
			t.Errorf("request %d: WorkhorseAnswered %v LongPolling %v, want %v %v", i+1, out.WorkhorseAnswered, out.LongPolling, want.workhorse, want.polling)
		}
	}
}
