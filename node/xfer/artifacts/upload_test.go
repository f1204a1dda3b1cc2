package artifacts

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vk-ci/vk/node/xfer/fileset"
	"github.com/vk-ci/vk/node/xfer/internal/treetest"
)

// spec: XFER-01, XFER-02, XFER-05, XFER-26
func TestUploadFormatsRoundTrip(t *testing.T) {
	files := map[string]string{
		"out/a.txt":      "alpha",
		"out/sub/b.txt":  "beta",
		"out/link":       "->a.txt",
		"report.xml":     "<testsuite/>",
		"other/skip.txt": "no",
	}
	tests := []struct {
		name         string
		spec         Spec
		wantFilename string
		wantQuery    map[string]string
		check        func(t *testing.T, body []byte)
	}{
		{
			name:         "zip",
			spec:         Spec{Name: "build", Paths: []string{"out"}, ExpireIn: "1 week"},
			wantFilename: "build.zip",
			wantQuery:    map[string]string{"artifact_format": "zip", "expire_in": "1 week"},
			check: func(t *testing.T, body []byte) {
				got := zipContents(t, body)
				want := map[string]string{"out/": "", "out/a.txt": "alpha", "out/link": "->a.txt", "out/sub/": "", "out/sub/b.txt": "beta"}
				if d := cmp.Diff(want, got); d != "" {
					t.Errorf("zip contents (-want +got):\n%s", d)
				}
			},
		},
		{
			name:         "gzip junit",
			spec:         Spec{Name: "junit", Paths: []string{"*.xml"}, Type: "junit", Format: "gzip"},
			wantFilename: "junit.gz",
			wantQuery:    map[string]string{"artifact_format": "gzip", "artifact_type": "junit"},
			check: func(t *testing.T, body []byte) {
				if d := cmp.Diff(map[string]string{"report.xml": "<testsuite/>"}, gzipMembers(t, body)); d != "" {
					t.Errorf("gzip members (-want +got):\n%s", d)
				}
			},
		},
		{
			name:         "raw dotenv",
			spec:         Spec{Name: "report.xml", Paths: []string{"report.xml"}, Type: "dotenv", Format: "raw"},
			wantFilename: "report.xml",
			wantQuery:    map[string]string{"artifact_format": "raw", "artifact_type": "dotenv"},
			check: func(t *testing.T, body []byte) {
				if string(body) != "<testsuite/>" {
					t.Errorf("raw body = %q, want the file", body)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			treetest.Write(t, dir, files)
			g := &fakeGitLab{}
			c, _ := newGitLab(t, g)
			var trace bytes.Buffer
			res := c.Upload(t.Context(), UploadRequest{JobID: 7, Token: jobToken, Dir: dir, Artifacts: []Spec{tc.spec}, Trace: &trace})
			if len(res) != 1 || res[0].Outcome != Uploaded || res[0].Status != 201 || res[0].ID != "42" {
				t.Fatalf("Upload = %+v, want one uploaded with id 42; trace:\n%s", res, trace.String())
			}
			if len(g.uploads) != 1 {
				t.Fatalf("server saw %d uploads, want 1", len(g.uploads))
			}
			u := g.uploads[0]
			if u.Filename != tc.wantFilename {
				t.Errorf("filename = %q, want %q", u.Filename, tc.wantFilename)
			}
			if d := cmp.Diff(tc.wantQuery, u.Query); d != "" {
				t.Errorf("query (-want +got):\n%s", d)
			}
			tc.check(t, u.Content)
			typ := tc.spec.Type
			if typ == "" {
				typ = "archive"
			}
			wantLine := `Uploading artifacts as "` + typ + `" to coordinator... 201 Created  id=7 responseStatus=201 Created token=64_jobto`
			if !strings.Contains(trace.String(), wantLine) {
				t.Errorf("trace lacks %q:\n%s", wantLine, trace.String())
			}
			if strings.Contains(trace.String(), jobToken) {
				t.Errorf("trace contains the full job token:\n%s", trace.String())
			}
		})
	}
}

// spec: XFER-02
func TestUploadExcludeAndUntracked(t *testing.T) {
	dir := t.TempDir()
	treetest.Write(t, dir, map[string]string{
		"tracked.go":           "package x",
		"bin/app":              "ELF",
		"bin/app.debug":        "DWARF",
		"bin/tmp/scratch":      "x",
		"logs/a/b/c.log":       "log",
		"logs/a/keep.txt":      "keep",
		"untracked/new.txt":    "new",
		"untracked/secret.key": "k",
	})
	gitInit(t, dir, "tracked.go")
	g := &fakeGitLab{}
	c, _ := newGitLab(t, g)
	res := c.Upload(t.Context(), UploadRequest{JobID: 1, Token: jobToken, Dir: dir, Artifacts: []Spec{
		{Name: "a", Paths: []string{"bin/", "logs/**/*.log"}, Exclude: []string{"bin/*.debug", "bin/tmp"}},
		{Name: "b", Untracked: true, Exclude: []string{"**/*.key", "bin", "logs"}},
	}})
	for _, r := range res {
		if r.Outcome != Uploaded {
			t.Fatalf("Upload = %+v", res)
		}
	}
	gotA := keys(zipContents(t, g.uploads[0].Content))
	wantA := []string{"bin/", "bin/app", "logs/", "logs/a/", "logs/a/b/", "logs/a/b/c.log"}
	if d := cmp.Diff(wantA, gotA); d != "" {
		t.Errorf("paths+exclude archive (-want +got):\n%s", d)
	}
	gotB := keys(zipContents(t, g.uploads[1].Content))
	wantB := []string{"untracked/", "untracked/new.txt"}
	if d := cmp.Diff(wantB, gotB); d != "" {
		t.Errorf("untracked archive (-want +got):\n%s", d)
	}
}

// spec: XFER-05
func TestUploadWhen(t *testing.T) {
	dir := t.TempDir()
	treetest.Write(t, dir, map[string]string{"f": "x"})
	specs := []Spec{
		{Name: "s", Paths: []string{"f"}},
		{Name: "f", Paths: []string{"f"}, When: "on_failure"},
		{Name: "a", Paths: []string{"f"}, When: "always"},
		{Name: "none", Paths: []string{"missing"}, When: "always"},
	}
	for _, failed := range []bool{false, true} {
		g := &fakeGitLab{}
		c, _ := newGitLab(t, g)
		var trace bytes.Buffer
		res := c.Upload(t.Context(), UploadRequest{JobID: 1, Token: jobToken, Dir: dir, JobFailed: failed, Artifacts: specs, Trace: &trace})
		var got []Outcome
		for _, r := range res {
			got = append(got, r.Outcome)
		}
		want := []Outcome{Uploaded, Skipped, Uploaded, Skipped}
		wantHdr := "Uploading artifacts..."
		if failed {
			want = []Outcome{Skipped, Uploaded, Uploaded, Skipped}
			wantHdr = "Uploading artifacts..."
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("failed=%v outcomes (-want +got):\n%s", failed, d)
		}
		if !strings.Contains(trace.String(), wantHdr) {
			t.Errorf("trace lacks %q", wantHdr)
		}
		if !strings.Contains(trace.String(), "missing: no matching files") {
			t.Errorf("trace lacks the no-match warning:\n%s", trace.String())
		}
	}
}

// spec: XFER-04, XFER-05, XFER-26
func TestUploadStatusOutcomes(t *testing.T) {
	tests := []struct {
		name     string
		content  string
		token    string
		want     Outcome
		status   int
		attempts int
		line     string
	}{
		{"created", "content", jobToken, Uploaded, 201, 1, "201 Created"},
		{"too large not retried", "too-large", jobToken, TooLarge, 413, 1, "too large archive"},
		{"forbidden", "content", "glcbt-64_wrongtoken-000000", Failed, 403, 1, "failed"},
		{"bad request", "bad-request", jobToken, Failed, 400, 1, "failed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			treetest.Write(t, dir, map[string]string{"f": tc.content})
			g := &fakeGitLab{}
			c, _ := newGitLab(t, g)
			var trace bytes.Buffer
			res := c.Upload(t.Context(), UploadRequest{JobID: 3, Token: tc.token, Dir: dir, Artifacts: []Spec{{Paths: []string{"f"}, Format: "raw"}}, Trace: &trace})
			if res[0].Outcome != tc.want || res[0].Status != tc.status {
				t.Errorf("outcome = %s %d, want %s %d (%v)", res[0].Outcome, res[0].Status, tc.want, tc.status, res[0].Err)
			}
			if g.attempts != tc.attempts {
				t.Errorf("attempts = %d, want %d", g.attempts, tc.attempts)
			}
			if got, want := errors.Is(Failures(res), ErrUploadFailed), tc.want != Uploaded; got != want {
				t.Errorf("Failures(%s) is ErrUploadFailed = %v, want %v", tc.want, got, want)
			}
			if res[0].Bytes != int64(len(tc.content)) {
				t.Errorf("Bytes = %d, want %d (raw body)", res[0].Bytes, len(tc.content))
			}
			if !strings.Contains(trace.String(), tc.line) {
				t.Errorf("trace lacks %q:\n%s", tc.line, trace.String())
			}
		})
	}
}

// handlerTransport serves requests in memory so synctest can run the retry
// waits in virtual time.
type handlerTransport struct{ h http.Handler }

func (h handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	h.h.ServeHTTP(rec, r)
	if r.Body != nil {
		r.Body.Close()
	}
	return rec.Result(), nil
}

// spec: XFER-04
func TestUpload503RetriedAfterRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		treetest.Write(t, dir, map[string]string{"f": "content"})
		g := &fakeGitLab{status: []int{503, 503}, retryAfter: "7"}
		c := &Client{BaseURL: "https://gitlab.example", Transport: handlerTransport{g}}
		start := time.Now()
		res := c.Upload(t.Context(), UploadRequest{JobID: 3, Token: jobToken, Dir: dir, Artifacts: []Spec{{Paths: []string{"f"}}}})
		if res[0].Outcome != Uploaded || g.attempts != 3 {
			t.Fatalf("outcome %s after %d attempts, want uploaded after 3 (%v)", res[0].Outcome, g.attempts, res[0].Err)
		}
		if got := time.Since(start); got != 14*time.Second {
			t.Errorf("waited %v, want 14s (2 × Retry-After 7)", got)
		}
	})
}

// spec: XFER-04
func TestUpload503Bounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		treetest.Write(t, dir, map[string]string{"f": "content"})
		g := &fakeGitLab{status: []int{503, 503, 503, 503, 503, 503, 503, 503}, retryAfter: "3600"}
		c := &Client{BaseURL: "https://gitlab.example", Transport: handlerTransport{g}}
		start := time.Now()
		res := c.Upload(t.Context(), UploadRequest{JobID: 3, Token: jobToken, Dir: dir, Artifacts: []Spec{{Paths: []string{"f"}}}})
		if res[0].Outcome != Failed || res[0].Status != 503 || g.attempts != maxAttempts503 {
			t.Fatalf("outcome %s %d after %d attempts, want failed 503 after %d", res[0].Outcome, res[0].Status, g.attempts, maxAttempts503)
		}
		if got, want := time.Since(start), time.Duration(maxAttempts503-1)*maxRetryAfter; got != want {
			t.Errorf("waited %v, want %v (Retry-After capped)", got, want)
		}
	})
}

// spec: XFER-03
func TestUploadRedirects(t *testing.T) {
	dir := t.TempDir()
	treetest.Write(t, dir, map[string]string{"f": "content"})

	t.Run("same origin keeps token", func(t *testing.T) {
		g := &fakeGitLab{}
		mux := http.NewServeMux()
		mux.HandleFunc("POST /api/v4/jobs/9/artifacts", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/upload/api/v4/jobs/9/artifacts?artifact_format=zip", http.StatusTemporaryRedirect)
		})
		mux.Handle("/upload/", http.StripPrefix("/upload", g))
		srv := httptest.NewServer(mux)
		defer srv.Close()
		c := &Client{BaseURL: srv.URL}
		res := c.Upload(t.Context(), UploadRequest{JobID: 9, Token: jobToken, Dir: dir, Artifacts: []Spec{{Paths: []string{"f"}}}})
		if res[0].Outcome != Uploaded || len(g.uploads) != 1 || g.uploads[0].Token != jobToken {
			t.Fatalf("outcome %s uploads %+v, want uploaded with the token after the 307", res[0].Outcome, g.uploads)
		}
		if got := zipContents(t, g.uploads[0].Content)["f"]; got != "content" {
			t.Errorf("redirected body lost the archive: f = %q", got)
		}
	})

	t.Run("cross origin drops token", func(t *testing.T) {
		var sawToken atomic.Value
		sawToken.Store("unset")
		storage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			sawToken.Store(r.Header.Get("JOB-TOKEN"))
			io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusCreated)
		}))
		defer storage.Close()
		gl := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, storage.URL+"/bucket/obj", http.StatusTemporaryRedirect)
		}))
		defer gl.Close()
		c := &Client{BaseURL: gl.URL}
		res := c.Upload(t.Context(), UploadRequest{JobID: 9, Token: jobToken, Dir: dir, Artifacts: []Spec{{Paths: []string{"f"}}}})
		if res[0].Outcome != Uploaded {
			t.Fatalf("outcome %s (%v), want uploaded", res[0].Outcome, res[0].Err)
		}
		if got := sawToken.Load().(string); got != "" {
			t.Errorf("other origin received JOB-TOKEN %q, want none", got)
		}
	})

	t.Run("https to http refused", func(t *testing.T) {
		var hit atomic.Int32
		plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hit.Add(1)
			w.WriteHeader(http.StatusCreated)
		}))
		defer plain.Close()
		tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, plain.URL+r.URL.Path, http.StatusTemporaryRedirect)
		}))
		defer tlsSrv.Close()
		c := &Client{BaseURL: tlsSrv.URL, Transport: tlsSrv.Client().Transport}
		var trace bytes.Buffer
		res := c.Upload(t.Context(), UploadRequest{JobID: 9, Token: jobToken, Dir: dir, Artifacts: []Spec{{Paths: []string{"f"}}}, Trace: &trace})
		if res[0].Outcome != Failed || !errors.Is(res[0].Err, ErrInsecureRedirect) {
			t.Fatalf("outcome %s (%v), want failed with ErrInsecureRedirect", res[0].Outcome, res[0].Err)
		}
		if hit.Load() != 0 {
			t.Errorf("the http target was contacted %d times", hit.Load())
		}
	})
}

// spec: XFER-25
func TestUploadRefusesUnsupportedFormat(t *testing.T) {
	dir := t.TempDir()
	treetest.Write(t, dir, map[string]string{"f": "x", "g": "y"})
	g := &fakeGitLab{}
	c, _ := newGitLab(t, g)
	res := c.Upload(context.Background(), UploadRequest{JobID: 1, Token: jobToken, Dir: dir, Artifacts: []Spec{
		{Paths: []string{"f"}, Format: "tarzstd"},
		{Paths: []string{"f", "g"}, Format: "raw"},
	}})
	if !errors.Is(res[0].Err, ErrUnsupportedFormat) || !errors.Is(res[1].Err, ErrRawNeedsOneFile) {
		t.Errorf("errors = %v, %v; want ErrUnsupportedFormat, ErrRawNeedsOneFile", res[0].Err, res[1].Err)
	}
	if g.attempts != 0 {
		t.Errorf("server saw %d requests, want 0", g.attempts)
	}
}

// spec: XFER-25
func TestArchiveCap(t *testing.T) {
	dir := t.TempDir()
	treetest.Write(t, dir, map[string]string{"big": strings.Repeat("incompressible? no, but over the cap ", 100)})
	g := &fakeGitLab{}
	c, _ := newGitLab(t, g)
	c.maxArchive = 512
	var trace bytes.Buffer
	res := c.Upload(t.Context(), UploadRequest{JobID: 1, Token: jobToken, Dir: dir, Artifacts: []Spec{{Paths: []string{"big"}, Format: "raw"}}, Trace: &trace})
	if res[0].Outcome != TooLarge || !errors.Is(res[0].Err, fileset.ErrTooLarge) {
		t.Fatalf("outcome %s (%v), want too_large/ErrTooLarge", res[0].Outcome, res[0].Err)
	}
	if len(g.uploads) != 0 {
		t.Errorf("server stored %d uploads", len(g.uploads))
	}
	if !strings.Contains(trace.String(), "too large archive") {
		t.Errorf("trace:\n%s", trace.String())
	}

	g.deps = map[int64]depArtifacts{1: {token: depToken, zip: makeZip(t, zipEntry{"a", 0o644, strings.Repeat("x", 4096)})}}
	err := c.Download(t.Context(), DownloadRequest{Dir: t.TempDir(), TempDir: t.TempDir(), Dependencies: []Dependency{{ID: 1, Token: depToken}}})
	if !errors.Is(err, fileset.ErrTooLarge) {
		t.Errorf("download over the cap = %v, want ErrTooLarge", err)
	}
}
