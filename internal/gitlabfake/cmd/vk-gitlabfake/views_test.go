package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/vk-ci/vk/internal/gitlabfake"
)

// startViews runs a fake with the job views and the demo pipeline.
func startViews(t *testing.T) *gitlabfake.Server {
	t.Helper()
	v := &views{}
	srv := gitlabfake.New(gitlabfake.Options{RunnerToken: "glrt-t1_views", Views: v.handler()})
	v.srv = srv
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	if err := loadDemo(srv, io.Discard); err != nil {
		t.Fatal(err)
	}
	return srv
}

// noRedirect is a client that shows redirects instead of following them.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func fetch(t *testing.T, req *http.Request, want int) string {
	t.Helper()
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s = %d, want %d: %s", req.Method, req.URL, resp.StatusCode, want, b)
	}
	return string(b)
}

func get(t *testing.T, url string, want int) string {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	return fetch(t, req, want)
}

// The job pages show every job's state, a running job's trace (readable
// on its page, as stored in raw), and start another run of a pipeline;
// a cross-site form and unknown jobs are refused.
func TestJobViews(t *testing.T) {
	srv := startViews(t)
	u := srv.URL()
	list := get(t, u+"/-/jobs", 200)
	for _, want := range []string{`href="/-/jobs/1001"`, "build", "test", "demo/hello", ">pending<", ">created<", "Run pipeline 1 again"} {
		if !strings.Contains(list, want) {
			t.Errorf("job list lacks %q:\n%s", want, list)
		}
	}
	// a runner takes the build job and writes a line of trace
	resp, err := http.Post(u+"/api/v4/jobs/request", "application/json",
		strings.NewReader(`{"token":"glrt-t1_views","info":{"features":{"trace_checksum":true}}}`))
	if err != nil {
		t.Fatal(err)
	}
	var job struct {
		ID    int64  `json:"id"`
		Token string `json:"token"`
	}
	json.NewDecoder(resp.Body).Decode(&job)
	resp.Body.Close()
	line := "2026-12-01T21:00:00.123456Z 00O \x1b[32;1mhello from the views\x1b[0;m\n"
	req, _ := http.NewRequest("PATCH", fmt.Sprintf("%s/api/v4/jobs/%d/trace", u, job.ID), strings.NewReader(line))
	req.Header.Set("JOB-TOKEN", job.Token)
	req.Header.Set("Content-Range", fmt.Sprintf("0-%d", len(line)-1))
	fetch(t, req, http.StatusAccepted)

	page := get(t, fmt.Sprintf("%s/-/jobs/%d", u, job.ID), 200)
	if !strings.Contains(page, "21:00:00 hello from the views") || strings.Contains(page, "\x1b") || !strings.Contains(page, ">running<") {
		t.Errorf("job page, want the readable trace and running:\n%s", page)
	}
	if raw := get(t, fmt.Sprintf("%s/-/jobs/%d/trace", u, job.ID), 200); raw != line {
		t.Errorf("raw trace = %q, want %q", raw, line)
	}

	req, _ = http.NewRequest("POST", u+"/-/pipelines/1/run", nil)
	req.Header.Set("Origin", "https://evil.example")
	fetch(t, req, http.StatusForbidden)
	req, _ = http.NewRequest("POST", u+"/-/pipelines/1/run", nil)
	fetch(t, req, http.StatusSeeOther)
	jobs := srv.JobList()
	if len(jobs) != 4 || jobs[0].PipelineID != 2 || jobs[0].Name != "test" || jobs[1].Name != "build" || jobs[1].State != gitlabfake.StatePending {
		t.Errorf("jobs after the rerun = %+v, want pipeline 2's build pending and test first", jobs)
	}
	req, _ = http.NewRequest("POST", u+"/-/pipelines/99/run", nil)
	fetch(t, req, http.StatusNotFound)
	get(t, u+"/-/jobs/4242", http.StatusNotFound)
	get(t, u+"/-/jobs/x", http.StatusBadRequest)
}
