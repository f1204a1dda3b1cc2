package gitlabfake

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// ProjectOptions tunes [Server.CreateProject]. The zero value is a project
// with default branch "main", full clones and protected "main".
type ProjectOptions struct {
	// DefaultBranch is the branch the files are committed to; "" means "main".
	DefaultBranch string
	// Depth is git_info.depth (GIT_DEPTH); 0 means a full clone.
	Depth int
	// ProtectedBranches lists protected refs; nil means the default branch.
	ProtectedBranches []string
	// Variables are project CI/CD variables, sent before pipeline and job ones.
	Variables []Variable
}

// Project identifies a created project.
type Project struct {
	// ID is CI_PROJECT_ID.
	ID int64
	// Path is "namespace/name".
	Path string
	// CloneURL is the http URL the fake serves it at (needs job-token
	// auth); "" when the project was created before Start.
	CloneURL string
	// Ref is the default branch and SHA its head commit.
	Ref, SHA string
}

type project struct {
	id            int64
	path          string
	dir           string // bare repository
	defaultBranch string
	depth         int
	protected     []string
	variables     []Variable
}

func (p *project) protectedRef(ref string) bool { return slices.Contains(p.protected, ref) }

var projectPathRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*(/[a-z0-9][a-z0-9_.-]*)+$`)

// CreateProject creates project path ("namespace/name", lower case) as a
// bare repository holding one commit of files (relative path → content),
// made by the real git binary with a fixed author and date, so the same
// files give the same SHA.
func (s *Server) CreateProject(path string, files map[string]string, opts ProjectOptions) (Project, error) {
	if err := s.init(); err != nil {
		return Project{}, err
	}
	if !projectPathRE.MatchString(path) || strings.Contains(path, "..") || strings.HasSuffix(path, ".git") {
		return Project{}, fmt.Errorf("%w: project path %q", ErrInvalid, path)
	}
	branch := opts.DefaultBranch
	if branch == "" {
		branch = "main"
	}
	s.mu.Lock()
	if _, dup := s.projects[path]; dup {
		s.mu.Unlock()
		return Project{}, fmt.Errorf("%w: project %q exists", ErrInvalid, path)
	}
	s.mu.Unlock()

	work, err := os.MkdirTemp("", "gitlabfake-work-")
	if err != nil {
		return Project{}, fmt.Errorf("gitlabfake: %w", err)
	}
	defer os.RemoveAll(work)
	for name, content := range files {
		clean := filepath.Clean(name)
		if filepath.IsAbs(clean) || strings.HasPrefix(clean, "..") {
			return Project{}, fmt.Errorf("%w: file path %q", ErrInvalid, name)
		}
		full := filepath.Join(work, clean)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return Project{}, fmt.Errorf("gitlabfake: %w", err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			return Project{}, fmt.Errorf("gitlabfake: %w", err)
		}
	}
	bare := filepath.Join(s.dataDir, "repos", filepath.FromSlash(path)+".git")
	steps := [][]string{
		{"-C", work, "init", "-q", "-b", branch},
		{"-C", work, "add", "-A"},
		{"-C", work, "commit", "-q", "--allow-empty", "-m", "Initial commit"},
		{"clone", "-q", "--bare", work, bare},
	}
	for _, args := range steps {
		if err := s.gitIn("", args...); err != nil {
			return Project{}, err
		}
	}
	protected := opts.ProtectedBranches
	if protected == nil {
		protected = []string{branch}
	}
	s.mu.Lock()
	s.nextProjectID++
	p := &project{id: s.nextProjectID, path: path, dir: bare, defaultBranch: branch, depth: opts.Depth, protected: protected, variables: opts.Variables}
	s.projects[path] = p
	base := s.url
	s.mu.Unlock()
	sha, err := s.revParse(p, "refs/heads/"+branch)
	if err != nil {
		return Project{}, err
	}
	return Project{ID: p.id, Path: path, CloneURL: base + "/" + path + ".git", Ref: branch, SHA: sha}, nil
}

// gitEnv pins identity and dates so commits are reproducible.
var gitEnv = []string{
	"GIT_AUTHOR_NAME=gitlabfake", "GIT_AUTHOR_EMAIL=fake@gitlab.invalid",
	"GIT_COMMITTER_NAME=gitlabfake", "GIT_COMMITTER_EMAIL=fake@gitlab.invalid",
	"GIT_AUTHOR_DATE=2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z",
	"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0",
}

func (s *Server) gitIn(dir string, args ...string) error {
	_, err := s.gitOut(dir, args...)
	return err
}

func (s *Server) gitOut(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	if dir != "" {
		cmd.Dir = dir
	}
	cmd.Env = append(os.Environ(), gitEnv...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%w: git %s: %v: %s", ErrGit, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

// git runs git in a bare repository directory.
func (s *Server) git(dir string, args ...string) error { return s.gitIn(dir, args...) }

func (s *Server) revParse(p *project, ref string) (string, error) {
	return s.gitOut(p.dir, "rev-parse", "--verify", ref+"^{commit}")
}

func (s *Server) findGitBackend() error {
	if s.gitBackend != "" {
		return nil
	}
	dir, err := s.gitOut("", "--exec-path")
	if err != nil {
		return err
	}
	be := filepath.Join(dir, "git-http-backend")
	if _, err := os.Stat(be); err != nil {
		return fmt.Errorf("%w: git-http-backend: %v", ErrGit, err)
	}
	s.gitBackend = be
	return nil
}

// handleGit serves <namespace>/<project>.git/... through the real git
// http-backend (fetch only). Like GitLab it asks for HTTP basic
// credentials (401 with WWW-Authenticate) and accepts user
// gitlab-ci-token with the token of a running job of that project.
func (s *Server) handleGit(w http.ResponseWriter, r *http.Request) {
	path, _, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), ".git/")
	s.mu.Lock()
	p := s.projects[path]
	s.mu.Unlock()
	if !ok || p == nil {
		http.NotFound(w, r)
		return
	}
	if strings.Contains(r.URL.RawQuery, "git-receive-pack") || strings.HasSuffix(r.URL.Path, "/git-receive-pack") {
		writeMessage(w, http.StatusForbidden, "403 Forbidden - pushes with a job token are not allowed")
		return
	}
	user, pass, hasAuth := r.BasicAuth()
	authorized := false
	if hasAuth && user == "gitlab-ci-token" {
		s.mu.Lock()
		for _, j := range s.jobs {
			if j.token == pass && j.pipeline.project == p && j.executing() {
				authorized = true
				break
			}
		}
		s.mu.Unlock()
	}
	if !authorized {
		w.Header().Set("WWW-Authenticate", `Basic realm="GitLab"`)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusUnauthorized)
		w.Write([]byte("HTTP Basic: Access denied\n"))
		return
	}
	h := &cgi.Handler{
		Path: s.gitBackend,
		Root: "/",
		Env: append([]string{
			"GIT_PROJECT_ROOT=" + filepath.Join(s.dataDir, "repos"),
			"GIT_HTTP_EXPORT_ALL=1",
		}, gitEnv...),
		Stderr: logWriter{s},
	}
	h.ServeHTTP(w, r)
}

type logWriter struct{ s *Server }

func (l logWriter) Write(p []byte) (int, error) {
	l.s.log.Warn("git http-backend", "stderr", strings.TrimSpace(string(p)))
	return len(p), nil
}
