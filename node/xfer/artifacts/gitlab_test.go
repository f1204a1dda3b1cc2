package artifacts

import (
	"archive/zip"
	"bufio"
	"bytes"
	"compress/gzip"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Tokens of the fake GitLab (long enough to print a short form).
const (
	jobToken = "glcbt-64_jobtoken-0123456789"
	depToken = "glcbt-64_deptoken-9876543210"
)

// upload is one POST the fake GitLab received.
type upload struct {
	Token    string
	Query    map[string]string
	Filename string
	Content  []byte
	Host     string
}

// fakeGitLab is a GitLab-like artifacts endpoint. It answers like
// gitlab-runner's checkTestArtifactsUploadHandlerContent: content "too-large"
// → 413, "service-unavailable" → 503, "bad-request" → 400, a wrong token → 403,
// else 201 {"id":…}.
type fakeGitLab struct {
	mu       sync.Mutex
	uploads  []upload
	attempts int
	// status, when set, overrides the answer for the first len(status) attempts.
	status []int
	// retryAfter is sent with overridden 503s.
	retryAfter string
	// deps maps dependency id → token and zip bytes.
	deps map[int64]depArtifacts
}

type depArtifacts struct {
	token string
	zip   []byte
}

func (g *fakeGitLab) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	// api/v4/jobs/:id/artifacts
	if len(parts) != 5 || parts[0] != "api" || parts[1] != "v4" || parts[2] != "jobs" || parts[4] != "artifacts" {
		http.NotFound(w, r)
		return
	}
	id, _ := strconv.ParseInt(parts[3], 10, 64)
	switch r.Method {
	case http.MethodPost:
		g.serveUpload(w, r)
	case http.MethodGet:
		d, ok := g.deps[id]
		switch {
		case !ok:
			http.NotFound(w, r)
		case r.Header.Get("JOB-TOKEN") != d.token:
			http.Error(w, `{"message":"403 Forbidden"}`, http.StatusForbidden)
		default:
			w.Write(d.zip)
		}
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

func (g *fakeGitLab) serveUpload(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	g.attempts++
	n := g.attempts
	g.mu.Unlock()
	if n <= len(g.status) {
		io.Copy(io.Discard, r.Body)
		if g.retryAfter != "" {
			w.Header().Set("Retry-After", g.retryAfter)
		}
		w.WriteHeader(g.status[n-1])
		return
	}
	if r.Header.Get("JOB-TOKEN") != jobToken {
		w.WriteHeader(http.StatusForbidden)
		return
	}
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	mr := multipart.NewReader(r.Body, params["boundary"])
	p, err := mr.NextPart()
	if err != nil || p.FormName() != "file" {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(p)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if _, err := mr.NextPart(); err != io.EOF {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	switch string(body) {
	case "too-large":
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		return
	case "service-unavailable":
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	case "bad-request":
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	q := map[string]string{}
	for k := range r.URL.Query() {
		q[k] = r.URL.Query().Get(k)
	}
	g.mu.Lock()
	g.uploads = append(g.uploads, upload{Token: r.Header.Get("JOB-TOKEN"), Query: q, Filename: p.FileName(), Content: body, Host: r.Host})
	g.mu.Unlock()
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, `{"id":42}`)
}

// zipContents lists name → content of a zip (dirs as "name/" → "").
func zipContents(t *testing.T, b []byte) map[string]string {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatalf("zip: %v", err)
	}
	out := map[string]string{}
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		c, _ := io.ReadAll(rc)
		rc.Close()
		if f.Mode()&os.ModeSymlink != 0 {
			out[f.Name] = "->" + string(c)
		} else {
			out[f.Name] = string(c)
		}
	}
	return out
}

// gzipMembers lists header name → content of concatenated gzip members.
func gzipMembers(t *testing.T, b []byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	br := bufio.NewReader(bytes.NewReader(b))
	zr, err := gzip.NewReader(br)
	if err != nil {
		t.Fatal(err)
	}
	for {
		zr.Multistream(false)
		c, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		out[zr.Name] = string(c)
		if err := zr.Reset(br); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func keys(m map[string]string) []string {
	var k []string
	for x := range m {
		k = append(k, x)
	}
	sort.Strings(k)
	return k
}

func gitInit(t *testing.T, dir string, tracked ...string) {
	t.Helper()
	run := func(args ...string) {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	run("init", "-q")
	run(append([]string{"add", "--"}, tracked...)...)
	run("-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "-m", "init")
}

func newGitLab(t *testing.T, g *fakeGitLab) (*Client, *httptest.Server) {
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	return &Client{BaseURL: srv.URL}, srv
}
