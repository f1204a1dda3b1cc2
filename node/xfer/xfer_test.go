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
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vk-ci/vk/internal/deptest"
	"github.com/vk-ci/vk/internal/registrytest"
	"github.com/vk-ci/vk/node/xfer/artifacts"
	"github.com/vk-ci/vk/node/xfer/cache"
	"github.com/vk-ci/vk/node/xfer/gitsrc"
	"github.com/vk-ci/vk/proto/job"
)

// TestDeps keeps the node's transfers off the hub, scheduler and relay
// (STYLE import DAG).
func TestDeps(t *testing.T) {
	deptest.Forbid(t, "github.com/vk-ci/vk/node/xfer/...",
		"github.com/vk-ci/vk/hub", "github.com/vk-ci/vk/hub/", "github.com/vk-ci/vk/sched", "github.com/vk-ci/vk/sched/",
		"github.com/vk-ci/vk/relay", "github.com/vk-ci/vk/relay/")
}

func vars(kv ...string) []job.Variable {
	var out []job.Variable
	for i := 0; i < len(kv); i += 2 {
		out = append(out, job.Variable{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

// spec: STAGE-02
func TestGitOptions(t *testing.T) {
	base := job.CiJob{Token: "tok", Sources: job.Sources{RepoURL: "https://g/p.git", SHA: "abc", Depth: 20, AllowFetch: true, CorrelationID: "cid"}}
	tests := []struct {
		name    string
		vars    []job.Variable
		noFetch bool
		check   func(o gitsrc.Options) bool
		err     error
	}{
		{"defaults", nil, false, func(o gitsrc.Options) bool {
			return o.Strategy == "" && o.Depth == 20 && !o.NoCheckout && o.CorrelationID == "cid"
		}, nil},
		{"Gitaly correlation ID off", vars("FF_USE_GITALY_CORRELATION_ID", "false"), false, func(o gitsrc.Options) bool { return o.CorrelationID == "" }, nil},
		{"unparseable flag keeps the default", vars("FF_USE_GITALY_CORRELATION_ID", "nope"), false, func(o gitsrc.Options) bool { return o.CorrelationID == "cid" }, nil},
		{"fetch not allowed becomes clone", vars("GIT_STRATEGY", "fetch"), true, func(o gitsrc.Options) bool { return o.Strategy == gitsrc.Clone }, nil},
		{"none kept", vars("GIT_STRATEGY", "NONE"), true, func(o gitsrc.Options) bool { return o.Strategy == gitsrc.None }, nil},
		{"depth var wins, last duplicate wins", vars("GIT_DEPTH", "5", "GIT_DEPTH", "3"), false, func(o gitsrc.Options) bool { return o.Depth == 3 }, nil},
		{"checkout false", vars("GIT_CHECKOUT", "false"), false, func(o gitsrc.Options) bool { return o.NoCheckout }, nil},
		{"submodules and clean", vars("GIT_SUBMODULE_STRATEGY", "recursive", "GIT_CLEAN_FLAGS", "-ffdx -e vendor/"), false,
			func(o gitsrc.Options) bool {
				return o.Submodules == gitsrc.SubmodulesRecursive && o.CleanFlags == "-ffdx -e vendor/"
			}, nil},
		{"bad depth", vars("GIT_DEPTH", "deep"), false, nil, gitsrc.ErrOptions},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := base
			j.Variables = tc.vars
			j.Sources.AllowFetch = !tc.noFetch
			o, err := GitOptions(&j, "/b", "")
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if tc.check != nil && !tc.check(o) {
				t.Errorf("options %+v fail the check", o)
			}
		})
	}
}

// miniGitLab accepts uploads and serves one dependency.
type miniGitLab struct {
	mu      sync.Mutex
	uploads int
	gets    []string
	dep     []byte
}

func (g *miniGitLab) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case r.Method == http.MethodPost && r.Header.Get("JOB-TOKEN") == "job-token-0123456789":
		io.Copy(io.Discard, r.Body)
		g.uploads++
		w.WriteHeader(http.StatusCreated)
	case r.Method == http.MethodGet && r.URL.Path == "/api/v4/jobs/5/artifacts" && r.Header.Get("JOB-TOKEN") == "dep-token-0123456789":
		g.gets = append(g.gets, r.URL.Path)
		w.Write(g.dep)
	default:
		g.gets = append(g.gets, r.Method+" "+r.URL.Path)
		w.WriteHeader(http.StatusForbidden)
	}
}

// spec: XFER-01, XFER-06, XFER-07, AUTH-04
func TestJobTransfers(t *testing.T) {
	reg := registrytest.New(t)
	// A dependency zip made by our own writer from a tree.
	depSrc := t.TempDir()
	os.WriteFile(filepath.Join(depSrc, "dep.txt"), []byte("from dep"), 0o644)
	var zipBuf bytes.Buffer
	if err := writeZipOf(t, &zipBuf, depSrc); err != nil {
		t.Fatal(err)
	}
	gl := &miniGitLab{dep: zipBuf.Bytes()}
	srv := httptest.NewServer(gl)
	defer srv.Close()

	prot := true
	j := &job.CiJob{
		Job:       job.JobInfo{ID: 77, ProjectID: 9},
		Token:     "job-token-0123456789",
		ServerURL: srv.URL,
		Sources:   job.Sources{Protected: &prot},
		Artifacts: []job.Artifact{{Name: "out", Paths: []string{"out"}, When: "on_success", ArtifactFormat: "zip"}},
		Caches:    []job.Cache{{Key: "k-protected", Paths: []string{"vendor"}}},
		Dependencies: []job.Dependency{
			{ID: 5, Token: "dep-token-0123456789", Name: "build", ArtifactsFile: &job.ArtifactsFile{Filename: "a.zip", Size: 1}},
			{ID: 6, Token: "x", Name: "no-artifacts"},
		},
	}
	tr := New(Config{Registry: reg.Addr, RegistryPlainHTTP: true, TempDir: t.TempDir()})
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "vendor"), 0o755)
	os.WriteFile(filepath.Join(dir, "vendor/v"), []byte("cached"), 0o644)
	os.MkdirAll(filepath.Join(dir, "out"), 0o755)
	os.WriteFile(filepath.Join(dir, "out/bin"), []byte("bin"), 0o644)
	var trace bytes.Buffer

	if err := tr.DownloadArtifacts(t.Context(), j, dir, &trace); err != nil {
		t.Fatalf("DownloadArtifacts: %v\n%s", err, trace.String())
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "dep.txt")); string(b) != "from dep" {
		t.Errorf("dependency not extracted: %q", b)
	}
	if d := cmp.Diff([]string{"/api/v4/jobs/5/artifacts"}, gl.gets); d != "" {
		t.Errorf("GitLab GETs (-want +got):\n%s", d)
	}
	if res := tr.ArchiveCache(t.Context(), j, nil, dir, false, &trace); res[0].Outcome != cache.Saved {
		t.Fatalf("ArchiveCache = %+v\n%s", res, trace.String())
	}
	res, err := tr.UploadArtifacts(t.Context(), j, dir, false, &trace)
	if err != nil || len(res) != 1 || res[0].Outcome != artifacts.Uploaded {
		t.Fatalf("UploadArtifacts = %+v, %v\n%s", res, err, trace.String())
	}
	dir2 := t.TempDir()
	if res := tr.RestoreCache(t.Context(), j, nil, dir2, &trace); res[0].Outcome != cache.Restored {
		t.Fatalf("RestoreCache = %+v\n%s", res, trace.String())
	}
	if b, _ := os.ReadFile(filepath.Join(dir2, "vendor/v")); string(b) != "cached" {
		t.Errorf("restored %q", b)
	}
	// An unprotected job of the same project misses the protected cache.
	unprot := *j
	unprot.Sources.Protected = nil
	if res := tr.RestoreCache(t.Context(), &unprot, nil, t.TempDir(), nil); res[0].Outcome != cache.Miss {
		t.Errorf("unprotected restore = %+v, want miss", res)
	}
	for _, tok := range []string{j.Token, "dep-token-0123456789"} {
		if strings.Contains(trace.String(), tok) {
			t.Errorf("trace holds token %q", tok)
		}
	}
	// Without a registry the caches are skipped with a warning.
	var tr2 bytes.Buffer
	if res := New(Config{}).RestoreCache(t.Context(), j, nil, t.TempDir(), &tr2); res[0].Outcome != cache.Skipped || !strings.Contains(tr2.String(), "WARNING") {
		t.Errorf("no-registry restore = %+v\n%s", res, tr2.String())
	}
}
