package gitlabfake

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/testlog"
)

// allFeatures is info.features as gitlab-runner's docker executor sends it.
var allFeatures = map[string]bool{
	"variables": true, "image": true, "services": true, "artifacts": true, "cache": true,
	"fallback_cache_keys": true, "upload_multiple_artifacts": true, "upload_raw_artifacts": true,
	"refspecs": true, "masking": true, "raw_variables": true, "artifacts_exclude": true,
	"multi_build_steps": true, "trace_reset": true, "trace_checksum": true, "trace_size": true,
	"cancelable": true, "cancel_gracefully": true, "return_exit_code": true,
	"two_phase_job_commit": true,
}

func start(t *testing.T, opts Options) *Server {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testlog.New(t)
	}
	s := New(opts)
	if err := s.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) String() string { return fmt.Sprintf("%d %s", r.status, r.body) }

func call(t *testing.T, s *Server, method, path string, hdr map[string]string, body []byte) reply {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, s.URL()+"/api/v4"+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, b}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// requestJob sends POST /jobs/request as gitlab-runner does.
func requestJob(t *testing.T, s *Server, token, lastUpdate string, features map[string]bool) reply {
	t.Helper()
	body := map[string]any{"token": token, "info": map[string]any{"name": "gitlab-runner", "features": features}}
	if lastUpdate != "" {
		body["last_update"] = lastUpdate
	}
	return call(t, s, "POST", "/jobs/request", map[string]string{"Content-Type": "application/json", "RUNNER-TOKEN": token}, mustJSON(t, body))
}

type gotJob struct {
	ID      int64  `json:"id"`
	Token   string `json:"token"`
	GitInfo struct {
		RepoURL string `json:"repo_url"`
		Ref     string `json:"ref"`
		SHA     string `json:"sha"`
	} `json:"git_info"`
	Dependencies []struct {
		ID            int64  `json:"id"`
		Name          string `json:"name"`
		Token         string `json:"token"`
		ArtifactsFile *struct {
			Filename string `json:"filename"`
			Size     int64  `json:"size"`
		} `json:"artifacts_file"`
	} `json:"dependencies"`
	Variables []struct {
		Key, Value string
		Masked     *bool `json:"masked"`
	} `json:"variables"`
}

// takeJob requests a job and fails unless it gets a 201.
func takeJob(t *testing.T, s *Server, features map[string]bool) gotJob {
	t.Helper()
	r := requestJob(t, s, s.RunnerToken(), "", features)
	if r.status != http.StatusCreated {
		t.Fatalf("jobs/request = %v, want 201", r)
	}
	var j gotJob
	if err := json.Unmarshal(r.body, &j); err != nil {
		t.Fatalf("decode job: %v", err)
	}
	return j
}

func update(t *testing.T, s *Server, id int64, token string, body map[string]any) reply {
	t.Helper()
	body["token"] = token
	return call(t, s, "PUT", fmt.Sprintf("/jobs/%d", id), map[string]string{"Content-Type": "application/json", "JOB-TOKEN": token}, mustJSON(t, body))
}

func patch(t *testing.T, s *Server, id int64, token string, start int, data string) reply {
	t.Helper()
	return call(t, s, "PATCH", fmt.Sprintf("/jobs/%d/trace?debug_trace=false", id), map[string]string{
		"Content-Type": "text/plain", "JOB-TOKEN": token,
		"Content-Range": fmt.Sprintf("%d-%d", start, start+len(data)-1),
	}, []byte(data))
}

func checksum(b []byte) string { return fmt.Sprintf("crc32:%08x", crc32.ChecksumIEEE(b)) }

func finalBody(state string, trace []byte) map[string]any {
	return map[string]any{"state": state, "checksum": checksum(trace),
		"output": map[string]any{"checksum": checksum(trace), "bytesize": len(trace)}}
}

// onePipeline creates project acme/demo and a pipeline from jobs.
func onePipeline(t *testing.T, s *Server, jobs ...JobSpec) Pipeline {
	t.Helper()
	if _, err := s.CreateProject("acme/demo", map[string]string{"README.md": "hello\n", "src/main.sh": "echo hi\n"}, ProjectOptions{}); err != nil {
		t.Fatal(err)
	}
	pl, err := s.CreatePipeline("acme/demo", PipelineSpec{Jobs: jobs})
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

func waitState(t *testing.T, s *Server, id int64, st JobState) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := s.WaitJobState(ctx, id, st); err != nil {
		t.Fatal(err)
	}
}

func hasKey(h http.Header, k string) bool { _, ok := h[http.CanonicalHeaderKey(k)]; return ok }

func contains(b []byte, s string) bool { return strings.Contains(string(b), s) }
