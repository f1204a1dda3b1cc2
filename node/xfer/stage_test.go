package xfer

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vk-ci/vk/node/trace"
	"github.com/vk-ci/vk/node/xfer/artifacts"
	"github.com/vk-ci/vk/proto/job"
)

// spec: XFER-04, XFER-05, FAIL-06
func TestStageUploadOutcomes(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.URL.Query().Get("artifact_type") == "junit" {
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a"), 0o644)
	j := &job.CiJob{Job: job.JobInfo{ID: 1}, Token: "job-token-0123456789", ServerURL: srv.URL, Artifacts: []job.Artifact{
		{Name: "ok", Paths: []string{"a.txt"}},
		{Name: "rep", Paths: []string{"a.txt"}, ArtifactType: "junit", ArtifactFormat: "gzip"},
		{Name: "onfail", Paths: []string{"a.txt"}, When: "on_failure"},
	}}
	var out bytes.Buffer
	tr := trace.New(&out, trace.Options{})
	got, err := Stage{T: New(Config{})}.UploadArtifacts(t.Context(), j, dir, false, tr)
	tr.Close()
	if !errors.Is(err, artifacts.ErrUploadFailed) {
		t.Errorf("err = %v, want ErrUploadFailed", err)
	}
	if len(got) != 2 || !got[0].Uploaded || got[0].Bytes == 0 || got[1].Uploaded || !strings.HasPrefix(got[1].Err, "too_large") {
		t.Errorf("outcomes = %+v, want ok uploaded, rep too_large, onfail absent", got)
	}
	if !strings.Contains(out.String(), `Uploading artifacts as "junit" to coordinator... too large archive`) {
		t.Errorf("trace:\n%s", out.String())
	}
}
