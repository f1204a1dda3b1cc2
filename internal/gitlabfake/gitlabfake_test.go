package gitlabfake

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// spec: GL-02, GL-18
func TestVerify(t *testing.T) {
	exp := time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC)
	s := start(t, Options{RunnerToken: "glrt-t1_good", RunnerTokenExpiresAt: exp})
	tests := []struct {
		name       string
		body       string
		wantStatus int
		wantBody   string
	}{
		{"valid", `{"token":"glrt-t1_good","system_id":"s_0123456789ab","info":{"features":{}}}`, 200,
			`{"id":1,"token":"glrt-t1_good","token_expires_at":"2027-01-02T03:04:05Z"}`},
		{"unknown token", `{"token":"glrt-t1_bad"}`, 403, `{"message":"403 Forbidden"}`},
		{"bad json", `{"token":`, 400, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := call(t, s, "POST", "/runners/verify", map[string]string{"Content-Type": "application/json"}, []byte(tt.body))
			if r.status != tt.wantStatus {
				t.Fatalf("verify = %v, want %d", r, tt.wantStatus)
			}
			if tt.wantBody != "" && string(r.body) != tt.wantBody {
				t.Errorf("body = %s, want %s", r.body, tt.wantBody)
			}
		})
	}
	// A token without expiry answers token_expires_at null.
	id := s.AddRunner("glrt-t1_other")
	r := call(t, s, "POST", "/runners/verify", nil, []byte(`{"token":"glrt-t1_other"}`))
	if want := fmt.Sprintf(`{"id":%d,"token":"glrt-t1_other","token_expires_at":null}`, id); string(r.body) != want {
		t.Errorf("verify other = %s, want %s", r.body, want)
	}
}

// spec: GL-03, GL-04
func TestJobRequestStatuses(t *testing.T) {
	s := start(t, Options{})
	tok := s.RunnerToken()

	r := requestJob(t, s, "glrt-t1_unknown", "", allFeatures)
	if r.status != 403 {
		t.Errorf("unknown token: %v, want 403", r)
	}
	r = requestJob(t, s, tok, "", allFeatures)
	lu := r.header.Get("X-GitLab-Last-Update")
	if r.status != 204 || len(lu) != 32 {
		t.Fatalf("empty queue: %v X-GitLab-Last-Update=%q, want 204 with a 32-hex value", r, lu)
	}
	r = requestJob(t, s, tok, lu, allFeatures)
	if r.status != 204 || r.header.Get("X-GitLab-Last-Update") != lu {
		t.Errorf("current last_update: %v %q, want 204 echoing %q", r, r.header.Get("X-GitLab-Last-Update"), lu)
	}
	onePipeline(t, s, JobSpec{Name: "build", Script: []string{"make"}})
	r = requestJob(t, s, tok, lu, allFeatures)
	if r.status != 201 || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("job available: %v Content-Type %q, want 201 application/json", r, r.header.Get("Content-Type"))
	}
	if hasKey(r.header, "X-GitLab-Last-Update") {
		t.Errorf("201 carries X-GitLab-Last-Update; Rails sends it only with 204")
	}
	r = requestJob(t, s, tok, "", allFeatures)
	if r.status != 204 || r.header.Get("X-GitLab-Last-Update") == lu {
		t.Errorf("after handing out: %v, want 204 with a new queue version", r)
	}
	s.PauseRunner(tok, true)
	onePipelineMore(t, s)
	if r = requestJob(t, s, tok, "", allFeatures); r.status != 204 {
		t.Errorf("paused runner with a pending job: %v, want 204", r)
	}
	s.PauseRunner(tok, false)

	for _, f := range []Fault{
		{Route: RouteJobRequest, Status: 429, RetryAfter: "60"},
		{Route: RouteJobRequest, Status: 503, RetryAfter: "1"},
		{Route: RouteJobRequest, Status: 409},
	} {
		s.InjectFault(f)
		r = requestJob(t, s, tok, "", allFeatures)
		if r.status != f.Status || r.header.Get("Retry-After") != f.RetryAfter {
			t.Errorf("fault %d: got %v Retry-After %q", f.Status, r, r.header.Get("Retry-After"))
		}
	}
	if r = requestJob(t, s, tok, "", allFeatures); r.status != 201 {
		t.Errorf("after faults: %v, want the pending job", r)
	}
	RemoveAndCheck(t, s, tok)
}

func onePipelineMore(t *testing.T, s *Server) {
	t.Helper()
	if _, err := s.CreatePipeline("acme/demo", PipelineSpec{Jobs: []JobSpec{{Name: "again", Script: []string{"true"}}}}); err != nil {
		t.Fatal(err)
	}
}

// RemoveAndCheck removes the runner and expects 403 afterwards.
func RemoveAndCheck(t *testing.T, s *Server, tok string) {
	t.Helper()
	s.RemoveRunner(tok)
	if r := requestJob(t, s, tok, "", allFeatures); r.status != 403 {
		t.Errorf("removed runner: %v, want 403", r)
	}
}

// keyShape flattens a JSON document into "path:kind" entries; array
// elements are merged under "[]".
func keyShape(prefix string, v any, out map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		out[prefix+":object"] = true
		for k, e := range x {
			keyShape(prefix+"."+k, e, out)
		}
	case []any:
		out[prefix+":array"] = true
		for _, e := range x {
			keyShape(prefix+"[]", e, out)
		}
	case nil:
		out[prefix+":null"] = true
	case string:
		out[prefix+":string"] = true
	case float64:
		out[prefix+":number"] = true
	case bool:
		out[prefix+":bool"] = true
	}
}

func topKeys(t *testing.T, b []byte) []string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(string(b)))
	var keys []string
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		switch v := tok.(type) {
		case json.Delim:
			if v == '{' || v == '[' {
				depth++
			} else {
				depth--
			}
		case string:
			if depth == 1 && dec.More() {
				keys = append(keys, v)
				// skip the value
				var skip json.RawMessage
				dec.Decode(&skip)
			}
		}
	}
	return keys
}

// spec: GL-01
func TestJobResponseShape(t *testing.T) {
	s := start(t, Options{})
	onePipeline(t, s,
		JobSpec{Name: "compile", Stage: "build", Script: []string{"make"}},
		JobSpec{Name: "rspec 1/2", Stage: "test", Script: []string{"bundle exec rspec"}, AfterScript: []string{"echo cleanup"},
			Variables: []Variable{
				{Key: "DATABASE_URL", Value: "postgres://x"},
				{Key: "DEPLOY_KEY", Value: "k", File: true},
				{Key: "API_SECRET", Value: "s3cr3t", Masked: true},
				{Key: "LITERAL_DOLLARS", Value: "$X", Raw: true},
			},
			Image:     Image{Name: "ruby:3.3", PullPolicy: []string{"if-not-present"}},
			Services:  []Image{{Name: "postgres:16", Alias: "db,postgres", Variables: []Variable{{Key: "POSTGRES_PASSWORD", Value: "secret", Public: true}}}},
			Artifacts: []Artifact{{Name: "coverage", Paths: []string{"coverage/"}, Exclude: []string{"coverage/cache/**/*"}, ExpireIn: "1 week"}},
			Cache:     []Cache{{Key: "gems-main", Paths: []string{"vendor/bundle"}, FallbackKeys: []string{"gems-default"}}},
		})
	build := takeJob(t, s, allFeatures)
	patch(t, s, build.ID, build.Token, 0, "ok\n")
	uploadArtifact(t, s, build.ID, build.Token, "", "artifacts.zip", []byte("PK-zip"))
	if r := update(t, s, build.ID, build.Token, finalBody("success", []byte("ok\n"))); r.status != 200 {
		t.Fatalf("final update: %v", r)
	}
	r := requestJob(t, s, s.RunnerToken(), "", allFeatures)
	if r.status != 201 {
		t.Fatalf("second job: %v", r)
	}
	fixture, err := os.ReadFile("testdata/job_response_gitlab_complete.json")
	if err != nil {
		t.Fatal(err)
	}
	// Same top-level keys in the same order as Rails' entity.
	if diff := cmp.Diff(topKeys(t, fixture), topKeys(t, r.body)); diff != "" {
		t.Errorf("top-level keys (-fixture +fake):\n%s", diff)
	}
	// Every path:kind of the fixture appears in the fake's answer, except
	// what the fake documents as not modelled (hooks content, registry
	// credentials, image executor_opts, second artifact with null name).
	var want, got any
	json.Unmarshal(fixture, &want)
	json.Unmarshal(r.body, &got)
	ws, gs := map[string]bool{}, map[string]bool{}
	keyShape("", want, ws)
	keyShape("", got, gs)
	skip := []string{".hooks[]", ".credentials[]", ".image.executor_opts", ".artifacts[].name:null"}
	var missing []string
	for k := range ws {
		if !gs[k] && !slices.ContainsFunc(skip, func(p string) bool { return strings.HasPrefix(k, p) }) {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("fake job response lacks fixture paths:\n%s", strings.Join(missing, "\n"))
	}
	var j gotJob
	json.Unmarshal(r.body, &j)
	if !strings.HasPrefix(j.Token, "glcbt-64_") || !strings.HasPrefix(j.GitInfo.RepoURL, "http://gitlab-ci-token:"+j.Token+"@127.0.0.1:") {
		t.Errorf("token %q / repo_url %q not GitLab-shaped", j.Token, j.GitInfo.RepoURL)
	}
	if len(j.Dependencies) != 1 || j.Dependencies[0].ID != build.ID || j.Dependencies[0].Name != "compile" ||
		j.Dependencies[0].ArtifactsFile == nil || j.Dependencies[0].ArtifactsFile.Size != 6 {
		t.Errorf("dependencies = %+v, want compile's id %d with a 6-byte artifacts_file", j.Dependencies, build.ID)
	}
	for _, v := range j.Variables {
		if v.Key == "CI_JOB_TOKEN" && (v.Value != j.Token || v.Masked == nil || !*v.Masked) {
			t.Errorf("CI_JOB_TOKEN = %+v", v)
		}
	}
	if !contains(r.body, `"key":"gems-main-protected"`) || !contains(r.body, `"fallback_keys":["gems-default-protected"]`) {
		t.Errorf("cache keys lack Rails' -protected suffix: %s", r.body)
	}
}

// spec: GL-03
func TestLongPoll(t *testing.T) {
	t.Run("held until a job is enqueued", func(t *testing.T) {
		s := start(t, Options{LongPoll: time.Hour})
		r := requestJob(t, s, s.RunnerToken(), "", allFeatures) // first request: straight to Rails
		lu := r.header.Get("X-GitLab-Last-Update")
		if r.status != 204 || lu == "" || r.header.Get("Gitlab-Ci-Builds-Polling") != "yes" {
			t.Fatalf("first request = %v %v, want an immediate 204 with X-GitLab-Last-Update", r, r.header)
		}
		held := make(chan struct{})
		s.mu.Lock()
		s.holdHook = func() { close(held) }
		s.mu.Unlock()
		done := make(chan reply)
		go func() { done <- requestJob(t, s, s.RunnerToken(), lu, allFeatures) }()
		<-held
		select {
		case r := <-done:
			t.Fatalf("held request answered early: %v", r)
		default:
		}
		onePipeline(t, s, JobSpec{Name: "build", Script: []string{"true"}})
		r = <-done
		if r.status != 204 || hasKey(r.header, "X-GitLab-Last-Update") {
			t.Fatalf("woken request = %v %v, want 204 without X-GitLab-Last-Update (Workhorse)", r, r.header)
		}
		// The runner still holds the old value, which is now stale: Rails answers.
		s.mu.Lock()
		s.holdHook = nil
		s.mu.Unlock()
		if r = requestJob(t, s, s.RunnerToken(), lu, allFeatures); r.status != 201 {
			t.Fatalf("after wake = %v, want 201", r)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		s := start(t, Options{LongPoll: 20 * time.Millisecond})
		lu := requestJob(t, s, s.RunnerToken(), "", allFeatures).header.Get("X-GitLab-Last-Update")
		r := requestJob(t, s, s.RunnerToken(), lu, allFeatures)
		if r.status != 204 || hasKey(r.header, "X-GitLab-Last-Update") {
			t.Fatalf("timed-out poll = %v %v, want 204 without X-GitLab-Last-Update", r, r.header)
		}
	})
	t.Run("stale last_update is not held", func(t *testing.T) {
		s := start(t, Options{LongPoll: time.Hour})
		r := requestJob(t, s, s.RunnerToken(), "0123456789abcdef0123456789abcdef", allFeatures)
		if r.status != 204 || r.header.Get("X-GitLab-Last-Update") == "" {
			t.Fatalf("stale last_update = %v, want Rails' 204 with the current value", r)
		}
	})
	t.Run("oversized body", func(t *testing.T) {
		s := start(t, Options{LongPoll: time.Hour})
		big := fmt.Sprintf(`{"token":%q,"pad":%q}`, s.RunnerToken(), strings.Repeat("x", 33<<10))
		if r := call(t, s, "POST", "/jobs/request", nil, []byte(big)); r.status != 413 {
			t.Fatalf("33 KiB body = %v, want 413", r)
		}
	})
	t.Run("close releases held polls", func(t *testing.T) {
		s := New(Options{LongPoll: time.Hour})
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		lu := requestJob(t, s, s.RunnerToken(), "", allFeatures).header.Get("X-GitLab-Last-Update")
		held := make(chan struct{})
		s.mu.Lock()
		s.holdHook = func() { close(held) }
		s.mu.Unlock()
		done := make(chan reply)
		go func() { done <- requestJob(t, s, s.RunnerToken(), lu, allFeatures) }()
		<-held
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if r := <-done; r.status != 204 {
			t.Fatalf("poll at Close = %v, want 204", r)
		}
	})
}

// spec: GL-08, GL-09
func TestTwoPhaseCommit(t *testing.T) {
	t.Run("enabled", func(t *testing.T) {
		s := start(t, Options{TwoPhaseCommit: true})
		onePipeline(t, s, JobSpec{Name: "build", Script: []string{"true"}})
		j := takeJob(t, s, allFeatures)
		ji, _ := s.Job(j.ID)
		if ji.State != StatePending || !ji.WaitingAck {
			t.Fatalf("after 201: %s waitingAck=%v, want pending waiting for ack", ji.State, ji.WaitingAck)
		}
		if r := requestJob(t, s, s.RunnerToken(), "", allFeatures); r.status != 204 {
			t.Errorf("job waiting for ack handed out again: %v", r)
		}
		if r := patch(t, s, j.ID, j.Token, 0, "x"); r.status != 403 || r.header.Get("Job-Status") != "pending" {
			t.Errorf("PATCH before commit = %v Job-Status %q, want 403 pending", r, r.header.Get("Job-Status"))
		}
		if r := update(t, s, j.ID, j.Token, map[string]any{"state": "failed", "failure_reason": "runner_system_failure"}); r.status != 400 {
			t.Errorf("failed before commit = %v, want 400", r)
		}
		if r := update(t, s, j.ID, j.Token, map[string]any{"state": "pending"}); r.status != 200 {
			t.Errorf("pending keep-alive = %v, want 200", r)
		}
		r := update(t, s, j.ID, j.Token, map[string]any{"state": "running", "output": map[string]any{}})
		if r.status != 200 || r.header.Get("Job-Status") != "running" {
			t.Fatalf("commit = %v Job-Status %q, want 200 running", r, r.header.Get("Job-Status"))
		}
		// Committed, then failed as unplaceable: the fake takes a failed
		// update with a failure reason and an exit code, as vk-gitlab sends
		// for a job no node could take (GL-09).
		r = update(t, s, j.ID, j.Token, map[string]any{"state": "failed", "failure_reason": "runner_system_failure", "exit_code": 3})
		ji, _ = s.Job(j.ID)
		if r.status != 200 || ji.State != StateFailed || ji.FailureReason != "runner_system_failure" || ji.ExitCode != 3 {
			t.Errorf("fail after commit = %v, job %s/%s/%d", r, ji.State, ji.FailureReason, ji.ExitCode)
		}
	})
	t.Run("runner without the feature", func(t *testing.T) {
		s := start(t, Options{TwoPhaseCommit: true})
		onePipeline(t, s, JobSpec{Name: "build", Script: []string{"true"}})
		f := map[string]bool{"trace_checksum": true}
		j := takeJob(t, s, f)
		if st := s.JobState(j.ID); st != StateRunning {
			t.Errorf("legacy runner: job %s, want running", st)
		}
	})
	t.Run("default ignores two_phase_job_commit (DECISIONS 5)", func(t *testing.T) {
		s := start(t, Options{})
		onePipeline(t, s, JobSpec{Name: "build", Script: []string{"true"}})
		j := takeJob(t, s, allFeatures)
		if st := s.JobState(j.ID); st != StateRunning {
			t.Fatalf("job %s after 201, want running", st)
		}
		// gitlab-runner's acceptance PUT is then a plain keep-alive.
		if r := update(t, s, j.ID, j.Token, map[string]any{"state": "running", "output": map[string]any{}}); r.status != 200 {
			t.Errorf("accept PUT = %v", r)
		}
		// A job already running refuses state=pending (400).
		if r := update(t, s, j.ID, j.Token, map[string]any{"state": "pending"}); r.status != 400 {
			t.Errorf("pending on running job = %v, want 400", r)
		}
	})
}

// spec: GL-13, GL-15, GL-20
func TestUpdateJobStatuses(t *testing.T) {
	s := start(t, Options{TraceUpdateInterval: 7})
	pl := onePipeline(t, s, JobSpec{Name: "a", Script: []string{"true"}}, JobSpec{Name: "b", Script: []string{"true"}})
	j := takeJob(t, s, allFeatures)
	trace := []byte("\x1b[0KRunning with gitlab-runner\x1b[0;m\n")
	patch(t, s, j.ID, j.Token, 0, string(trace))
	tests := []struct {
		name      string
		id        int64
		token     string
		body      map[string]any
		status    int
		jobStatus string
	}{
		{"keep-alive", j.ID, j.Token, map[string]any{"state": "running", "output": map[string]any{"checksum": checksum(trace), "bytesize": len(trace)}}, 200, "running"},
		{"unknown job", 999999, j.Token, map[string]any{"state": "running"}, 404, ""},
		{"wrong token", j.ID, "glcbt-64_wrong", map[string]any{"state": "running"}, 403, ""},
		{"other job's token", j.ID, s.mustToken(t, pl.Jobs["b"]), map[string]any{"state": "running"}, 403, ""},
		{"bogus state", j.ID, j.Token, map[string]any{"state": "exploded"}, 400, "running"},
		{"final failed", j.ID, j.Token, map[string]any{"state": "failed", "failure_reason": "script_failure", "exit_code": 2,
			"output": map[string]any{"checksum": checksum(trace), "bytesize": len(trace)}}, 200, "failed"},
		{"after the end", j.ID, j.Token, map[string]any{"state": "running"}, 403, "failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := update(t, s, tt.id, tt.token, tt.body)
			if r.status != tt.status || r.header.Get("Job-Status") != tt.jobStatus {
				t.Fatalf("PUT = %v Job-Status %q, want %d %q", r, r.header.Get("Job-Status"), tt.status, tt.jobStatus)
			}
			if r.status == 200 && r.header.Get("X-GitLab-Trace-Update-Interval") != "7" {
				t.Errorf("X-GitLab-Trace-Update-Interval = %q, want 7", r.header.Get("X-GitLab-Trace-Update-Interval"))
			}
		})
	}
	ji, _ := s.Job(j.ID)
	if ji.FailureReason != "script_failure" || ji.ExitCode != 2 || ji.ChecksumMismatch {
		t.Errorf("job = %+v", ji)
	}
	if n := len(ji.Updates); n != 4 {
		t.Errorf("updates recorded = %d, want 4 (keep-alive, bogus, final, late)", n)
	}
}

func (s *Server) mustToken(t *testing.T, id int64) string {
	t.Helper()
	ji, err := s.Job(id)
	if err != nil {
		t.Fatal(err)
	}
	return ji.Token
}

// spec: GL-16, GL-22
func TestFinalUpdateTraceMismatch(t *testing.T) {
	trace := []byte("hello\n")
	short := finalBody("success", append(slices.Clone(trace), "more"...))
	t.Run("accept (current Rails)", func(t *testing.T) {
		s := start(t, Options{})
		onePipeline(t, s, JobSpec{Name: "a"})
		j := takeJob(t, s, allFeatures)
		patch(t, s, j.ID, j.Token, 0, string(trace))
		if r := update(t, s, j.ID, j.Token, short); r.status != 200 {
			t.Fatalf("mismatch = %v, want 200", r)
		}
		if ji, _ := s.Job(j.ID); !ji.ChecksumMismatch || ji.State != StateSuccess {
			t.Errorf("job = %s mismatch=%v", ji.State, ji.ChecksumMismatch)
		}
	})
	t.Run("412 legacy", func(t *testing.T) {
		s := start(t, Options{TraceMismatch: Mismatch412})
		onePipeline(t, s, JobSpec{Name: "a"})
		j := takeJob(t, s, allFeatures)
		patch(t, s, j.ID, j.Token, 0, string(trace))
		if r := update(t, s, j.ID, j.Token, finalBody("success", []byte("hellO\n"))); r.status != 412 {
			t.Fatalf("mismatch = %v, want 412", r)
		}
		if r := update(t, s, j.ID, j.Token, finalBody("success", trace)); r.status != 200 || r.header.Get("Job-Status") != "success" {
			t.Fatalf("matching = %v, want 200 success", r)
		}
	})
	t.Run("202 pending with backoff", func(t *testing.T) {
		var mu sync.Mutex
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
		s := start(t, Options{TraceMismatch: MismatchPending, Now: clock})
		onePipeline(t, s, JobSpec{Name: "a"}, JobSpec{Name: "b"})
		j := takeJob(t, s, allFeatures)
		patch(t, s, j.ID, j.Token, 0, string(trace))
		for _, step := range []struct {
			advance  time.Duration
			interval string
		}{{0, "1"}, {3 * time.Second, "2"}, {5 * time.Second, "8"}, {100 * time.Second, "64"}} {
			advance(step.advance)
			r := update(t, s, j.ID, j.Token, short)
			if r.status != 202 || r.header.Get("X-GitLab-Trace-Update-Interval") != step.interval || r.header.Get("Job-Status") != "running" {
				t.Fatalf("at +%v: %v interval %q, want 202 interval %s", step.advance, r, r.header.Get("X-GitLab-Trace-Update-Interval"), step.interval)
			}
		}
		// The runner re-sends the missing bytes; now it matches.
		patch(t, s, j.ID, j.Token, len(trace), "more")
		if r := update(t, s, j.ID, j.Token, short); r.status != 200 {
			t.Fatalf("after catching up: %v", r)
		}
		// A second job never catches up: accepted after AcceptTimeout.
		k := takeJob(t, s, allFeatures)
		update(t, s, k.ID, k.Token, short)
		advance(5*time.Minute + time.Second)
		if r := update(t, s, k.ID, k.Token, short); r.status != 200 {
			t.Fatalf("after ACCEPT_TIMEOUT: %v, want 200", r)
		}
		if ji, _ := s.Job(k.ID); !ji.ChecksumMismatch {
			t.Errorf("mismatch not recorded")
		}
	})
}

// spec: GL-10, GL-11, GL-12, GL-21
func TestPatchTrace(t *testing.T) {
	s := start(t, Options{TraceUpdateInterval: 5})
	onePipeline(t, s, JobSpec{Name: "a"})
	j := takeJob(t, s, allFeatures)
	r := patch(t, s, j.ID, j.Token, 0, "hello ")
	if r.status != 202 || r.header.Get("Range") != "0-6" || r.header.Get("Job-Status") != "running" || r.header.Get("X-GitLab-Trace-Update-Interval") != "5" {
		t.Fatalf("first patch = %v %v", r, r.header)
	}
	tests := []struct {
		name      string
		hdr       map[string]string
		body      string
		status    int
		wantRange string
	}{
		{"rewind", map[string]string{"Content-Range": "0-5"}, "HELLO ", 416, "0-6"},
		{"gap", map[string]string{"Content-Range": "10-11"}, "xx", 416, "0-6"},
		{"missing Content-Range", map[string]string{}, "x", 400, ""},
		{"bytes unit refused", map[string]string{"Content-Range": "bytes 6-6"}, "x", 400, ""},
		{"wrong token", map[string]string{"Content-Range": "6-6", "JOB-TOKEN": "glcbt-64_nope"}, "x", 403, ""},
		{"append (end ignored, as Rails)", map[string]string{"Content-Range": "6-99"}, "world\n", 202, "0-12"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := map[string]string{"JOB-TOKEN": j.Token, "Content-Type": "text/plain"}
			for k, v := range tt.hdr {
				h[k] = v
			}
			r := call(t, s, "PATCH", fmt.Sprintf("/jobs/%d/trace?debug_trace=false", j.ID), h, []byte(tt.body))
			if r.status != tt.status || r.header.Get("Range") != tt.wantRange {
				t.Fatalf("PATCH = %v Range %q, want %d %q", r, r.header.Get("Range"), tt.status, tt.wantRange)
			}
		})
	}
	if got := string(s.Trace(j.ID)); got != "hello world\n" {
		t.Errorf("trace = %q", got)
	}
	// Rails' hide_secrets overwrites the job token in place.
	r = patch(t, s, j.ID, j.Token, 12, "token="+j.Token+"\n")
	if want := "token=" + strings.Repeat("x", len(j.Token)) + "\n"; r.status != 202 || !strings.HasSuffix(string(s.Trace(j.ID)), want) {
		t.Errorf("token not hidden: %q", s.Trace(j.ID))
	}
	ji, _ := s.Job(j.ID)
	if ji.Patches[0].Start != 0 || ji.Patches[0].End != 5 || ji.Patches[0].DebugTrace != "false" {
		t.Errorf("patch record = %+v", ji.Patches[0])
	}
	update(t, s, j.ID, j.Token, finalBody("success", s.Trace(j.ID)))
	if r := patch(t, s, j.ID, j.Token, len(s.Trace(j.ID)), "late"); r.status != 403 || r.header.Get("Job-Status") != "success" {
		t.Errorf("patch after the end = %v Job-Status %q, want 403 success", r, r.header.Get("Job-Status"))
	}
	if r := patch(t, s, 424242, j.Token, 0, "x"); r.status != 404 {
		t.Errorf("patch unknown job = %v, want 404", r)
	}
}

// spec: GL-12
func TestTraceSizeLimit(t *testing.T) {
	s := start(t, Options{MaxTraceSize: 10})
	onePipeline(t, s, JobSpec{Name: "a"})
	j := takeJob(t, s, allFeatures)
	patch(t, s, j.ID, j.Token, 0, "12345678")
	r := patch(t, s, j.ID, j.Token, 8, "9ab")
	ji, _ := s.Job(j.ID)
	if r.status != 403 || ji.State != StateFailed || ji.FailureReason != "trace_size_exceeded" {
		t.Fatalf("over limit = %v, job %s/%s", r, ji.State, ji.FailureReason)
	}
}

// spec: GL-17
func TestCancel(t *testing.T) {
	t.Run("graceful", func(t *testing.T) {
		s := start(t, Options{})
		onePipeline(t, s, JobSpec{Name: "a"})
		j := takeJob(t, s, allFeatures)
		if err := s.CancelJob(j.ID, true); err != nil {
			t.Fatal(err)
		}
		if r := patch(t, s, j.ID, j.Token, 0, "x"); r.status != 202 || r.header.Get("Job-Status") != "canceling" {
			t.Fatalf("patch while canceling = %v %q", r, r.header.Get("Job-Status"))
		}
		if r := update(t, s, j.ID, j.Token, map[string]any{"state": "running"}); r.status != 200 || r.header.Get("Job-Status") != "canceling" {
			t.Fatalf("keep-alive while canceling = %v %q", r, r.header.Get("Job-Status"))
		}
		r := update(t, s, j.ID, j.Token, map[string]any{"state": "failed", "failure_reason": "job_canceled"})
		if r.status != 200 || r.header.Get("Job-Status") != "canceled" || s.JobState(j.ID) != StateCanceled {
			t.Fatalf("final after cancel = %v %q", r, r.header.Get("Job-Status"))
		}
	})
	t.Run("hard", func(t *testing.T) {
		s := start(t, Options{})
		onePipeline(t, s, JobSpec{Name: "a"}, JobSpec{Name: "b", Stage: "deploy"})
		j := takeJob(t, s, allFeatures)
		s.CancelJob(j.ID, false)
		if r := patch(t, s, j.ID, j.Token, 0, "x"); r.status != 403 || r.header.Get("Job-Status") != "canceled" {
			t.Fatalf("patch after cancel = %v %q", r, r.header.Get("Job-Status"))
		}
		if r := update(t, s, j.ID, j.Token, map[string]any{"state": "running"}); r.status != 403 || r.header.Get("Job-Status") != "canceled" {
			t.Fatalf("PUT after cancel = %v %q", r, r.header.Get("Job-Status"))
		}
		ji, _ := s.Job(j.ID)
		if b, _ := s.Job(ji.ID + 1); b.State != StateSkipped {
			t.Errorf("later stage after cancel = %s, want skipped", b.State)
		}
		if err := s.CancelJob(j.ID, false); err == nil {
			t.Errorf("canceling a canceled job succeeded")
		}
	})
	t.Run("graceful without cancel_gracefully", func(t *testing.T) {
		s := start(t, Options{})
		onePipeline(t, s, JobSpec{Name: "a"})
		j := takeJob(t, s, map[string]bool{"cancelable": true})
		s.CancelJob(j.ID, true)
		if st := s.JobState(j.ID); st != StateCanceled {
			t.Errorf("state = %s, want canceled", st)
		}
	})
	t.Run("pending", func(t *testing.T) {
		s := start(t, Options{})
		pl := onePipeline(t, s, JobSpec{Name: "a"})
		s.CancelJob(pl.Jobs["a"], true)
		if st := s.JobState(pl.Jobs["a"]); st != StateCanceled {
			t.Errorf("state = %s", st)
		}
		if r := requestJob(t, s, s.RunnerToken(), "", allFeatures); r.status != 204 {
			t.Errorf("canceled job handed out: %v", r)
		}
	})
}

// A job given as a whole response is served as given, but for what ties
// it to the fake (id, token, git_info, job_info's ids): a capture or one of
// gitlab-runner's fixtures runs against the fake unchanged.
func TestRawJobResponse(t *testing.T) {
	s := start(t, Options{})
	raw := []byte(`{"id": 7, "token": "fixture-token", "job_info": {"id": 7, "name": "raw", "project_id": 99},
		"git_info": {"repo_url": "https://gitlab.example.com/x.git"},
		"variables": [{"key": "FROM_FIXTURE", "value": "yes", "public": true}],
		"steps": [{"name": "script", "script": ["echo raw"], "timeout": 60, "when": "on_success"}],
		"features": {"trace_sections": false}}`)
	pl := onePipeline(t, s, JobSpec{Name: "raw", Response: raw})
	r := requestJob(t, s, s.RunnerToken(), "", nil)
	if r.status != 201 {
		t.Fatalf("jobs/request = %v, want 201", r)
	}
	var got struct {
		ID      int64  `json:"id"`
		Token   string `json:"token"`
		JobInfo struct {
			ID        int64  `json:"id"`
			Name      string `json:"name"`
			ProjectID int64  `json:"project_id"`
		} `json:"job_info"`
		GitInfo struct {
			RepoURL string `json:"repo_url"`
			SHA     string `json:"sha"`
		} `json:"git_info"`
		Variables []struct{ Key, Value string } `json:"variables"`
		Features  map[string]any                `json:"features"`
	}
	if err := json.Unmarshal(r.body, &got); err != nil {
		t.Fatal(err)
	}
	ji, _ := s.Job(pl.Jobs["raw"])
	if got.ID != pl.Jobs["raw"] || got.Token != ji.Token || got.JobInfo.ID != got.ID || got.JobInfo.Name != "raw" || got.JobInfo.ProjectID == 99 {
		t.Errorf("identity not the fake's: %+v", got)
	}
	if !strings.Contains(got.GitInfo.RepoURL, "acme/demo.git") || got.GitInfo.SHA != pl.SHA {
		t.Errorf("git_info = %+v, want the fake's project", got.GitInfo)
	}
	if len(got.Variables) != 1 || got.Variables[0].Key != "FROM_FIXTURE" || got.Features["trace_sections"] != false {
		t.Errorf("the rest is not as given: %+v %v", got.Variables, got.Features)
	}
}
