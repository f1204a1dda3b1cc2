package cache

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/vk-ci/vk/node/xfer/internal/treetest"
)

// gitlabRunnerZip is a cache.zip as gitlab-runner writes it, holding a file
// the job would also cache.
func gitlabRunnerZip(t *testing.T) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	w, err := zw.Create("vendor/v")
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("from gitlab-runner's cache.zip"))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// zipNames finds files named cache.zip (or *.zip) under dir.
func zipNames(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(d.Name(), ".zip") {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// TestColdStartNeverSharesCacheZip: a project new to the fleet finds no
// artifact in the registry, gets a miss with the miss line in its trace
// and runs cold, although gitlab-runner's cache.zip for the same key sits
// both where gitlab-runner's shell executor keeps it on disk and behind
// the registry's host at gitlab-runner's object path. The store only
// ever speaks the distribution API on the project's ci-cache repository,
// and what it writes is an OCI artifact with a tar+zstd layer, never a
// cache.zip.
//
// spec: XFER-12
func TestColdStartNeverSharesCacheZip(t *testing.T) {
	e := newEnv(t)
	zipBytes := gitlabRunnerZip(t)
	var objectAsked atomic.Int32
	e.proxy.inject = func(w http.ResponseWriter, r *http.Request) bool {
		// gitlab-runner's S3/GCS object path, served to whoever asks.
		if strings.Contains(r.URL.Path, "cache.zip") || strings.Contains(r.URL.Path, "/project/42/") {
			objectAsked.Add(1)
			w.Header().Set("Content-Type", "application/zip")
			w.Write(zipBytes)
			return true
		}
		return false
	}

	// gitlab-runner's local cache beside the builds dir:
	// <builds>/../cache/<namespace>/<project>/<key>/cache.zip.
	root := t.TempDir()
	build := filepath.Join(root, "builds", "group", "project")
	runnerZip := filepath.Join(root, "cache", "group", "project", vendorSpec.Key, "cache.zip")
	for _, p := range []string{runnerZip, filepath.Join(build, "cache.zip")} {
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, zipBytes, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	treetest.Write(t, build, map[string]string{"src/main.go": "package main"})

	var trace bytes.Buffer
	res := e.store.Restore(t.Context(), Request{Scope: scope, Caches: []Spec{vendorSpec}, Dir: build, Trace: &trace})
	if res[0].Outcome != Miss || res[0].Err != nil {
		t.Fatalf("Restore on a new project = %+v, want a miss\n%s", res[0], trace.String())
	}
	for _, line := range []string{"Checking cache for deps-protected...", "WARNING: deps-protected: not found in the cache registry"} {
		if !strings.Contains(trace.String(), line) {
			t.Errorf("trace lacks the miss line %q:\n%s", line, trace.String())
		}
	}
	if _, err := os.Stat(filepath.Join(build, "vendor")); !os.IsNotExist(err) {
		t.Errorf("the job did not run cold: vendor/ exists (%v)", err)
	}
	restoreReqs := e.proxy.reset()

	// The job runs and saves its cache: an OCI artifact, not a zip.
	treetest.Write(t, build, map[string]string{"vendor/v": "built by the fleet"})
	if res := e.store.Archive(t.Context(), Request{Scope: scope, Caches: []Spec{vendorSpec}, Dir: build, Trace: &trace}); res[0].Outcome != Saved {
		t.Fatalf("Archive = %+v\n%s", res[0], trace.String())
	}
	archiveReqs := e.proxy.reset()

	repoName := "ci-cache/gitlab.example.com-8443/sub/path/42"
	for _, l := range append(restoreReqs, archiveReqs...) {
		method, path, _ := strings.Cut(l, " ")
		if path != "/v2/" && !strings.HasPrefix(path, "/v2/"+repoName+"/") {
			t.Errorf("the cache store asked %s %s: outside the distribution API on %s", method, path, repoName)
		}
		if strings.Contains(strings.ToLower(path), ".zip") {
			t.Errorf("the cache store asked for a zip: %s %s", method, path)
		}
	}
	if n := objectAsked.Load(); n != 0 {
		t.Errorf("gitlab-runner's cache object was requested %d times", n)
	}
	if len(archiveReqs) == 0 {
		t.Fatal("the save reached nothing")
	}

	repo, _ := remote.NewRepository(e.store.Registry + "/" + repoName)
	repo.PlainHTTP = true
	mdesc, err := repo.Resolve(t.Context(), Tag(vendorSpec.Key, true))
	if err != nil {
		t.Fatalf("saved cache not at %s: %v", repoName, err)
	}
	mb, err := content.FetchAll(t.Context(), repo, mdesc)
	if err != nil {
		t.Fatal(err)
	}
	var man ocispec.Manifest
	if err := json.Unmarshal(mb, &man); err != nil {
		t.Fatal(err)
	}
	if man.ArtifactType != ArtifactType || len(man.Layers) != 1 || man.Layers[0].MediaType != LayerMediaType {
		t.Errorf("saved manifest %s, want one %s layer", mb, LayerMediaType)
	}
	e.proxy.reset()

	// The next job of the project restores the fleet's cache, never the
	// cache.zip's content.
	next := t.TempDir()
	trace.Reset()
	res = e.store.Restore(t.Context(), Request{Scope: scope, Caches: []Spec{vendorSpec}, Dir: next, Trace: &trace})
	if res[0].Outcome != Restored {
		t.Fatalf("second Restore = %+v\n%s", res[0], trace.String())
	}
	if b, _ := os.ReadFile(filepath.Join(next, "vendor/v")); string(b) != "built by the fleet" {
		t.Errorf("restored %q, want the fleet's own cache", b)
	}

	// No cache.zip was written anywhere the store touches, and
	// gitlab-runner's stay as they were.
	want := []string{filepath.Join(build, "cache.zip"), runnerZip}
	got := append(zipNames(t, root), zipNames(t, e.store.TempDir)...)
	got = append(got, zipNames(t, next)...)
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("zip files after the jobs: %q, want only gitlab-runner's %q", got, want)
	}
	for _, p := range want {
		if b, _ := os.ReadFile(p); !bytes.Equal(b, zipBytes) {
			t.Errorf("%s changed", p)
		}
	}
}
