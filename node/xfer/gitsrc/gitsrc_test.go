package gitsrc

import (
	"bytes"
	"context"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/vk-ci/vk/internal/need"
)

const (
	testToken = "glcbt-64_s3cr3t-job-token-for-tests"
	backend   = "/usr/lib/git-core/git-http-backend"
)

// gitServer serves bare repositories below root with git http-backend
// behind basic auth gitlab-ci-token:<token>, like GitLab. On every request
// it checks no process's command line holds the token.
type gitServer struct {
	t    *testing.T
	root string
	srv  *httptest.Server

	mu          sync.Mutex
	requests    int
	gitalyIDs   []string // each request's X-Gitaly-Correlation-ID
	leakedInCmd []string
	sawRemote   bool // a git-remote-http child was alive during a scan
}

func newGitServer(t *testing.T) *gitServer { return newGitServerTLS(t, false) }

func newGitServerTLS(t *testing.T, useTLS bool) *gitServer {
	t.Helper()
	if _, err := os.Stat(backend); err != nil {
		need.Missingf(t, "git http-backend not installed (apt-get install -y git): %v", err)
	}
	s := &gitServer{t: t, root: t.TempDir()}
	h := &cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + s.root, "GIT_HTTP_EXPORT_ALL=1"}}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.scanCmdlines()
		s.mu.Lock()
		s.requests++
		s.gitalyIDs = append(s.gitalyIDs, r.Header.Get("X-Gitaly-Correlation-ID"))
		s.mu.Unlock()
		u, p, ok := r.BasicAuth()
		if !ok || u != "gitlab-ci-token" || p != testToken {
			w.Header().Set("WWW-Authenticate", `Basic realm="GitLab"`)
			http.Error(w, "HTTP Basic: Access denied", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	if useTLS {
		s.srv.StartTLS()
	} else {
		s.srv.Start()
	}
	t.Cleanup(s.srv.Close)
	return s
}

// scanCmdlines records every /proc/*/cmdline that contains the token.
func (s *gitServer) scanCmdlines() {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if bytes.Contains(b, []byte("remote-http")) {
			s.mu.Lock()
			s.sawRemote = true
			s.mu.Unlock()
		}
		if bytes.Contains(b, []byte(testToken)) {
			s.mu.Lock()
			s.leakedInCmd = append(s.leakedInCmd, string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
			s.mu.Unlock()
		}
	}
}

// URL returns the clone URL of repository name, with GitLab's credential
// user info in it (GetSources must drop it).
func (s *gitServer) URL(name string) string {
	return strings.Replace(s.srv.URL, "://", "://gitlab-ci-token:"+testToken+"@", 1) + "/" + name + ".git"
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@e", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@e",
		"GIT_AUTHOR_DATE=2026-01-02T03:04:05Z", "GIT_COMMITTER_DATE=2026-01-02T03:04:05Z")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// makeRepo creates bare repo <name>.git on the server from a work tree with
// files, commits them on main and returns the commit sha.
func (s *gitServer) makeRepo(name string, files map[string]string) (work, sha string) {
	t := s.t
	work = t.TempDir()
	git(t, work, "init", "-q", "-b", "main")
	for p, c := range files {
		os.MkdirAll(filepath.Join(work, filepath.Dir(p)), 0o755)
		os.WriteFile(filepath.Join(work, p), []byte(c), 0o644)
	}
	git(t, work, "add", "-A")
	git(t, work, "commit", "-q", "-m", "c1")
	git(t, s.root, "clone", "-q", "--bare", work, name+".git")
	return work, git(t, work, "rev-parse", "HEAD")
}

// push commits a change in work and pushes it to the bare repo.
func (s *gitServer) push(work, name, file, content string) string {
	t := s.t
	os.WriteFile(filepath.Join(work, file), []byte(content), 0o644)
	git(t, work, "add", "-A")
	git(t, work, "commit", "-q", "-m", "more")
	git(t, work, "push", "-q", filepath.Join(s.root, name+".git"), "main")
	return git(t, work, "rev-parse", "HEAD")
}

func opts(s *gitServer, name, sha, dir string) Options {
	return Options{RepoURL: s.URL(name), Token: testToken, Ref: "main", SHA: sha, Dir: dir,
		Refspecs: []string{"+refs/heads/main:refs/remotes/origin/main"}}
}

// spec: STAGE-02, STAGE-03, AUTH-03
func TestCloneAndFetchReuse(t *testing.T) {
	s := newGitServer(t)
	work, _ := s.makeRepo("group/app", map[string]string{"README": "zero", "src/main.go": "package main"})
	sha1 := s.push(work, "group/app", "README", "one")
	dir := filepath.Join(t.TempDir(), "build")
	var trace bytes.Buffer
	o := opts(s, "group/app", sha1, dir)
	o.Depth = 1
	if err := GetSources(t.Context(), o, &trace); err != nil {
		t.Fatalf("GetSources: %v\n%s", err, trace.String())
	}
	for _, line := range []string{
		"Fetching changes with git depth set to 1...",
		"Initialized empty Git repository in " + dir + "/.git/",
		"Created fresh repository.",
		"Checking out " + sha1[:8] + " as detached HEAD (ref is main)...",
		"Skipping Git submodules setup",
	} {
		if !strings.Contains(trace.String(), line) {
			t.Errorf("trace lacks %q:\n%s", line, trace.String())
		}
	}
	if got := git(t, dir, "rev-parse", "HEAD"); got != sha1 {
		t.Errorf("HEAD = %s, want %s", got, sha1)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "src/main.go")); string(b) != "package main" {
		t.Errorf("src/main.go = %q", b)
	}
	if got := git(t, dir, "rev-parse", "--is-shallow-repository"); got != "true" {
		t.Errorf("depth 1 fetch of 2 commits is not shallow")
	}
	cfg, _ := os.ReadFile(filepath.Join(dir, ".git", "config"))
	if bytes.Contains(cfg, []byte(testToken)) || bytes.Contains(cfg, []byte("credential")) {
		t.Errorf(".git/config holds credentials:\n%s", cfg)
	}

	// A second job of the same project fetches into the same checkout.
	os.WriteFile(filepath.Join(dir, ".git", "vk-marker"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(dir, "untracked.tmp"), []byte("x"), 0o644)
	sha2 := s.push(work, "group/app", "README", "two")
	trace.Reset()
	o.SHA = sha2
	if err := GetSources(t.Context(), o, &trace); err != nil {
		t.Fatalf("second GetSources: %v\n%s", err, trace.String())
	}
	if !strings.Contains(trace.String(), "Reinitialized existing Git repository") || strings.Contains(trace.String(), "Created fresh repository.") {
		t.Errorf("fetch did not reuse the checkout:\n%s", trace.String())
	}
	if _, err := os.Stat(filepath.Join(dir, ".git", "vk-marker")); err != nil {
		t.Errorf("fetch replaced .git: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "untracked.tmp")); err == nil {
		t.Errorf("git clean -ffdx did not remove an untracked file")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "README")); string(b) != "two" {
		t.Errorf("README = %q, want two", b)
	}

	// clone starts over.
	trace.Reset()
	o.Strategy = Clone
	if err := GetSources(t.Context(), o, &trace); err != nil {
		t.Fatalf("clone: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".git", "vk-marker")); err == nil {
		t.Errorf("clone kept the old .git")
	}
	if !strings.Contains(trace.String(), "Created fresh repository.") {
		t.Errorf("clone trace:\n%s", trace.String())
	}

	if strings.Contains(trace.String(), testToken) {
		t.Errorf("trace holds the token")
	}
	if len(s.leakedInCmd) > 0 {
		t.Errorf("token on process command lines: %q", s.leakedInCmd)
	}
	if !s.sawRemote {
		t.Errorf("the command-line scan never saw git's remote helper: the check proved nothing")
	}
}

// spec: STAGE-03
func TestWrongTokenRefused(t *testing.T) {
	s := newGitServer(t)
	_, sha := s.makeRepo("p", map[string]string{"f": "x"})
	o := opts(s, "p", sha, filepath.Join(t.TempDir(), "b"))
	o.Token = "glcbt-64_wrong-token-0000000000"
	var trace bytes.Buffer
	err := GetSources(t.Context(), o, &trace)
	if !errors.Is(err, ErrGit) {
		t.Fatalf("GetSources with a wrong token = %v, want ErrGit", err)
	}
	if strings.Contains(trace.String(), o.Token) || strings.Contains(trace.String(), testToken) {
		t.Errorf("trace holds a token:\n%s", trace.String())
	}
}

// spec: STAGE-02
func TestSubmodules(t *testing.T) {
	s := newGitServer(t)
	_, _ = s.makeRepo("g/inner", map[string]string{"inner.txt": "inner"})
	midWork, _ := s.makeRepo("g/mid", map[string]string{"mid.txt": "mid"})
	git(t, midWork, "-c", "protocol.file.allow=always", "submodule", "add", "-q", filepath.Join(s.root, "g/inner.git"), "inner")
	git(t, midWork, "config", "-f", ".gitmodules", "submodule.inner.url", "../inner.git")
	git(t, midWork, "commit", "-q", "-am", "sub")
	git(t, midWork, "push", "-q", filepath.Join(s.root, "g/mid.git"), "main")
	topWork, _ := s.makeRepo("g/top", map[string]string{"top.txt": "top"})
	git(t, topWork, "-c", "protocol.file.allow=always", "submodule", "add", "-q", filepath.Join(s.root, "g/mid.git"), "mid")
	git(t, topWork, "config", "-f", ".gitmodules", "submodule.mid.url", "../mid.git")
	git(t, topWork, "commit", "-q", "-am", "sub")
	git(t, topWork, "push", "-q", filepath.Join(s.root, "g/top.git"), "main")
	sha := git(t, topWork, "rev-parse", "HEAD")

	tests := []struct {
		strategy  SubmoduleStrategy
		line      string
		mid, deep bool
	}{
		{SubmodulesNone, "Skipping Git submodules setup", false, false},
		{SubmodulesNormal, "Updating/initializing submodules...", true, false},
		{SubmodulesRecursive, "Updating/initializing submodules recursively...", true, true},
	}
	for _, tc := range tests {
		t.Run(string(tc.strategy), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "b")
			o := opts(s, "g/top", sha, dir)
			o.Submodules = tc.strategy
			var trace bytes.Buffer
			if err := GetSources(t.Context(), o, &trace); err != nil {
				t.Fatalf("GetSources: %v\n%s", err, trace.String())
			}
			if !strings.Contains(trace.String(), tc.line) {
				t.Errorf("trace lacks %q:\n%s", tc.line, trace.String())
			}
			_, errMid := os.Stat(filepath.Join(dir, "mid/mid.txt"))
			_, errDeep := os.Stat(filepath.Join(dir, "mid/inner/inner.txt"))
			if (errMid == nil) != tc.mid || (errDeep == nil) != tc.deep {
				t.Errorf("mid present=%v deep present=%v, want %v %v", errMid == nil, errDeep == nil, tc.mid, tc.deep)
			}
			if strings.Contains(trace.String(), testToken) {
				t.Errorf("trace holds the token")
			}
		})
	}
	if len(s.leakedInCmd) > 0 {
		t.Errorf("token on process command lines: %q", s.leakedInCmd)
	}
}

// spec: STAGE-02
func TestStrategiesAndFlags(t *testing.T) {
	s := newGitServer(t)
	_, sha := s.makeRepo("p", map[string]string{"f": "x"})
	t.Run("none keeps dir", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "keep"), nil, 0o644)
		before := s.requests
		var trace bytes.Buffer
		o := opts(s, "p", sha, dir)
		o.Strategy = None
		if err := GetSources(t.Context(), o, &trace); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(dir, "keep")); err != nil || s.requests != before {
			t.Errorf("none touched the dir or the server (requests %d→%d)", before, s.requests)
		}
		for _, l := range []string{"Skipping Git repository setup", "Skipping Git checkout", "Skipping Git submodules setup"} {
			if !strings.Contains(trace.String(), l) {
				t.Errorf("trace lacks %q", l)
			}
		}
	})
	t.Run("empty clears dir", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "old"), nil, 0o644)
		o := opts(s, "p", sha, dir)
		o.Strategy = Empty
		if err := GetSources(t.Context(), o, nil); err != nil {
			t.Fatal(err)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("empty left %d entries", len(ents))
		}
	})
	t.Run("no checkout", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "b")
		o := opts(s, "p", sha, dir)
		o.NoCheckout = true
		var trace bytes.Buffer
		if err := GetSources(t.Context(), o, &trace); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(dir, "f")); err == nil || !strings.Contains(trace.String(), "Skipping Git checkout") {
			t.Errorf("GIT_CHECKOUT=false checked out files")
		}
	})
	t.Run("clean flags none keeps untracked", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "b")
		o := opts(s, "p", sha, dir)
		if err := GetSources(t.Context(), o, nil); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, "junk"), nil, 0o644)
		o.CleanFlags = "none"
		if err := GetSources(t.Context(), o, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(dir, "junk")); err != nil {
			t.Errorf("GIT_CLEAN_FLAGS=none still cleaned")
		}
	})
	t.Run("hooks order", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "b")
		o := opts(s, "p", sha, dir)
		var order []string
		o.PreHook = func(context.Context) error {
			_, err := os.Stat(filepath.Join(dir, "f"))
			order = append(order, "pre:"+map[bool]string{true: "absent", false: "present"}[err != nil])
			return nil
		}
		o.PostHook = func(context.Context) error {
			_, err := os.Stat(filepath.Join(dir, "f"))
			order = append(order, "post:"+map[bool]string{true: "absent", false: "present"}[err != nil])
			return nil
		}
		if err := GetSources(t.Context(), o, nil); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(order, ","); got != "pre:absent,post:present" {
			t.Errorf("hooks = %s", got)
		}
		boom := errors.New("boom")
		o.PreHook = func(context.Context) error { return boom }
		if err := GetSources(t.Context(), o, nil); !errors.Is(err, boom) {
			t.Errorf("failing pre hook: %v", err)
		}
	})
	t.Run("bad options", func(t *testing.T) {
		for _, o := range []Options{
			{Strategy: "weird", Dir: "/x", SHA: sha},
			{Dir: "relative", SHA: sha, RepoURL: "http://h/p.git"},
			{Dir: "/x", SHA: "nothex!!", RepoURL: "http://h/p.git"},
		} {
			if err := GetSources(t.Context(), o, nil); !errors.Is(err, ErrOptions) {
				t.Errorf("GetSources(%+v) = %v, want ErrOptions", o, err)
			}
		}
	})
}

// spec: STAGE-02, STAGE-03
func TestServerCA(t *testing.T) {
	s := newGitServerTLS(t, true)
	_, sha := s.makeRepo("p", map[string]string{"f": "x"})
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.srv.Certificate().Raw})

	o := opts(s, "p", sha, filepath.Join(t.TempDir(), "b"))
	var trace bytes.Buffer
	if err := GetSources(t.Context(), o, &trace); !errors.Is(err, ErrGit) {
		t.Fatalf("clone without the CA = %v, want ErrGit (untrusted certificate)", err)
	}
	o.CAPEM = caPEM
	trace.Reset()
	if err := GetSources(t.Context(), o, &trace); err != nil {
		t.Fatalf("clone with the CA: %v\n%s", err, trace.String())
	}
	if b, _ := os.ReadFile(filepath.Join(o.Dir, "f")); string(b) != "x" {
		t.Errorf("f = %q", b)
	}
	if strings.Contains(trace.String(), testToken) {
		t.Errorf("trace holds the token")
	}
}

// spec: STAGE-03
func TestReusedCheckoutHooksNeverRun(t *testing.T) {
	s := newGitServer(t)
	_, sha := s.makeRepo("p", map[string]string{"f": "x"})
	dir := filepath.Join(t.TempDir(), "b")
	o := opts(s, "p", sha, dir)
	if err := GetSources(t.Context(), o, nil); err != nil {
		t.Fatal(err)
	}
	// The previous job plants hooks that would leak the environment.
	leak := filepath.Join(t.TempDir(), "leak")
	hook := "#!/bin/sh\nenv > " + leak + "\n"
	for _, h := range []string{"post-checkout", "reference-transaction", "pre-auto-gc", "post-merge"} {
		os.WriteFile(filepath.Join(dir, ".git", "hooks", h), []byte(hook), 0o755)
	}
	git(t, dir, "config", "core.hooksPath", filepath.Join(dir, ".git", "hooks"))
	if err := GetSources(t.Context(), o, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(leak); err == nil {
		t.Fatal("a planted hook ran during the next job's get_sources")
	}
}

// spec: STAGE-02
func TestSHA256Repository(t *testing.T) {
	s := newGitServer(t)
	work := t.TempDir()
	git(t, work, "init", "-q", "-b", "main", "--object-format=sha256")
	os.WriteFile(filepath.Join(work, "f"), []byte("x"), 0o644)
	git(t, work, "add", "-A")
	git(t, work, "commit", "-q", "-m", "c1")
	git(t, s.root, "clone", "-q", "--bare", work, "p256.git")
	sha := git(t, work, "rev-parse", "HEAD")
	if len(sha) != 64 {
		t.Fatalf("sha %q is not sha256", sha)
	}
	o := opts(s, "p256", sha, filepath.Join(t.TempDir(), "b"))
	o.ObjectFormat = "sha256"
	var trace bytes.Buffer
	if err := GetSources(t.Context(), o, &trace); err != nil {
		t.Fatalf("GetSources: %v\n%s", err, trace.String())
	}
	if got := git(t, o.Dir, "rev-parse", "HEAD"); got != sha {
		t.Errorf("HEAD = %s, want %s", got, sha)
	}
}

// The job request's correlation ID goes to Gitaly with every git request
// and is printed before the fetch, as gitlab-runner's get_sources does;
// without one, no header and no line.
//
// spec: STAGE-02, GL-03
func TestGitalyCorrelationID(t *testing.T) {
	for _, id := range []string{"0123456789abcdef0123456789abcdef", ""} {
		s := newGitServer(t)
		work, _ := s.makeRepo("group/app", map[string]string{"README": "zero"})
		sha := s.push(work, "group/app", "README", "one")
		var trace bytes.Buffer
		o := opts(s, "group/app", sha, filepath.Join(t.TempDir(), "build"))
		o.CorrelationID = id
		if err := GetSources(t.Context(), o, &trace); err != nil {
			t.Fatalf("GetSources: %v\n%s", err, trace.String())
		}
		line := notice("Gitaly correlation ID: " + id)
		i, j := strings.Index(trace.String(), line), strings.Index(trace.String(), "Fetching changes")
		if id != "" && (i < 0 || i > j) {
			t.Errorf("trace lacks %q before the fetch:\n%s", line, trace.String())
		}
		if id == "" && strings.Contains(trace.String(), "Gitaly correlation ID") {
			t.Errorf("a correlation ID line without an ID:\n%s", trace.String())
		}
		s.mu.Lock()
		for _, got := range s.gitalyIDs {
			if got != id {
				t.Errorf("request sent X-Gitaly-Correlation-ID %q, want %q", got, id)
			}
		}
		if len(s.gitalyIDs) == 0 {
			t.Error("no git request reached the server")
		}
		s.mu.Unlock()
	}
}
