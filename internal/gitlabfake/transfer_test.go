package gitlabfake

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func uploadArtifact(t *testing.T, s *Server, id int64, token, query, filename string, data []byte) reply {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, _ := mw.CreateFormFile("file", filename)
	fw.Write(data)
	mw.Close()
	return call(t, s, "POST", fmt.Sprintf("/jobs/%d/artifacts%s", id, query),
		map[string]string{"JOB-TOKEN": token, "Content-Type": mw.FormDataContentType()}, buf.Bytes())
}

func download(t *testing.T, s *Server, id int64, token, query string) reply {
	t.Helper()
	return call(t, s, "GET", fmt.Sprintf("/jobs/%d/artifacts%s", id, query), map[string]string{"JOB-TOKEN": token}, nil)
}

// spec: XFER-02, XFER-06, AUTH-03, AUTH-04
func TestArtifactsRoundTrip(t *testing.T) {
	s := start(t, Options{})
	onePipeline(t, s,
		JobSpec{Name: "build", Stage: "build", Artifacts: []Artifact{{Paths: []string{"out/"}}}},
		JobSpec{Name: "test", Stage: "test"})
	b := takeJob(t, s, allFeatures)
	data := []byte("PK\x03\x04 pretend zip")
	r := uploadArtifact(t, s, b.ID, b.Token, "?artifact_format=zip&artifact_type=archive&expire_in=1+day", "default.zip", data)
	if r.status != 201 {
		t.Fatalf("upload = %v", r)
	}
	if r := uploadArtifact(t, s, b.ID, b.Token, "?artifact_format=gzip&artifact_type=junit", "junit.xml.gz", []byte("gz")); r.status != 201 {
		t.Fatalf("junit upload = %v", r)
	}
	if r := uploadArtifact(t, s, b.ID, "glcbt-64_wrong", "", "x.zip", data); r.status != 403 {
		t.Errorf("upload with a wrong token = %v, want 403", r)
	}
	ji, _ := s.Job(b.ID)
	if len(ji.Artifacts) != 2 || ji.Artifacts[0].ExpireIn != "1 day" || ji.Artifacts[0].Filename != "default.zip" || ji.Artifacts[1].Type != "junit" {
		t.Fatalf("stored = %+v", ji.Artifacts)
	}
	update(t, s, b.ID, b.Token, finalBody("success", nil))
	if r := uploadArtifact(t, s, b.ID, b.Token, "", "late.zip", data); r.status != 403 {
		t.Errorf("upload after the end = %v, want 403", r)
	}
	if r := download(t, s, b.ID, b.Token, ""); r.status != 401 {
		t.Errorf("download with the finished job's own token = %v, want 401", r)
	}
	tj := takeJob(t, s, allFeatures)
	if len(tj.Dependencies) != 1 {
		t.Fatalf("dependencies = %+v", tj.Dependencies)
	}
	dep := tj.Dependencies[0]
	r = download(t, s, dep.ID, dep.Token, "")
	if r.status != 200 || !bytes.Equal(r.body, data) || !strings.Contains(r.header.Get("Content-Disposition"), "default.zip") {
		t.Fatalf("download = %v %v", r, r.header)
	}
	if r := download(t, s, tj.ID, tj.Token, ""); r.status != 404 {
		t.Errorf("download of a job without artifacts = %v, want 404", r)
	}
	if r := download(t, s, dep.ID, "glcbt-64_wrong", ""); r.status != 401 {
		t.Errorf("download with a wrong token = %v, want 401", r)
	}
	// A running job of another project may not read it.
	if _, err := s.CreateProject("other/proj", map[string]string{"x": "y"}, ProjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreatePipeline("other/proj", PipelineSpec{Jobs: []JobSpec{{Name: "o"}}}); err != nil {
		t.Fatal(err)
	}
	o := takeJob(t, s, allFeatures)
	if r := download(t, s, dep.ID, o.Token, ""); r.status != 403 {
		t.Errorf("download with another project's job token = %v, want 403", r)
	}
}

// spec: XFER-06, AUTH-04
func TestLegacyDependencyTokens(t *testing.T) {
	s := start(t, Options{LegacyDependencyTokens: true})
	onePipeline(t, s, JobSpec{Name: "build", Stage: "build"}, JobSpec{Name: "test", Stage: "test"})
	b := takeJob(t, s, allFeatures)
	uploadArtifact(t, s, b.ID, b.Token, "", "default.zip", []byte("zip"))
	update(t, s, b.ID, b.Token, finalBody("success", nil))
	tj := takeJob(t, s, allFeatures)
	if len(tj.Dependencies) != 1 || tj.Dependencies[0].Token != b.Token {
		t.Fatalf("dependencies = %+v, want build's own token", tj.Dependencies)
	}
	if r := download(t, s, b.ID, b.Token, ""); r.status != 200 || string(r.body) != "zip" {
		t.Fatalf("download with the dependency's own token = %v", r)
	}
	// The ended job's token still works for nothing else.
	if r := patch(t, s, b.ID, b.Token, 0, "x"); r.status != 403 {
		t.Errorf("patch with the ended job's token = %v, want 403", r)
	}
}

// spec: XFER-04
func TestArtifactTooLarge(t *testing.T) {
	s := start(t, Options{MaxArtifactSize: 1024})
	onePipeline(t, s, JobSpec{Name: "a"})
	j := takeJob(t, s, allFeatures)
	if r := uploadArtifact(t, s, j.ID, j.Token, "", "big.zip", make([]byte, 1025)); r.status != 413 {
		t.Fatalf("1025 bytes over a 1024 cap = %v, want 413", r)
	}
	if r := uploadArtifact(t, s, j.ID, j.Token, "", "ok.zip", make([]byte, 1024)); r.status != 201 {
		t.Fatalf("1024 bytes = %v, want 201", r)
	}
	s.InjectFault(Fault{Route: RouteArtifactUpload, Status: 503, RetryAfter: "2"})
	if r := uploadArtifact(t, s, j.ID, j.Token, "", "ok.zip", []byte("x")); r.status != 503 || r.header.Get("Retry-After") != "2" {
		t.Errorf("injected 503 = %v", r)
	}
}

// spec: XFER-02, XFER-03
func TestArtifactRedirectToObjectStorage(t *testing.T) {
	s := start(t, Options{ArtifactRedirect: true})
	onePipeline(t, s, JobSpec{Name: "a", Stage: "build"}, JobSpec{Name: "b", Stage: "test"})
	j := takeJob(t, s, allFeatures)

	// Without following: the 307 and its Location on the other listener.
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, _ := mw.CreateFormFile("file", "default.zip")
	fw.Write([]byte("zipdata"))
	mw.Close()
	req, _ := http.NewRequestWithContext(t.Context(), "POST", fmt.Sprintf("%s/api/v4/jobs/%d/artifacts?artifact_type=archive", s.URL(), j.ID), bytes.NewReader(buf.Bytes()))
	req.Header.Set("JOB-TOKEN", j.Token)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if resp.StatusCode != 307 || !strings.HasPrefix(loc, s.ObjectStorageURL()+"/objects/") || s.ObjectStorageURL() == s.URL() {
		t.Fatalf("upload = %d Location %q, want 307 to object storage", resp.StatusCode, loc)
	}
	// Following it (Go's client re-sends the body) stores the artifact.
	if r := uploadArtifact(t, s, j.ID, j.Token, "?artifact_type=archive", "default.zip", []byte("zipdata")); r.status != 201 {
		t.Fatalf("followed upload = %v", r)
	}
	ji, _ := s.Job(j.ID)
	if len(ji.Artifacts) != 1 || !ji.Artifacts[0].ViaObjectStorage || string(ji.Artifacts[0].Data) != "zipdata" {
		t.Fatalf("stored = %+v", ji.Artifacts)
	}
	// The unused first key still works once; a reused key is refused.
	objs := s.RequestsTo(RouteObjectStore)
	if len(objs) != 1 {
		t.Fatalf("object store saw %d requests, want 1", len(objs))
	}
	reuse, _ := http.Post(s.ObjectStorageURL()+objs[0].Path, mw.FormDataContentType(), bytes.NewReader(buf.Bytes()))
	if reuse.StatusCode != 403 {
		t.Errorf("reused object key = %d, want 403", reuse.StatusCode)
	}
	reuse.Body.Close()

	update(t, s, j.ID, j.Token, finalBody("success", nil))
	k := takeJob(t, s, allFeatures)
	r := call(t, s, "GET", fmt.Sprintf("/jobs/%d/artifacts?direct_download=true", j.ID), map[string]string{"JOB-TOKEN": k.Dependencies[0].Token}, nil)
	if r.status != 200 || string(r.body) != "zipdata" {
		t.Fatalf("direct download (followed 302) = %v", r)
	}
}

func gitClone(t *testing.T, url, dir string) error {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "git", "clone", "-q", url, dir)
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return nil
}

// spec: AUTH-03
func TestGitCloneWithJobToken(t *testing.T) {
	s := start(t, Options{})
	proj, err := s.CreateProject("acme/demo", map[string]string{"README.md": "hello\n", "src/main.sh": "echo hi\n"}, ProjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreatePipeline(proj.Path, PipelineSpec{Jobs: []JobSpec{{Name: "a"}}}); err != nil {
		t.Fatal(err)
	}
	j := takeJob(t, s, allFeatures)
	if j.GitInfo.SHA != proj.SHA || len(proj.SHA) != 40 {
		t.Fatalf("git_info.sha %q, project sha %q", j.GitInfo.SHA, proj.SHA)
	}
	dir := filepath.Join(t.TempDir(), "ok")
	if err := gitClone(t, j.GitInfo.RepoURL, dir); err != nil {
		t.Fatalf("clone with the job token: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "src/main.sh")); err != nil || string(b) != "echo hi\n" {
		t.Errorf("cloned file = %q, %v", b, err)
	}
	// The pipeline ref the runner's refspecs name exists.
	cmd := exec.Command("git", "-C", dir, "fetch", "-q", "origin", "+refs/pipelines/1:refs/pipelines/1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("fetch refs/pipelines/1: %v %s", err, out)
	}
	bad := strings.Replace(j.GitInfo.RepoURL, j.Token, "glcbt-64_wrongtoken", 1)
	if err := gitClone(t, bad, filepath.Join(t.TempDir(), "bad")); err == nil {
		t.Errorf("clone with a wrong token succeeded")
	}
	anon := strings.Replace(j.GitInfo.RepoURL, "gitlab-ci-token:"+j.Token+"@", "", 1)
	if err := gitClone(t, anon, filepath.Join(t.TempDir(), "anon")); err == nil {
		t.Errorf("anonymous clone succeeded")
	}
	update(t, s, j.ID, j.Token, finalBody("success", nil))
	if err := gitClone(t, j.GitInfo.RepoURL, filepath.Join(t.TempDir(), "late")); err == nil {
		t.Errorf("clone with an expired job token succeeded")
	}
}

func TestPipelineStagesAndNeeds(t *testing.T) {
	s := start(t, Options{})
	if _, err := s.CreateProject("acme/demo", map[string]string{"a": "b"}, ProjectOptions{}); err != nil {
		t.Fatal(err)
	}
	pl, err := s.CreatePipeline("acme/demo", PipelineSpec{
		Stages: []string{"build", "test", "deploy"},
		Jobs: []JobSpec{
			{Name: "compile", Stage: "build"},
			{Name: "lint", Stage: "build", AllowFailure: true},
			{Name: "unit", Stage: "test"},
			{Name: "fast", Stage: "test", Needs: []string{}},
			{Name: "deploy", Stage: "deploy", Dependencies: []string{"compile"}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	state := func(n string) JobState { return s.JobState(pl.Jobs[n]) }
	if state("compile") != StatePending || state("fast") != StatePending || state("unit") != StateCreated {
		t.Fatalf("initial: compile %s fast %s unit %s", state("compile"), state("fast"), state("unit"))
	}
	finish := func(want string, st string) {
		t.Helper()
		j := takeJob(t, s, allFeatures)
		if ji, _ := s.Job(j.ID); ji.Name != want {
			t.Fatalf("handed out %q, want %q", ji.Name, want)
		}
		body := finalBody(st, nil)
		body["failure_reason"] = "script_failure"
		if r := update(t, s, j.ID, j.Token, body); r.status != 200 {
			t.Fatalf("finish %s: %v", want, r)
		}
	}
	finish("compile", "success")
	if state("unit") != StateCreated {
		t.Errorf("unit started before lint finished")
	}
	finish("lint", "failed") // allow_failure: later stages still run
	if state("unit") != StatePending {
		t.Fatalf("unit = %s after build stage, want pending", state("unit"))
	}
	finish("unit", "failed")
	finish("fast", "success")
	if state("deploy") != StateSkipped {
		t.Errorf("deploy = %s after unit failed, want skipped", state("deploy"))
	}
	if _, err := s.CreatePipeline("acme/demo", PipelineSpec{Jobs: []JobSpec{{Name: "x", Needs: []string{"nope"}}}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("unknown need: err = %v, want ErrInvalid", err)
	}
	if _, err := s.CreatePipeline("acme/nope", PipelineSpec{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown project: err = %v, want ErrNotFound", err)
	}
}

func TestFaults(t *testing.T) {
	s := start(t, Options{})
	t.Run("drop", func(t *testing.T) {
		s.InjectFault(Fault{Route: RouteVerify, Drop: true})
		_, err := http.Post(s.URL()+"/api/v4/runners/verify", "application/json", strings.NewReader(`{}`))
		if err == nil {
			t.Fatal("dropped connection answered")
		}
		if rs := s.RequestsTo(RouteVerify); len(rs) != 1 || !rs[0].Faulted || rs[0].Status != 0 {
			t.Errorf("log = %+v", rs)
		}
	})
	t.Run("hold then normal", func(t *testing.T) {
		release := make(chan struct{})
		s.InjectFault(Fault{Route: RouteVerify, Hold: release, Count: 1})
		done := make(chan int)
		go func() {
			resp, err := http.Post(s.URL()+"/api/v4/runners/verify", "application/json", strings.NewReader(fmt.Sprintf(`{"token":%q}`, s.RunnerToken())))
			if err != nil {
				done <- -1
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
		select {
		case c := <-done:
			t.Fatalf("held request answered %d before release", c)
		case <-time.After(50 * time.Millisecond): // only a bound on a negative check, not synchronisation
		}
		close(release)
		if c := <-done; c != 200 {
			t.Fatalf("after release = %d, want 200", c)
		}
	})
	t.Run("count", func(t *testing.T) {
		s.InjectFault(Fault{Route: RouteVerify, Status: 502, Count: 2})
		var got []int
		for range 3 {
			got = append(got, call(t, s, "POST", "/runners/verify", nil, []byte(fmt.Sprintf(`{"token":%q}`, s.RunnerToken()))).status)
		}
		if fmt.Sprint(got) != "[502 502 200]" {
			t.Errorf("statuses = %v", got)
		}
	})
}

func TestStartRefusesNonLoopback(t *testing.T) {
	s := New(Options{Addr: "0.0.0.0:0"})
	if err := s.Start(); !errors.Is(err, ErrNotLoopback) {
		t.Fatalf("Start(0.0.0.0) = %v, want ErrNotLoopback", err)
	}
	s.Close()
}

func TestZeroValueServer(t *testing.T) {
	var s Server
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !strings.HasPrefix(s.RunnerToken(), "glrt-t1_") || !strings.HasPrefix(s.URL(), "http://127.0.0.1:") {
		t.Fatalf("token %q url %q", s.RunnerToken(), s.URL())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if _, err := s.WaitJobState(ctx, 1, StateRunning); !errors.Is(err, ErrNotFound) {
		t.Errorf("WaitJobState(unknown) = %v", err)
	}
}

// spec: GL-11
// A runner that follows the fake's 202/416 answers, whatever offsets it
// starts from, ends with exactly its buffer stored, and the fake never
// reports more than it was sent.
func TestTraceResumeProperty(t *testing.T) {
	s := start(t, Options{Logger: discard()})
	if _, err := s.CreateProject("acme/demo", map[string]string{"a": "b"}, ProjectOptions{}); err != nil {
		t.Fatal(err)
	}
	rapid.Check(t, func(rt *rapid.T) {
		if _, err := s.CreatePipeline("acme/demo", PipelineSpec{Jobs: []JobSpec{{Name: "p"}}}); err != nil {
			rt.Fatal(err)
		}
		j := takeJob(t, s, allFeatures)
		buf := []byte(rapid.StringMatching(`[a-z\n]{1,200}`).Draw(rt, "buf"))
		sent := rapid.IntRange(0, len(buf)-1).Draw(rt, "start") // a wrong idea of the offset
		for range 2*len(buf) + 4 {
			if sent == len(buf) {
				break
			}
			n := rapid.IntRange(1, 50).Draw(rt, "n")
			end := min(sent+n, len(buf))
			r := patch(t, s, j.ID, j.Token, sent, string(buf[sent:end]))
			switch r.status {
			case 202:
				sent = end
			case 416:
				var stored int
				fmt.Sscanf(r.header.Get("Range"), "0-%d", &stored)
				if stored > len(buf) {
					rt.Fatalf("416 Range %q beyond what was sent", r.header.Get("Range"))
				}
				sent = stored
			default:
				rt.Fatalf("patch = %v", r)
			}
		}
		if got := s.Trace(j.ID); !bytes.Equal(got, buf) {
			rt.Fatalf("stored %q, want %q", got, buf)
		}
		update(t, s, j.ID, j.Token, finalBody("success", buf))
	})
}

func FuzzParseContentRange(f *testing.F) {
	for _, seed := range []string{"0-16", "0-0", "5-4", "bytes 0-1", "-1-2", "1-", "99999999999999999999-1", "3-7/10", ""} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		start, end, ok := parseContentRange(v)
		if !ok {
			return
		}
		if start < 0 || end < 0 {
			t.Fatalf("parseContentRange(%q) = %d, %d, true", v, start, end)
		}
		if a, _, _ := strings.Cut(v, "-"); strings.TrimLeft(a, "0") != strings.TrimLeft(fmt.Sprint(start), "0") {
			t.Fatalf("start %d does not match %q", start, v)
		}
	})
}

// FuzzRunnerAPI feeds arbitrary input to every decoder of untrusted input
// in-process (JSON bodies of verify, jobs/request and PUT; PATCH's
// Content-Range; the artifact multipart body): the fake must answer with a
// documented status and never panic.
func FuzzRunnerAPI(f *testing.F) {
	for _, seed := range []string{`{"token":"glrt-t1_fuzz","info":{"features":{"two_phase_job_commit":true}}}`,
		`{"token":"glrt-t1_fuzz","last_update":"x"}`, `{"token":1}`, `[]`, `{"state":"success","output":{"bytesize":-1}}`, "\x00",
		"0-0", "5-1", "--fuzzbound\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.zip\"\r\n\r\nPK\r\n--fuzzbound--\r\n"} {
		for route := range uint8(5) {
			f.Add(seed, route)
		}
	}
	s := New(Options{RunnerToken: "glrt-t1_fuzz", Logger: discard(), MaxArtifactSize: 1 << 16})
	if err := s.init(); err != nil {
		f.Fatal(err)
	}
	s.url = "http://127.0.0.1:1"
	f.Cleanup(func() { s.Close() })
	if _, err := s.CreateProject("fuzz/p", map[string]string{"a": "b"}, ProjectOptions{}); err != nil {
		f.Fatal(err)
	}
	pl, err := s.CreatePipeline("fuzz/p", PipelineSpec{Jobs: []JobSpec{{Name: "running"}, {Name: "queued"}}})
	if err != nil {
		f.Fatal(err)
	}
	h := s.handler()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/api/v4/jobs/request", strings.NewReader(`{"token":"glrt-t1_fuzz"}`)))
	if rec.Code != 201 {
		f.Fatalf("setup job request = %d", rec.Code)
	}
	id := pl.Jobs["running"]
	ji, _ := s.Job(id)
	f.Fuzz(func(t *testing.T, in string, route uint8) {
		var req *http.Request
		switch route % 5 {
		case 0:
			req = httptest.NewRequest("POST", "/api/v4/runners/verify", strings.NewReader(in))
		case 1:
			req = httptest.NewRequest("POST", "/api/v4/jobs/request", strings.NewReader(in))
		case 2:
			req = httptest.NewRequest("PUT", fmt.Sprintf("/api/v4/jobs/%d", pl.Jobs["queued"]), strings.NewReader(in))
		case 3:
			req = httptest.NewRequest("PATCH", fmt.Sprintf("/api/v4/jobs/%d/trace", id), strings.NewReader("x"))
			req.Header.Set("Content-Range", in)
		case 4:
			req = httptest.NewRequest("POST", fmt.Sprintf("/api/v4/jobs/%d/artifacts", id), strings.NewReader(in))
			req.Header.Set("Content-Type", "multipart/form-data; boundary=fuzzbound")
		}
		req.Header.Set("JOB-TOKEN", ji.Token)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case 200, 201, 202, 204, 400, 403, 404, 413, 416:
		default:
			t.Fatalf("route %d %q = %d", route%5, in, rec.Code)
		}
	})
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// spec: AUTH-01, AUTH-03
func TestRunnerTokenLeaks(t *testing.T) {
	s := start(t, Options{})
	onePipeline(t, s, JobSpec{Name: "a"})
	j := takeJob(t, s, allFeatures)
	patch(t, s, j.ID, j.Token, 0, "clean\n")
	if l := s.RunnerTokenLeaks(); len(l) != 0 {
		t.Fatalf("leaks after clean calls: %+v", l)
	}
	call(t, s, "PATCH", fmt.Sprintf("/jobs/%d/trace", j.ID), map[string]string{"JOB-TOKEN": j.Token, "RUNNER-TOKEN": s.RunnerToken(), "Content-Range": "6-6"}, []byte("x"))
	update(t, s, j.ID, j.Token, map[string]any{"state": "running", "note": s.RunnerToken()})
	req, _ := http.NewRequest("GET", s.URL()+"/acme/demo.git/info/refs?service=git-upload-pack", nil)
	req.SetBasicAuth("gitlab-ci-token", s.RunnerToken())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("git with the runner token = %d, want 401", resp.StatusCode)
	}
	var routes []Route
	for _, r := range s.RunnerTokenLeaks() {
		routes = append(routes, r.Route)
	}
	if fmt.Sprint(routes) != fmt.Sprint([]Route{RoutePatchTrace, RouteUpdateJob, RouteGit}) {
		t.Errorf("leaks = %v", routes)
	}
}

func TestRequestLogBounded(t *testing.T) {
	s := start(t, Options{MaxRequestLog: 3})
	for i := range 5 {
		call(t, s, "POST", "/runners/verify", nil, []byte(fmt.Sprintf(`{"token":"t%d"}`, i)))
	}
	rs := s.Requests()
	if len(rs) != 3 || string(rs[0].Body) != `{"token":"t2"}` {
		t.Fatalf("log = %d entries, first %q; want the last 3", len(rs), rs[0].Body)
	}
	// The counts are not bounded by the log.
	if n := s.Answered(rs[0].Route, rs[0].Status); n != 5 {
		t.Errorf("Answered(%s, %d) = %d, want 5", rs[0].Route, rs[0].Status, n)
	}
}

func TestWaitJobState(t *testing.T) {
	s := start(t, Options{})
	pl := onePipeline(t, s, JobSpec{Name: "a"})
	id := pl.Jobs["a"]
	done := make(chan error, 1)
	go func() {
		_, err := s.WaitJobState(t.Context(), id, StateSuccess, StateFailed)
		done <- err
	}()
	j := takeJob(t, s, allFeatures)
	waitState(t, s, id, StateRunning)
	update(t, s, j.ID, j.Token, finalBody("success", nil))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if st, err := s.WaitJobState(ctx, id, StateFailed); !errors.Is(err, context.Canceled) || st != StateSuccess {
		t.Errorf("WaitJobState(canceled ctx) = %s, %v", st, err)
	}
}
