package microvm

import (
	"archive/zip"
	"bytes"
	"context"
	"io"
	"io/fs"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/vk-ci/vk/internal/need"
	"github.com/vk-ci/vk/node/exec"
	"github.com/vk-ci/vk/node/exec/process"
	"github.com/vk-ci/vk/node/stage"
	"github.com/vk-ci/vk/node/trace"
	"github.com/vk-ci/vk/node/xfer"
	"github.com/vk-ci/vk/proto/job"
)

const gitHTTPBackend = "/usr/lib/git-core/git-http-backend"

// gitRepo makes a bare repository with one commit holding README and
// serves it with git http-backend; it returns the clone URL and the
// commit.
func gitRepo(t *testing.T) (string, string) {
	t.Helper()
	if _, err := os.Stat(gitHTTPBackend); err != nil {
		need.Missingf(t, "git http-backend not installed (apt-get install -y git): %v", err)
	}
	root, work := t.TempDir(), t.TempDir()
	git := func(dir string, args ...string) string {
		t.Helper()
		cmd := osexec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@e", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@e")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git(work, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(work, "README"), []byte("checked out\n"), 0o644)
	os.WriteFile(filepath.Join(work, "build.sh"), []byte("echo building\n"), 0o755)
	git(work, "add", ".")
	git(work, "commit", "-q", "-m", "one")
	sha := git(work, "rev-parse", "HEAD")
	git(root, "clone", "-q", "--bare", work, "p.git")
	srv := httptest.NewServer(&cgi.Handler{Path: gitHTTPBackend, Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}})
	t.Cleanup(srv.Close)
	return srv.URL + "/p.git", sha
}

// artifactSink stands in for GitLab's artifact upload, keeping each
// uploaded archive's files.
type artifactSink struct {
	mu    sync.Mutex
	files map[string]string
}

func (s *artifactSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f, _, err := r.FormFile("file")
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	b, _ := io.ReadAll(f)
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, zf := range zr.File {
		rc, _ := zf.Open()
		body, _ := io.ReadAll(rc)
		rc.Close()
		s.files[zf.Name] = string(body)
	}
	w.WriteHeader(http.StatusCreated)
}

// stepOutput is the step_script stage of a trace: from its title to the
// next stage's.
func stepOutput(tr string) string {
	const title = "\x1b[0K\x1b[36;1m"
	i := strings.Index(tr, title+`Executing "step_script"`)
	if i < 0 {
		return ""
	}
	rest := tr[i+len(title):]
	if k := strings.Index(rest, title); k >= 0 {
		rest = rest[:k]
	}
	return rest
}

// A job with a git checkout, a script and an artifact runs through the
// stage runner on the microvm backend: the checkout goes into the guest
// and the artifact comes out of it through the agent, and the step's
// output, the exit code and the uploaded artifact are those of the same
// job on the process backend; the get_sources hooks run in the guest
// around the checkout.
// spec: STAGE-04, STAGE-06, XFER-24
func TestStageRunnerJobInVM(t *testing.T) {
	repo, sha := gitRepo(t)
	var pulled []string // what upload_artifacts read on the last run
	runJob := func(t *testing.T, name string, ex exec.Executor) (stage.Result, string, map[string]string) {
		sink := &artifactSink{files: map[string]string{}}
		gl := httptest.NewServer(sink)
		defer gl.Close()
		xf := &treeLister{Transfers: xfer.Stage{T: xfer.New(xfer.Config{TempDir: t.TempDir()})}, seen: &pulled}
		r, err := stage.New(stage.Config{Executor: ex, ExecutorName: name, Transfers: xf})
		if err != nil {
			t.Fatal(err)
		}
		j := &job.CiJob{
			Job:       job.JobInfo{ID: 7, ProjectID: 3, ProjectPath: "group/p"},
			Token:     "job-token-for-the-vm-test",
			ServerURL: gl.URL,
			Sources:   job.Sources{RepoURL: repo, Ref: "main", SHA: sha},
			Variables: []job.Variable{{Key: "FF_TIMESTAMPS", Value: "false"}, {Key: "GREETING", Value: "hello $CI_JOB_STATUS"}},
			Steps: []job.Step{{Name: job.StepScript, When: "on_success", Script: []string{
				"cat README", "sh build.sh", "echo to-stderr >&2", "echo $GREETING",
				"mkdir -p out && echo built > out/result.txt", "ls", "exit 3"}}},
			Hooks: []job.Hook{
				{Name: job.HookPreGetSources, Script: []string{"test -e README || echo pre-hook-before-the-checkout"}},
				{Name: job.HookPostGetSources, Script: []string{"echo post-hook-saw-$(cat README)"}},
			},
			Artifacts:   []job.Artifact{{Name: "out", Paths: []string{"out"}, When: "always", ArtifactType: "archive", ArtifactFormat: "zip"}},
			TimeoutSecs: 600,
		}
		var out bytes.Buffer
		res, err := r.Run(t.Context(), stage.Spec{ID: "stage-" + name, Job: j, Out: &out})
		if err != nil {
			t.Fatal(err)
		}
		return res, out.String(), sink.files
	}
	pex, err := process.New(process.Config{Root: t.TempDir(), NoCgroups: true})
	if err != nil {
		t.Fatal(err)
	}
	wantRes, wantTrace, wantFiles := runJob(t, "process", pex)
	if wantRes.Failure != stage.FailureScript || wantRes.ExitCode != 3 || wantFiles["out/result.txt"] != "built\n" {
		t.Fatalf("process backend: %+v, artifact %v\n%s", wantRes, wantFiles, wantTrace)
	}
	res, tr, files := runJob(t, "microvm", newExecutor(t))
	if res.Failure != wantRes.Failure || res.ExitCode != wantRes.ExitCode {
		t.Errorf("microvm: failure %q exit %d, want %q %d\n%s", res.Failure, res.ExitCode, wantRes.Failure, wantRes.ExitCode, tr)
	}
	// stdout and stderr are two streams: where a stderr line lands among
	// the stdout lines is not fixed on either backend.
	split := func(tr string) (string, int) {
		out := stepOutput(tr)
		return strings.ReplaceAll(out, "to-stderr\n", ""), strings.Count(out, "to-stderr\n")
	}
	got, gotErr := split(tr)
	want, wantErr := split(wantTrace)
	if got != want || want == "" || gotErr != 1 || wantErr != 1 {
		t.Errorf("step output in the VM:\n%q\nwant (process backend):\n%q", got, want)
	}
	// The hooks ran in the guest around the checkout: before it, and
	// after it was in the guest's project directory (STAGE-06).
	pre, co, post := strings.Index(tr, "\npre-hook-before-the-checkout\n"), strings.Index(tr, "Checking out"), strings.Index(tr, "\npost-hook-saw-checked out\n")
	if pre < 0 || co < pre || post < co {
		t.Errorf("hooks around the checkout: pre at %d, checkout at %d, post at %d\n%s", pre, co, post, tr)
	}
	if files["out/result.txt"] != "built\n" {
		t.Errorf("artifact from the VM: %v\n%s", files, tr)
	}
	// Only what the artifact's paths can select came out of the guest:
	// not the checkout (README, build.sh, .git).
	if !slices.Equal(pulled, []string{"out", "out/result.txt"}) {
		t.Errorf("the tree pulled out of the VM for upload_artifacts holds %q, want only out/", pulled)
	}
	if !strings.Contains(tr, "Using the microvm executor") || !strings.HasSuffix(strings.TrimSpace(tr), "Job failed: exit status 3\x1b[0;m") {
		t.Errorf("trace:\n%s", tr)
	}
	if res.Usage.CPU <= 0 || res.Usage.PeakMemBytes <= 0 {
		t.Errorf("usage %+v: want the VM's CPU and peak memory", res.Usage)
	}
}

// treeLister is the stage's transfers, listing the tree upload_artifacts
// reads into *seen.
type treeLister struct {
	stage.Transfers
	seen *[]string
}

func (l *treeLister) UploadArtifacts(ctx context.Context, j *job.CiJob, dir string, failed bool, tr *trace.Trace) ([]stage.ArtifactOutcome, error) {
	*l.seen = nil
	filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if rel, _ := filepath.Rel(dir, p); err == nil && rel != "." {
			*l.seen = append(*l.seen, filepath.ToSlash(rel))
		}
		return err
	})
	return l.Transfers.UploadArtifacts(ctx, j, dir, failed, tr)
}
