package stage

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/need"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/node/exec"
	"github.com/vk-ci/vk/node/exec/process"
	"github.com/vk-ci/vk/proto/job"
)

var update = flag.Bool("update", false, "rewrite the golden traces in testdata/")

// fixtures is shared/fixtures/gitlab beside the checkout.
const fixtures = "../../../shared/fixtures/gitlab"

var testStart = time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)

// fixtureJob translates a GitLab job response fixture into a CiJob by hand,
// with only the fields the stage runner reads (the relay's translator is
// tested elsewhere).
func fixtureJob(t *testing.T, name string) *job.CiJob {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtures, name))
	if err != nil {
		need.Missingf(t, "fixture %s (../shared/fixtures beside the checkout): %v", name, err)
	}
	var r struct {
		ID        int64  `json:"id"`
		Token     string `json:"token"`
		Variables []struct {
			Key, Value           string
			Public, File, Masked bool
			Raw                  bool
		} `json:"variables"`
		Steps []struct {
			Name         string   `json:"name"`
			Script       []string `json:"script"`
			Timeout      int64    `json:"timeout"`
			When         string   `json:"when"`
			AllowFailure bool     `json:"allow_failure"`
		} `json:"steps"`
		RunnerInfo struct {
			Timeout int64 `json:"timeout"`
		} `json:"runner_info"`
		JobInfo struct {
			Name            string `json:"name"`
			Stage           string `json:"stage"`
			ProjectID       int64  `json:"project_id"`
			ProjectFullPath string `json:"project_full_path"`
		} `json:"job_info"`
		GitInfo struct {
			RepoURL string `json:"repo_url"`
			Ref     string `json:"ref"`
			Sha     string `json:"sha"`
		} `json:"git_info"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	j := &job.CiJob{
		Job:         job.JobInfo{ID: r.ID, Name: r.JobInfo.Name, Stage: r.JobInfo.Stage, ProjectID: r.JobInfo.ProjectID, ProjectPath: r.JobInfo.ProjectFullPath},
		Token:       r.Token,
		Sources:     job.Sources{RepoURL: r.GitInfo.RepoURL, Ref: r.GitInfo.Ref, SHA: r.GitInfo.Sha},
		TimeoutSecs: r.RunnerInfo.Timeout,
		Trace:       job.TraceSettings{Sections: true, LimitBytes: job.DefaultTraceLimitBytes},
		ServerURL:   "https://gitlab.example.com",
	}
	if j.TimeoutSecs <= 0 {
		j.TimeoutSecs = 7200
	}
	for _, v := range r.Variables {
		j.Variables = append(j.Variables, job.Variable{Key: v.Key, Value: v.Value, Public: v.Public, File: v.File, Masked: v.Masked, Raw: v.Raw})
	}
	for _, s := range r.Steps {
		when := s.When
		if when == "" {
			when = "on_success"
		}
		j.Steps = append(j.Steps, job.Step{Name: s.Name, Script: s.Script, TimeoutSecs: s.Timeout, When: when, AllowFailure: s.AllowFailure})
	}
	// Every case skips the checkout: transfers are node/xfer's (tested there).
	j.Variables = append(j.Variables, job.Variable{Key: "GIT_STRATEGY", Value: "none", Public: true})
	return j
}

// watchBuf collects the trace and signals once it contains a string.
type watchBuf struct {
	mu   sync.Mutex
	b    bytes.Buffer
	want string
	seen chan struct{}
}

func newWatchBuf(want string) *watchBuf { return &watchBuf{want: want, seen: make(chan struct{})} }

func (w *watchBuf) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b.Write(p)
	if w.want != "" && bytes.Contains(w.b.Bytes(), []byte(w.want)) {
		select {
		case <-w.seen:
		default:
			close(w.seen)
		}
	}
	return len(p), nil
}

func (w *watchBuf) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

type harness struct {
	runner *Runner
	clk    *clock.Fake
	root   string
	t      *testing.T
}

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	return newHarnessUser(t, cfg, nil)
}

// newHarnessUser is newHarness with jobs run as user (nil: the test's own).
func newHarnessUser(t *testing.T, cfg Config, user *process.User) *harness {
	t.Helper()
	root := filepath.Join(t.TempDir(), "jobs")
	parent := fmt.Sprintf("vk-test-%d", os.Getpid())
	ex, err := process.New(process.Config{Root: root, CgroupParent: parent, User: user, Log: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeCgroupParent(parent) })
	clk := clock.NewFake(testStart)
	cfg.Executor, cfg.Clock, cfg.Log = ex, clk, testlog.New(t)
	if cfg.Version == "" {
		cfg.Version = "1.2.3"
	}
	if cfg.NodeName == "" {
		cfg.NodeName, cfg.SystemID = "node-a", "s_0123456789ab"
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{runner: r, clk: clk, root: root, t: t}
}

// waitExec waits until a process of one of the harness's jobs (its
// working directory under the harness root) runs the command line argv,
// as /proc shows it once the process has exec'd. It fails the test after
// a minute.
func (h *harness) waitExec(argv ...string) {
	t := h.t
	t.Helper()
	want := strings.Join(argv, "\x00") + "\x00"
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(time.Minute)
	for {
		procs, _ := filepath.Glob("/proc/[0-9]*")
		for _, p := range procs {
			cmdline, err := os.ReadFile(filepath.Join(p, "cmdline"))
			if err != nil || string(cmdline) != want {
				continue
			}
			if cwd, err := os.Readlink(filepath.Join(p, "cwd")); err == nil && strings.HasPrefix(cwd, h.root+"/") {
				return
			}
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("no job process ran %q within a minute", argv)
		}
	}
}

// removeCgroupParent removes the test process's cgroup parent directories
// once no job uses them (rmdir fails harmlessly while one does).
func removeCgroupParent(parent string) {
	dirs, _ := filepath.Glob(filepath.Join(process.DefaultCgroupRoot, "*", parent))
	for _, d := range dirs {
		_ = os.Remove(d)
	}
}

var (
	hostnameRe   = regexp.MustCompile(`Running on [^\n]*\.\.\.`)
	terminatedRe = regexp.MustCompile(`(?m)^\S+ 01E Terminated\n`)
	awkTimeRe    = regexp.MustCompile(`(section_(?:start|end)):\d+:section_`)
	dateRe       = regexp.MustCompile(`01O \w{3} \w{3} [ 0-9]\d \d\d:\d\d:\d\d \w+ \d{4}\n`)
)

// normalise makes a trace host-independent: the hostname and the job root.
func (h *harness) normalise(s string) string {
	s = hostnameRe.ReplaceAllString(s, "Running on HOST...")
	return strings.ReplaceAll(s, h.root, "$ROOT")
}

// sortWorkEntries orders the job's stdout and stderr entries inside each
// run of consecutive stream-01 entries (O before E, each stream's order
// kept): the order between two pipes is the scheduler's, not ours.
func sortWorkEntries(s string) string {
	lines := strings.SplitAfter(s, "\n")
	for i := 0; i < len(lines); {
		if !isWork(lines[i]) {
			i++
			continue
		}
		j := i
		for j < len(lines) && isWork(lines[j]) {
			j++
		}
		sort.SliceStable(lines[i:j], func(a, b int) bool { return lines[i+a][30] == 'O' && lines[i+b][30] == 'E' })
		i = j
	}
	return strings.Join(lines, "")
}

func isWork(l string) bool { return len(l) > 31 && l[28:30] == "01" }

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	file := filepath.Join("testdata", name+".trace")
	if *update {
		if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("trace differs from %s (-want +got):\n%s", file, diff)
	}
}

type goldenCase struct {
	name    string
	fixture string
	edit    func(j *job.CiJob)
	// act, when set, runs once the trace contains waitFor.
	waitFor string
	act     func(h *harness, hd *Handle, j *job.CiJob)
	sortIO  bool
	// normal, when set, further normalises the trace (host-specific output).
	normal func(string) string

	failure  Failure
	exitCode int
	check    func(t *testing.T, res Result, trace string)
}

func setScript(j *job.CiJob, script ...string) { j.Steps[0].Script = script }

func addVar(j *job.CiJob, v job.Variable) { j.Variables = append(j.Variables, v) }

// spec: STAGE-01, STAGE-05, TRACE-01, TRACE-02, TRACE-03, TRACE-04, TRACE-08, NODE-10, FAIL-01, FAIL-02, FAIL-03, FAIL-09
func TestGoldenTraces(t *testing.T) {
	cases := []goldenCase{
		{name: "successful", fixture: "job_response_successful.json"},
		{
			name: "full", fixture: "job_response_full.json",
			normal: func(s string) string { return dateRe.ReplaceAllString(s, "01O DATE\n") },
		},
		{
			name: "gitlab_complete", fixture: "job_response_gitlab_complete.json", sortIO: true,
			failure: FailureScript, exitCode: 127, // bundle is not installed here: command not found
			check: func(t *testing.T, _ Result, tr string) {
				if strings.Contains(tr, "EXAMPLEjobTOKEN") {
					t.Error("the job token leaked")
				}
			},
		},
		{
			name: "steps_run", fixture: "job_response_steps_run.json",
			failure: FailureConfiguration,
		},
		{name: "failed", fixture: "job_response_failed.json", failure: FailureScript, exitCode: 1},
		{name: "multistep", fixture: "job_response_multistep.json"},
		{name: "failing_multistep_after_script", fixture: "job_response_failing_multistep.json", failure: FailureScript, exitCode: 1},
		{name: "after_script", fixture: "job_response_after_script.json"},
		{
			name: "masked", fixture: "job_response_successful.json",
			edit: func(j *job.CiJob) {
				addVar(j, job.Variable{Key: "MY_SECRET", Value: "s3cr3t-v4lue", Masked: true})
				addVar(j, job.Variable{Key: "DERIVED", Value: "pre-$MY_SECRET"})
				setScript(j,
					`echo "plain: $MY_SECRET"`,
					`printf 's3cr'; sleep 0.05; printf '3t-v4lue split\n'`,
					`echo "derived: $DERIVED token glpat-abcdef123 url https://x/?private_token=zzz&a=1"`,
					`echo s3cr3t-v4lue`)
			},
			check: func(t *testing.T, _ Result, tr string) {
				if strings.Contains(tr, "s3cr3t") || strings.Contains(tr, "abcdef123") || strings.Contains(tr, "zzz") {
					t.Errorf("a secret survived in the trace")
				}
			},
		},
		{
			name: "stderr_interleaved", fixture: "job_response_successful.json", sortIO: true,
			edit: func(j *job.CiJob) {
				setScript(j, "echo out1; echo err1 >&2; echo out2; echo err2 >&2", "ls /nonexistent-vk-path")
			},
			// gitlab-runner 19.3 evals the script in a subshell, whose
			// errexit passes the failing command's status on (ls: 2).
			failure: FailureScript, exitCode: 2,
		},
		{
			name: "no_newline", fixture: "job_response_successful.json",
			edit: func(j *job.CiJob) { setScript(j, "printf 'no newline at the end'") },
		},
		{
			name: "long_line", fixture: "job_response_successful.json",
			edit: func(j *job.CiJob) {
				setScript(j, `head -c 10240 /dev/zero | tr '\0' x > line; echo >> line; dd if=line bs=64k status=none`)
			},
		},
		{
			name: "cr_ansi", fixture: "job_response_successful.json",
			edit: func(j *job.CiJob) {
				setScript(j,
					`printf 'progress 10%%\rprogress 50%%\rprogress 100%%\n'`,
					`printf 'crlf line\r\n'`,
					`printf '\033[31mred\033[0m and \033[1mbold\033[0m\n'`,
					`printf 'bar: .\r'`)
			},
		},
		{
			name: "multiline_command", fixture: "job_response_successful.json",
			edit: func(j *job.CiJob) {
				setScript(j, "echo first\necho second", "", "  echo trimmed  ")
			},
		},
		{
			name: "timeout", fixture: "job_response_long_running.json",
			edit:    func(j *job.CiJob) { j.TimeoutSecs = 5 },
			waitFor: "$ sleep 3600",
			act:     func(h *harness, _ *Handle, _ *job.CiJob) { h.clk.Advance(5 * time.Second) },
			failure: FailureTimeout,
			check: func(t *testing.T, res Result, tr string) {
				// As gitlab-runner 19.3: the job's context ended, so no
				// later stage runs; the warning is followed by the error.
				if strings.Contains(tr, ":after_script\r") || strings.Contains(tr, ":cleanup_file_variables\r") {
					t.Error("a stage ran after the job's timeout")
				}
				// spec: NODE-14 (the fake clock moved 5 s during the job)
				if res.Usage.Wall != 5*time.Second {
					t.Errorf("Usage.Wall = %v, want 5s", res.Usage.Wall)
				}
			},
		},
		{
			// RUNNER_SCRIPT_TIMEOUT ends the script only: after_script
			// (CI_JOB_STATUS=timedout) and cleanup still run.
			name: "script_timeout", fixture: "job_response_long_running.json",
			edit: func(j *job.CiJob) {
				addVar(j, job.Variable{Key: "RUNNER_SCRIPT_TIMEOUT", Value: "5s"})
			},
			waitFor: "$ sleep 3600",
			act:     func(h *harness, _ *Handle, _ *job.CiJob) { h.clk.Advance(5 * time.Second) },
			failure: FailureTimeout,
			check: func(t *testing.T, _ Result, tr string) {
				if !strings.Contains(tr, "job status timedout") || !strings.Contains(tr, "cleanup_file_variables") {
					t.Error("after_script or cleanup did not run after the script's timeout")
				}
			},
		},
		{
			name: "cancel_graceful", fixture: "job_response_long_running.json",
			waitFor: "$ sleep 3600",
			// Whether bash reports the SIGTERM'd sleep ("Terminated") races
			// with its TERM trap, in gitlab-runner's script as in ours.
			normal: func(s string) string { return terminatedRe.ReplaceAllString(s, "") },
			// The trace shows "$ sleep 3600" before the shell forks sleep;
			// a SIGTERM that reaches the forked shell before it execs sleep
			// is lost with its trap, and only the grace's SIGKILL (on the
			// fake clock, never advanced here) would end the step. So the
			// cancel waits for sleep itself to run.
			act: func(h *harness, hd *Handle, _ *job.CiJob) {
				h.waitExec("sleep", "3600")
				hd.Cancel(exec.Graceful)
			},
			failure: FailureCanceled,
			check: func(t *testing.T, _ Result, tr string) {
				if !strings.Contains(tr, "job status canceled") {
					t.Error("after_script did not see CI_JOB_STATUS=canceled")
				}
			},
		},
		{
			name: "cancel_immediate", fixture: "job_response_long_running.json",
			waitFor: "$ sleep 3600",
			act:     func(_ *harness, hd *Handle, _ *job.CiJob) { hd.Cancel(exec.Immediate) },
			failure: FailureCanceled,
			check: func(t *testing.T, _ Result, tr string) {
				if strings.Contains(tr, "after_script") || strings.Contains(tr, "cleanup_file_variables") {
					t.Error("a stage ran after an immediate cancel")
				}
			},
		},
		{
			name: "over_limit", fixture: "job_response_successful.json",
			edit: func(j *job.CiJob) {
				j.Trace.LimitBytes = 3000
				setScript(j, "seq 1 1000")
			},
			check: func(t *testing.T, res Result, tr string) {
				if !res.Truncated || res.OutputLen != int64(len(tr)) || !strings.HasSuffix(tr, "no more output will be collected.\x1b[0;m\n") {
					t.Errorf("over the limit: truncated %v, len %d vs %d", res.Truncated, res.OutputLen, len(tr))
				}
			},
		},
		{
			name: "no_timestamps", fixture: "job_response_after_script.json",
			edit: func(j *job.CiJob) {
				addVar(j, job.Variable{Key: "FF_TIMESTAMPS", Value: "false"})
				setScript(j, "echo Hello World", "printf 'no newline'")
			},
		},
		{
			// gitlab-runner masks every default token prefix unless the
			// job turns FF_MASK_ALL_DEFAULT_TOKENS off; glpat- is masked
			// either way.
			name: "tokens_all_default", fixture: "job_response_successful.json",
			edit: func(j *job.CiJob) { setScript(j, "echo glsoat-abc123 glrt-def456 glpat-ghi789") },
		},
		{
			name: "ff_mask_all_default_tokens_off", fixture: "job_response_successful.json",
			edit: func(j *job.CiJob) {
				addVar(j, job.Variable{Key: "FF_MASK_ALL_DEFAULT_TOKENS", Value: "false"})
				setScript(j, "echo glsoat-abc123 glrt-def456 glpat-ghi789")
			},
		},
		{
			// Each multi-line command in its own collapsed section, its
			// whole text as the title; one-line commands as usual. The
			// shell stamps the section markers with its own clock.
			name: "ff_script_sections", fixture: "job_response_successful.json",
			edit: func(j *job.CiJob) {
				addVar(j, job.Variable{Key: "FF_SCRIPT_SECTIONS", Value: "true"})
				setScript(j, "echo first\necho second", "echo one line")
			},
			normal: func(s string) string { return awkTimeRe.ReplaceAllString(s, "${1}:UNIX:section_") },
		},
		{
			// A flag's value is expanded before it is parsed, as
			// gitlab-runner does: FF_SCRIPT_SECTIONS=$MY_FLAG is on.
			name: "ff_expanded_value", fixture: "job_response_successful.json",
			edit: func(j *job.CiJob) {
				addVar(j, job.Variable{Key: "MY_FLAG", Value: "true"})
				addVar(j, job.Variable{Key: "FF_SCRIPT_SECTIONS", Value: "$MY_FLAG"})
				setScript(j, "echo first\necho second", `echo "exported: $FF_SCRIPT_SECTIONS"`)
			},
			normal: func(s string) string { return awkTimeRe.ReplaceAllString(s, "${1}:UNIX:section_") },
		},
		{
			// Several flags off their defaults: the header lists them in
			// gitlab-runner's order; an unparseable value keeps the
			// default and is not listed.
			name: "ff_header_line", fixture: "job_response_successful.json",
			edit: func(j *job.CiJob) {
				addVar(j, job.Variable{Key: "FF_USE_FASTZIP", Value: "true"})
				addVar(j, job.Variable{Key: "FF_ENABLE_BASH_EXIT_CODE_CHECK", Value: "1"})
				addVar(j, job.Variable{Key: "FF_TIMESTAMPS", Value: "false"})
				addVar(j, job.Variable{Key: "FF_NETWORK_PER_BUILD", Value: "maybe"})
				setScript(j, "false || echo exit code check passes an or-list", `echo "$FF_USE_FASTZIP $FF_NETWORK_PER_BUILD"`)
			},
		},
		{
			// CI_DEBUG_TRACE shows the generated script as bash runs it:
			// the FF_* exports first, then the node's and the job's
			// variables, the cd and the commands.
			name: "debug_trace", fixture: "job_response_successful.json", sortIO: true,
			edit: func(j *job.CiJob) {
				addVar(j, job.Variable{Key: "CI_DEBUG_TRACE", Value: "true"})
				addVar(j, job.Variable{Key: "FF_ENABLE_BASH_EXIT_CODE_CHECK", Value: "true"})
			},
			normal: func(s string) string { return strings.ReplaceAll(s, runtime.GOOS+"/"+runtime.GOARCH, "OS/ARCH") },
		},
		{
			// FF_POSIXLY_CORRECT_ESCAPES: the script quotes in double
			// quotes, not $'…'; bash reads the same values either way, so
			// the job's output is as without the flag.
			name: "ff_posixly_correct_escapes", fixture: "job_response_successful.json", sortIO: true,
			edit: func(j *job.CiJob) {
				addVar(j, job.Variable{Key: "CI_DEBUG_TRACE", Value: "true"})
				addVar(j, job.Variable{Key: "FF_POSIXLY_CORRECT_ESCAPES", Value: "true"})
				addVar(j, job.Variable{Key: "QUOTED", Value: "a \"b\" $c `d` \\e", Raw: true})
				setScript(j, `printf '%s\n' "$QUOTED"`)
			},
			normal: func(s string) string { return strings.ReplaceAll(s, runtime.GOOS+"/"+runtime.GOARCH, "OS/ARCH") },
		},
		{
			// GIT_STRATEGY=empty: gitlab-runner's own notice, the
			// project directory removed and made again.
			name: "git_strategy_empty", fixture: "job_response_successful.json",
			edit: func(j *job.CiJob) {
				addVar(j, job.Variable{Key: "GIT_STRATEGY", Value: "empty", Public: true})
				setScript(j, `ls -A | wc -l`)
			},
		},
		{
			// A stage appends KEY=value to $GITLAB_ENV; the later stages
			// export it (gitlab-runner's dotenv between stages).
			name: "gitlab_env", fixture: "job_response_after_script.json",
			edit: func(j *job.CiJob) {
				setScript(j, `echo "FROM_ENV=set by script" >> "$GITLAB_ENV"`, `echo "same stage: ${FROM_ENV:-unset}"`)
				j.Steps[1].Script = []string{`echo "after_script: $FROM_ENV"`}
			},
		},
		{
			name: "file_and_raw_variables", fixture: "job_response_successful.json",
			edit: func(j *job.CiJob) {
				addVar(j, job.Variable{Key: "A_FILE", Value: "file content\n", File: true})
				addVar(j, job.Variable{Key: "RAW", Value: "$HOME-raw", Raw: true})
				addVar(j, job.Variable{Key: "EXPANDED", Value: "x-$CI_JOB_STATUS-${MISSING}-$$"})
				j.ServerCAPEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
				setScript(j,
					`cat "$A_FILE"; echo "$A_FILE" | sed "s|$CI_BUILDS_DIR|BUILDS|"`,
					`echo "$RAW $EXPANDED"`,
					`head -1 "$CI_SERVER_TLS_CA_FILE"`,
					`test "$CI_PROJECT_DIR" = "$PWD" && echo in project dir`)
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Config{})
			j := fixtureJob(t, tc.fixture)
			if tc.edit != nil {
				tc.edit(j)
			}
			out := newWatchBuf(tc.waitFor)
			hd, err := h.runner.Start(t.Context(), Spec{ID: "golden-" + tc.name, Job: j, Out: out})
			if err != nil {
				t.Fatal(err)
			}
			if tc.act != nil {
				select {
				case <-out.seen:
					tc.act(h, hd, j)
				case <-hd.Done():
					t.Fatalf("job ended before %q appeared:\n%s", tc.waitFor, out.String())
				}
			}
			// A job that never ends fails its case with its trace so far
			// instead of hanging the package until go test's timeout.
			select {
			case <-hd.Done():
			case <-time.After(2 * time.Minute):
				t.Fatalf("job did not end within 2 minutes; its trace so far:\n%s", out.String())
			}
			res := hd.Result()
			got := out.String()
			if res.Failure != tc.failure || res.ExitCode != tc.exitCode {
				t.Errorf("result = failure %q exit %d (%v), want %q %d", res.Failure, res.ExitCode, res.Err, tc.failure, tc.exitCode)
			}
			if res.OutputLen != int64(len(got)) {
				t.Errorf("OutputLen = %d, trace has %d bytes", res.OutputLen, len(got))
			}
			if tc.check != nil {
				tc.check(t, res, got)
			}
			norm := h.normalise(got)
			if tc.sortIO {
				norm = sortWorkEntries(norm)
			}
			if tc.normal != nil {
				norm = tc.normal(norm)
			}
			checkGolden(t, tc.name, norm)
			if _, err := os.Stat(filepath.Join(h.root, "golden-"+tc.name)); !os.IsNotExist(err) {
				t.Errorf("job directory left behind: %v", err)
			}
		})
	}
}
