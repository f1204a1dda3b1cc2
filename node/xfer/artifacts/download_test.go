package artifacts

import (
	"archive/zip"
	"bytes"
	"errors"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vk-ci/vk/node/xfer/fileset"
	"github.com/vk-ci/vk/node/xfer/internal/treetest"
)

type zipEntry struct {
	name string
	mode fs.FileMode
	body string
}

func makeZip(t testing.TB, entries ...zipEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate}
		h.SetMode(e.mode)
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(e.body))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// spec: XFER-06, AUTH-04, XFER-26
func TestDownloadDependencies(t *testing.T) {
	g := &fakeGitLab{deps: map[int64]depArtifacts{
		10: {token: depToken, zip: makeZip(t, zipEntry{"dist/", fs.ModeDir | 0o755, ""}, zipEntry{"dist/app", 0o755, "bin"})},
		11: {token: jobToken, zip: makeZip(t, zipEntry{"report.txt", 0o644, "ok"})},
	}}
	c, _ := newGitLab(t, g)
	dir := t.TempDir()
	var trace bytes.Buffer
	err := c.Download(t.Context(), DownloadRequest{Dir: dir, TempDir: t.TempDir(), Trace: &trace, Dependencies: []Dependency{
		{ID: 10, Token: depToken, Name: "build"},
		{ID: 11, Token: jobToken, Name: "test"},
	}})
	if err != nil {
		t.Fatalf("Download: %v\n%s", err, trace.String())
	}
	want := map[string]string{"dist/app": "bin", "report.txt": "ok"}
	if d := cmp.Diff(want, treetest.Read(t, dir)); d != "" {
		t.Errorf("build dir (-want +got):\n%s", d)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "dist/app")); fi.Mode().Perm() != 0o755 {
		t.Errorf("dist/app mode = %v, want 0755", fi.Mode())
	}
	for _, line := range []string{"Downloading artifacts for build (10)...", "Downloading artifacts from coordinator... ok  id=10 responseStatus=200 OK token=64_depto"} {
		if !strings.Contains(trace.String(), line) {
			t.Errorf("trace lacks %q:\n%s", line, trace.String())
		}
	}
}

// spec: XFER-06, AUTH-04, FAIL-06, XFER-26
func TestDownloadFailures(t *testing.T) {
	g := &fakeGitLab{deps: map[int64]depArtifacts{
		10: {token: depToken, zip: makeZip(t, zipEntry{"a", 0o644, "x"})},
		12: {token: depToken, zip: []byte("not a zip")},
		13: {token: depToken, zip: makeZip(t, zipEntry{"../escape", 0o644, "x"})},
	}}
	c, _ := newGitLab(t, g)
	tests := []struct {
		name string
		dep  Dependency
		want error
	}{
		// The job's own token must not open another job's artifacts.
		{"other token forbidden", Dependency{ID: 10, Token: jobToken}, ErrForbidden},
		{"no artifacts", Dependency{ID: 99, Token: depToken}, ErrNotFound},
		{"corrupt zip", Dependency{ID: 12, Token: depToken}, zip.ErrFormat},
		{"traversal refused", Dependency{ID: 13, Token: depToken}, fileset.ErrUnsafePath},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			dir := filepath.Join(parent, "build")
			os.Mkdir(dir, 0o755)
			err := c.Download(t.Context(), DownloadRequest{Dir: dir, TempDir: t.TempDir(), Dependencies: []Dependency{tc.dep}})
			if !errors.Is(err, tc.want) {
				t.Errorf("Download = %v, want %v", err, tc.want)
			}
			if _, err := os.Stat(filepath.Join(parent, "escape")); err == nil {
				t.Errorf("file written outside the build dir")
			}
		})
	}
}

// spec: XFER-03, XFER-06, AUTH-04
func TestDownloadRedirectToObjectStorage(t *testing.T) {
	z := makeZip(t, zipEntry{"obj.txt", 0o644, "from storage"})
	var storageToken atomic.Value
	storage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		storageToken.Store(r.Header.Get("JOB-TOKEN"))
		w.Write(z)
	}))
	defer storage.Close()
	gl := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("JOB-TOKEN") != depToken {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		http.Redirect(w, r, storage.URL+"/bucket/artifacts.zip?X-Amz-Signature=abc", http.StatusFound)
	}))
	defer gl.Close()
	c := &Client{BaseURL: gl.URL}
	dir := t.TempDir()
	if err := c.Download(t.Context(), DownloadRequest{Dir: dir, TempDir: t.TempDir(), Dependencies: []Dependency{{ID: 4, Token: depToken, Name: "b"}}}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "obj.txt")); string(b) != "from storage" {
		t.Errorf("obj.txt = %q", b)
	}
	if got, _ := storageToken.Load().(string); got != "" {
		t.Errorf("object storage received JOB-TOKEN %q", got)
	}

	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(z) }))
	defer plain.Close()
	tlsGL := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, plain.URL+"/a.zip", http.StatusFound)
	}))
	defer tlsGL.Close()
	c = &Client{BaseURL: tlsGL.URL, Transport: tlsGL.Client().Transport}
	err := c.Download(t.Context(), DownloadRequest{Dir: t.TempDir(), TempDir: t.TempDir(), Dependencies: []Dependency{{ID: 4, Token: depToken}}})
	if !errors.Is(err, ErrInsecureRedirect) {
		t.Errorf("https→http download = %v, want ErrInsecureRedirect", err)
	}
}
