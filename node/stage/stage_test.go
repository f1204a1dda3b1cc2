package stage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/testlog"
	vkexec "github.com/vk-ci/vk/node/exec"
	"github.com/vk-ci/vk/node/exec/process"
	"github.com/vk-ci/vk/node/trace"
	"github.com/vk-ci/vk/proto/job"
	"pgregory.net/rapid"
)

// spec: STAGE-05
func TestShellEscapeMatchesGitLabRunner(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "''"},
		{"plain/path-1.2_@,", "plain/path-1.2_@,"},
		{"two words", "$'two words'"},
		{"it's", `$'it\'s'`},
		{"a\nb\tc\r", `$'a\nb\tc\r'`},
		{"back\\slash", `$'back\\slash'`},
		{"\x1b[32;1m$ echo\x1b[0;m", `$'\x1b[32;1m$ echo\x1b[0;m'`},
		{"é", `$'\xc3\xa9'`},
		{"$HOME", "$'$HOME'"},
	}
	for _, tc := range tests {
		if got := shellEscape(tc.in); got != tc.want {
			t.Errorf("shellEscape(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

// With FF_POSIXLY_CORRECT_ESCAPES gitlab-runner quotes as
// helpers.PosixShellEscape does: double quotes only when a character POSIX
// shells treat specially appears, every other byte as it is (a newline, a
// ';' or a "'" alone leave the string unquoted there too).
//
// spec: STAGE-05
func TestPosixShellEscapeMatchesGitLabRunner(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "''"},
		{"plain/path-1.2_@,", "plain/path-1.2_@,"},
		{"two words", `"two words"`},
		{"it's", "it's"},
		{"a\nb;c", "a\nb;c"},
		{"say \"hi\"", `"say \"hi\""`},
		{"back\\slash", `"back\\slash"`},
		{"$HOME `id`", "\"\\$HOME \\`id\\`\""},
		{"\x1b[32;1m$ echo\x1b[0;m", "\"\x1b[32;1m\\$ echo\x1b[0;m\""},
		{"é", "é"},
		{"a=b", `"a=b"`},
		{"x|y&z", `"x|y&z"`},
	}
	for _, tc := range tests {
		if got := posixShellEscape(tc.in); got != tc.want {
			t.Errorf("posixShellEscape(%q) = %s, want %s", tc.in, got, tc.want)
		}
		w := scriptWriter{posixEscape: true}
		if got := w.escape(tc.in); got != tc.want {
			t.Errorf("escape(%q) with FF_POSIXLY_CORRECT_ESCAPES = %s, want %s", tc.in, got, tc.want)
		}
	}
}

// Any string that posixShellEscape double-quotes survives it → sh → printf
// unchanged, in bash and in a POSIX sh (dash) alike, which cannot read the
// default $'…' quoting.
//
// spec: STAGE-05
func TestPosixShellEscapeRoundTripsThroughSh(t *testing.T) {
	var inputs []string
	rapid.Check(t, func(t *rapid.T) {
		s := string(rapid.SliceOfN(rapid.ByteRange(1, 255), 0, 20).Draw(t, "s"))
		inputs = append(inputs, "$"+s) // '$' makes it quoted
	})
	var script strings.Builder
	for _, s := range inputs {
		script.WriteString("printf '%s\\0' " + posixShellEscape(s) + "\n")
	}
	for _, sh := range []string{"bash", "sh"} {
		if _, err := exec.LookPath(sh); err != nil {
			continue
		}
		out, err := exec.Command(sh, "-c", script.String()).Output()
		if err != nil {
			t.Fatalf("%s: %v", sh, err)
		}
		got := strings.Split(string(out), "\x00")
		for i, s := range inputs {
			if got[i] != s {
				t.Fatalf("%s read %q back as %q (escaped %s)", sh, s, got[i], posixShellEscape(s))
			}
		}
	}
}

// Any string survives shellEscape → bash → echo unchanged.
//
// spec: STAGE-05
func TestShellEscapeRoundTripsThroughBash(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	var inputs []string
	rapid.Check(t, func(t *rapid.T) {
		s := string(rapid.SliceOfN(rapid.ByteRange(1, 255), 0, 20).Draw(t, "s"))
		inputs = append(inputs, s)
	})
	// One bash for all inputs: printf each escaped string with a separator.
	var script strings.Builder
	for _, s := range inputs {
		script.WriteString("printf '%s\\0' " + shellEscape(s) + "\n")
	}
	out, err := exec.Command("bash", "--noprofile", "--norc", "-c", script.String()).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(string(out), "\x00")
	for i, s := range inputs {
		if got[i] != s {
			t.Fatalf("bash read %q back as %q (escaped %s)", s, got[i], shellEscape(s))
		}
	}
}

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "1", "B_2": "two", "EMPTY": ""}
	lookup := func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	tests := []struct{ in, want string }{
		{"plain", "plain"},
		{"$A-${B_2}", "1-two"},
		{"$MISSING|${MISSING}|", "||"},
		{"$$A", "$A"},
		{"trailing $", "trailing $"},
		// As os.Expand in gitlab-runner: bad syntax is eaten, the
		// shell's special parameters are empty, "-" is a plain key.
		{"${unterminated", "unterminated"},
		{"${}", ""},
		{"$1 $- $? $@ $*x", "    x"},
		{"awk '{print $1}'", "awk '{print }'"},
		{"${A}b$A", "1b1"},
	}
	for _, tc := range tests {
		if got := job.Expand(tc.in, lookup); got != tc.want {
			t.Errorf("expand(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// The stage script is gitlab-runner 19.3's bash script (shells/bash.go,
// shells/abstract.go writeCommands) byte for byte, with each feature flag
// that changes it.
//
// spec: STAGE-05
func TestScriptShape(t *testing.T) {
	head := "export K=$'v v'\n" +
		"mkdir -p \"/b/p.tmp\"\n" +
		"printf '%s' data > \"/b/p.tmp/F\"\n" +
		"export F=\"/b/p.tmp/F\"\n" +
		"export GITLAB_ENV=/b/p.tmp/gitlab_runner_env\n" +
		"mkdir -p \"/b/p.tmp\"\n" +
		"touch \"/b/p.tmp/gitlab_runner_env\"\n" +
		"while read -r line; do export \"$line\"; done < \"/b/p.tmp/gitlab_runner_env\"\n" +
		"cd /b/p\n"
	hi := "echo $'\\x1b[32;1m$ echo hi\\x1b[0;m'\necho hi\n"
	collapsed := "echo $'\\x1b[32;1m$ a # collapsed multi-line command\\x1b[0;m'\na\nb\n"
	sectioned := "printf '%b\\n' section_start:$(awk 'BEGIN{srand(); print srand()}'):section_script_step_1[hide_duration=true,collapsed=true]\r\x1b[0K" +
		"$'\\x1b[32;1m$ a\\nb\\x1b[0;m'\n" +
		"printf '%b\\n' section_end:$(awk 'BEGIN{srand(); print srand()}'):section_script_step_1\r\x1b[0K\n" +
		"a\nb\n"
	check := "_runner_exit_code=$?; if [ $_runner_exit_code -ne 0 ]; then exit $_runner_exit_code; fi\n"
	prologue := "#!/usr/bin/env bash\n\ntrap 'exit 1' TERM\n\n"
	opts := `case "$(set -o)" in *"pipefail"*) set -o pipefail;; esac; set -o errexit` + "\nset +o noclobber\n"
	cases := []struct {
		name string
		w    scriptWriter
		want string
	}{
		{"default", scriptWriter{}, prologue + opts +
			"(trap 'exit 1' TERM; eval " + shellEscape(head+hi+collapsed+"echo\n\n") + ") < /dev/null\nexit 0\n"},
		{"FF_USE_LEGACY_BASH_EVAL", scriptWriter{legacyEval: true}, prologue + opts +
			": | eval " + shellEscape(head+hi+collapsed+"echo\n\n") + "\nexit 0\n"},
		{"CI_DEBUG_TRACE", scriptWriter{xtrace: true}, prologue + "set -o xtrace\n" + opts +
			"(trap 'exit 1' TERM; eval " + shellEscape(head+hi+collapsed+"echo\n\n") + ") < /dev/null\nexit 0\n"},
		{"FF_SCRIPT_SECTIONS", scriptWriter{scriptSections: true}, prologue + opts +
			"(trap 'exit 1' TERM; eval " + shellEscape(head+hi+sectioned+"echo\n\n") + ") < /dev/null\nexit 0\n"},
		{"FF_POSIXLY_CORRECT_ESCAPES", scriptWriter{posixEscape: true}, prologue + opts +
			"(trap 'exit 1' TERM; eval " + posixShellEscape(strings.ReplaceAll(head, "export K=$'v v'", `export K="v v"`)+
			"echo \"\x1b[32;1m\\$ echo hi\x1b[0;m\"\necho hi\n"+
			"echo \"\x1b[32;1m\\$ a # collapsed multi-line command\x1b[0;m\"\na\nb\n"+
			"echo\n\n") + ") < /dev/null\nexit 0\n"},
		{"FF_ENABLE_BASH_EXIT_CODE_CHECK", scriptWriter{checkErrors: true}, prologue + opts +
			"(trap 'exit 1' TERM; eval " + shellEscape(head+check+hi+check+collapsed+check+"echo\n\n"+check) + ") < /dev/null\nexit 0\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := &tc.w
			w.tmpDir = "/b/p.tmp"
			w.exports([]exportVar{{Key: "K", Value: "v v"}, {Key: "F", Value: "data", File: true}, {Key: "bad-key", Value: "x"}})
			w.cd("/b/p")
			w.commands("script_step", "echo hi", "a\nb", "")
			if got := w.finish(); got != tc.want {
				t.Errorf("script =\n%q\nwant\n%q", got, tc.want)
			}
			if len(w.skipped) != 1 || w.skipped[0] != "bad-key" {
				t.Errorf("skipped = %v", w.skipped)
			}
		})
	}
}

// transfers is an in-memory Transfers that records calls and fails where
// told.
type transfers struct {
	calls []string
	fail  map[string]error
}

func (f *transfers) do(name string, tr *trace.Trace) error {
	f.calls = append(f.calls, name)
	tr.Println("transfer " + name)
	return f.fail[name]
}

func (f *transfers) GetSources(_ context.Context, _ *job.CiJob, dir string, tr *trace.Trace) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return f.do("get_sources", tr)
}
func (f *transfers) RestoreCache(_ context.Context, _ *job.CiJob, _ *CacheRegistry, _ string, tr *trace.Trace) error {
	return f.do("restore_cache", tr)
}
func (f *transfers) DownloadArtifacts(_ context.Context, _ *job.CiJob, _ string, tr *trace.Trace) error {
	return f.do("download_artifacts", tr)
}
func (f *transfers) ArchiveCache(_ context.Context, _ *job.CiJob, _ *CacheRegistry, _ string, failed bool, tr *trace.Trace) error {
	return f.do(fmt.Sprintf("archive_cache(failed=%v)", failed), tr)
}
func (f *transfers) UploadArtifacts(_ context.Context, j *job.CiJob, _ string, failed bool, tr *trace.Trace) ([]ArtifactOutcome, error) {
	name := fmt.Sprintf("upload_artifacts(failed=%v)", failed)
	err := f.do(name, tr)
	var out []ArtifactOutcome
	for _, a := range j.Artifacts {
		out = append(out, ArtifactOutcome{Name: a.Name, Type: a.ArtifactType, Uploaded: err == nil})
	}
	return out, err
}

func transferJob(t *testing.T) *job.CiJob {
	j := fixtureJob(t, "job_response_multistep.json")
	j.Variables = j.Variables[:len(j.Variables)-1] // drop GIT_STRATEGY=none
	j.Caches = []job.Cache{{Key: "k", Paths: []string{"x"}}}
	j.Artifacts = []job.Artifact{{Name: "a", Paths: []string{"out"}, When: "always", ArtifactType: "archive"}}
	j.Dependencies = []job.Dependency{{ID: 1, Name: "build", ArtifactsFile: &job.ArtifactsFile{Filename: "a.zip", Size: 1}}}
	return j
}

var sectionRe = regexp.MustCompile(`section_start:\d+:([a-z_]+)`)

func sections(tr string) []string {
	var out []string
	for _, m := range sectionRe.FindAllStringSubmatch(tr, -1) {
		out = append(out, m[1])
	}
	return out
}

// spec: STAGE-01, FAIL-01, FAIL-02
func TestStageOrderAndTransferFailures(t *testing.T) {
	tests := []struct {
		name      string
		edit      func(j *job.CiJob)
		fail      map[string]error
		failure   Failure
		sections  string
		transfers string
	}{
		{
			name:      "success",
			sections:  "prepare_executor prepare_script get_sources restore_cache download_artifacts step_script step_release after_script archive_cache upload_artifacts_on_success cleanup_file_variables",
			transfers: "get_sources restore_cache download_artifacts archive_cache(failed=false) upload_artifacts(failed=false)",
		},
		{
			name:      "step fails",
			edit:      func(j *job.CiJob) { j.Steps[0].Script = []string{"exit 4"} },
			failure:   FailureScript,
			sections:  "prepare_executor prepare_script get_sources restore_cache download_artifacts step_script after_script upload_artifacts_on_failure cleanup_file_variables",
			transfers: "get_sources restore_cache download_artifacts upload_artifacts(failed=true)",
		},
		{
			name:      "clone fails: steps and after_script skipped",
			fail:      map[string]error{"get_sources": errors.New("git: connection refused")},
			failure:   FailureExternalDependency,
			sections:  "prepare_executor prepare_script get_sources upload_artifacts_on_failure cleanup_file_variables",
			transfers: "get_sources upload_artifacts(failed=true)",
		},
		{
			name:      "marked system error",
			fail:      map[string]error{"restore_cache": fmt.Errorf("disk: %w", ErrSystem)},
			failure:   FailureSystem,
			sections:  "prepare_executor prepare_script get_sources restore_cache upload_artifacts_on_failure cleanup_file_variables",
			transfers: "get_sources restore_cache upload_artifacts(failed=true)",
		},
		{
			name:      "cache archive error after success",
			fail:      map[string]error{"archive_cache(failed=false)": errors.New("registry 503")},
			failure:   FailureExternalDependency,
			sections:  "prepare_executor prepare_script get_sources restore_cache download_artifacts step_script step_release after_script archive_cache upload_artifacts_on_failure cleanup_file_variables",
			transfers: "get_sources restore_cache download_artifacts archive_cache(failed=false) upload_artifacts(failed=true)",
		},
		{
			name:      "bad GIT_STRATEGY is a configuration failure",
			edit:      func(j *job.CiJob) { addVar(j, job.Variable{Key: "GIT_STRATEGY", Value: "teleport"}) },
			failure:   FailureConfiguration,
			sections:  "prepare_executor",
			transfers: "",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tf := &transfers{fail: tc.fail}
			h := newHarness(t, Config{Transfers: tf})
			j := transferJob(t)
			if tc.edit != nil {
				tc.edit(j)
			}
			out := newWatchBuf("")
			res, err := h.runner.Run(t.Context(), Spec{ID: "order", Job: j, Out: out})
			if err != nil {
				t.Fatal(err)
			}
			if res.Failure != tc.failure {
				t.Errorf("Failure = %q (%v), want %q", res.Failure, res.Err, tc.failure)
			}
			if got := strings.Join(sections(out.String()), " "); got != tc.sections {
				t.Errorf("sections:\n got %s\nwant %s", got, tc.sections)
			}
			if got := strings.Join(tf.calls, " "); got != tc.transfers {
				t.Errorf("transfers:\n got %s\nwant %s", got, tc.transfers)
			}
			if tc.failure == FailureNone && (len(res.Artifacts) != 1 || !res.Artifacts[0].Uploaded) {
				t.Errorf("Artifacts = %+v", res.Artifacts)
			}
		})
	}
}

// spec: STAGE-01
func TestNoTransfersSkipsHonestly(t *testing.T) {
	h := newHarness(t, Config{})
	j := transferJob(t)
	out := newWatchBuf("")
	res, err := h.runner.Run(t.Context(), Spec{ID: "none", Job: j, Out: out})
	if err != nil || res.Failure != FailureNone {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	for _, want := range []string{
		"WARNING: Skipping Git repository setup: this node has no transfer service",
		"WARNING: Restoring cache is not supported on this node",
		"WARNING: Downloading artifacts is not supported on this node",
		"WARNING: Saving cache is not supported on this node",
		"WARNING: Uploading artifacts is not supported on this node",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("trace lacks %q", want)
		}
	}
}

func TestStepWhen(t *testing.T) {
	tests := []struct {
		when   string
		failed bool
		want   bool
	}{
		{"on_success", false, true}, {"on_success", true, false}, {"", false, true},
		{"on_failure", false, false}, {"on_failure", true, true},
		{"always", false, true}, {"always", true, true},
	}
	for _, tc := range tests {
		if got := stepRuns(tc.when, tc.failed); got != tc.want {
			t.Errorf("stepRuns(%q, %v) = %v", tc.when, tc.failed, got)
		}
	}
	h := newHarness(t, Config{})
	j := fixtureJob(t, "job_response_failing_multistep.json")
	j.Steps = append(j.Steps[:2], job.Step{Name: "report", Script: []string{"echo reporting"}, When: "on_failure"}, j.Steps[2])
	out := newWatchBuf("")
	res, _ := h.runner.Run(t.Context(), Spec{ID: "when", Job: j, Out: out})
	if res.Failure != FailureScript || !strings.Contains(out.String(), "01O reporting") {
		t.Errorf("on_failure step did not run after a failure: %+v", res)
	}
}

func TestAfterScriptFailure(t *testing.T) {
	for _, ignore := range []string{"", "false"} {
		t.Run("AFTER_SCRIPT_IGNORE_ERRORS="+ignore, func(t *testing.T) {
			h := newHarness(t, Config{})
			j := fixtureJob(t, "job_response_after_script.json")
			j.Steps[1].Script = []string{"exit 5"}
			if ignore != "" {
				addVar(j, job.Variable{Key: "AFTER_SCRIPT_IGNORE_ERRORS", Value: ignore})
			}
			out := newWatchBuf("")
			res, _ := h.runner.Run(t.Context(), Spec{ID: "after", Job: j, Out: out})
			if ignore == "" {
				if res.Failure != FailureNone || !strings.Contains(out.String(), "WARNING: after_script failed, but job will continue unaffected: exit status 5") {
					t.Errorf("ignored after_script failure: %+v\n%s", res, out.String())
				}
			} else if res.Failure != FailureScript {
				t.Errorf("after_script failure with AFTER_SCRIPT_IGNORE_ERRORS=false: %+v", res)
			}
		})
	}
}

// spec: FAIL-08
func TestInterruptAndContextEnd(t *testing.T) {
	for _, how := range []string{"Interrupt", "ctx"} {
		t.Run(how, func(t *testing.T) {
			h := newHarness(t, Config{})
			j := fixtureJob(t, "job_response_long_running.json")
			out := newWatchBuf("$ sleep 3600")
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			hd, err := h.runner.Start(ctx, Spec{ID: "int", Job: j, Out: out})
			if err != nil {
				t.Fatal(err)
			}
			<-out.seen
			if how == "ctx" {
				cancel()
			} else {
				hd.Interrupt()
			}
			res := hd.Result()
			if res.Failure != FailureInterrupted || strings.Contains(out.String(), "after_script") {
				t.Errorf("result %+v; trace:\n%s", res, out.String())
			}
		})
	}
}

// The node stopping (Start's ctx ends) kills the running step through its
// context at once; the callback that marks the job interrupted runs on a
// goroutine of its own and may come later. Held back here: the killed step
// must still end the job interrupted, not as a script failure with exit
// code 137 (seen once in the e2e soak, under load).
//
// spec: FAIL-08
func TestContextEndInterruptsWithoutCallback(t *testing.T) {
	h := newHarness(t, Config{})
	h.runner.afterFunc = func(context.Context, func()) func() bool { return func() bool { return true } }
	j := fixtureJob(t, "job_response_long_running.json")
	out := newWatchBuf("$ sleep 3600")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	hd, err := h.runner.Start(ctx, Spec{ID: "int-late", Job: j, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	<-out.seen
	cancel()
	if res := hd.Result(); res.Failure != FailureInterrupted {
		t.Errorf("result %+v, want interrupted; trace:\n%s", res, out.String())
	}
}

// spec: NODE-09, NODE-14, NODE-17
func TestSizingAndUsage(t *testing.T) {
	h := newHarness(t, Config{Ceiling: vkexec.Size{CPUs: 2, MemMiB: 1024}})
	j := fixtureJob(t, "job_response_successful.json")
	addVar(j, job.Variable{Key: "MICROVM_CPUS", Value: "8"})
	j.Steps[0].Script = append([]string{"# vk:hint mem=512"}, j.Steps[0].Script...)
	out := newWatchBuf("")
	res, err := h.runner.Run(t.Context(), Spec{ID: "size", Job: j, Reserved: vkexec.Size{CPUs: 1, MemMiB: 2048}, Out: out})
	if err != nil || res.Failure != FailureNone {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	if want := (vkexec.Size{CPUs: 2, MemMiB: 512}); res.Usage.Size != want {
		t.Errorf("Usage.Size = %+v, want %+v", res.Usage.Size, want)
	}
	if !strings.Contains(out.String(), "WARNING: cpus 8 clamped to the node's ceiling of 2") {
		t.Errorf("no clamp warning in the trace")
	}
	if res.Usage.CPU <= 0 {
		t.Errorf("Usage.CPU = %v", res.Usage.CPU)
	}
}

// spec: FAIL-07
func TestPrepareFailureIsSystem(t *testing.T) {
	h := newHarness(t, Config{})
	// A job ID the executor refuses makes Prepare fail.
	j := fixtureJob(t, "job_response_successful.json")
	out := newWatchBuf("")
	res, err := h.runner.Run(t.Context(), Spec{ID: "bad/id", Job: j, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	if res.Failure != FailureSystem || !strings.Contains(out.String(), "ERROR: Job failed (system failure): ") {
		t.Errorf("result %+v; trace:\n%s", res, out.String())
	}
	if got := strings.Join(sections(out.String()), " "); got != "prepare_executor" {
		t.Errorf("sections after a prepare failure: %s", got)
	}
}

// spec: STAGE-02, STAGE-03
func TestCheckoutIsTransfers(t *testing.T) {
	t.Skip("STAGE-02/03: the checkout (GIT_STRATEGY, GIT_DEPTH, credential helper) is node/xfer's GetSources; tested there")
}

func TestStartRejectsBadSpec(t *testing.T) {
	h := newHarness(t, Config{})
	if _, err := h.runner.Start(t.Context(), Spec{ID: "x"}); !errors.Is(err, ErrBadSpec) {
		t.Errorf("Start without a job: %v", err)
	}
	if _, err := New(Config{}); !errors.Is(err, ErrBadSpec) {
		t.Errorf("New without an executor: %v", err)
	}
}

// A job run as an unprivileged user can change the checkout the node wrote
// as root.
func TestUnprivilegedJobOwnsCheckout(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch users")
	}
	h := newHarnessUser(t, Config{Transfers: &transfers{}}, &process.User{UID: 65534, GID: 65534})
	for d := filepath.Dir(h.root); d != "/"; d = filepath.Dir(d) {
		if strings.HasPrefix(d, os.TempDir()+"/") {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		} else if st, err := os.Stat(d); err == nil && st.Mode().Perm()&0o001 == 0 {
			t.Skipf("%s is not traversable by others", d)
		}
	}
	j := fixtureJob(t, "job_response_successful.json")
	j.Variables = j.Variables[:len(j.Variables)-1] // the checkout goes through Transfers
	j.Steps[0].Script = []string{"id -u", "echo x > written && echo wrote"}
	out := newWatchBuf("")
	res, err := h.runner.Run(t.Context(), Spec{ID: "nobody", Job: j, Out: out})
	if err != nil || res.Failure != FailureNone {
		t.Fatalf("Run = %+v, %v\n%s", res, err, out.String())
	}
	if tr := out.String(); !strings.Contains(tr, "01O 65534\n") || !strings.Contains(tr, "01O wrote\n") {
		t.Errorf("trace:\n%s", tr)
	}
}

// A step that ignores SIGTERM is killed once the grace has passed.
//
// spec: FAIL-09
func TestGracefulCancelEscalates(t *testing.T) {
	h := newHarness(t, Config{CancelGrace: 30 * time.Second})
	j := fixtureJob(t, "job_response_long_running.json")
	j.Steps[0].Script = []string{"trap '' TERM; echo ready; sleep 3600"}
	out := newWatchBuf("01O ready")
	hd, err := h.runner.Start(t.Context(), Spec{ID: "grace", Job: j, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	<-out.seen
	hd.Cancel(vkexec.Graceful) // ignored by the step
	h.clk.Advance(30 * time.Second)
	res := hd.Result()
	if res.Failure != FailureCanceled || !strings.Contains(out.String(), "job status canceled") {
		t.Errorf("result %+v; trace:\n%s", res, out.String())
	}
}

// failingWriter accepts n bytes, then fails.
type failingWriter struct{ n int }

func (w *failingWriter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		k := w.n
		w.n = 0
		return k, errors.New("spool: disk full")
	}
	w.n -= len(p)
	return len(p), nil
}

// spec: FAIL-07
func TestTraceWriteFailureIsSystem(t *testing.T) {
	h := newHarness(t, Config{})
	j := fixtureJob(t, "job_response_successful.json")
	res, err := h.runner.Run(t.Context(), Spec{ID: "spoolfail", Job: j, Out: &failingWriter{n: 200}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Failure != FailureSystem || res.OutputLen != 200 {
		t.Errorf("result %+v, want system failure with 200 bytes of output", res)
	}
}

// flaky fails its first failures calls of GetSources.
type flaky struct {
	transfers
	failures int
}

func (f *flaky) GetSources(ctx context.Context, j *job.CiJob, dir string, tr *trace.Trace) error {
	f.calls = append(f.calls, "get_sources")
	if f.failures > 0 {
		f.failures--
		return errors.New("git: early EOF")
	}
	return os.MkdirAll(dir, 0o755)
}

func TestGetSourcesAttempts(t *testing.T) {
	for _, tc := range []struct {
		attempts string
		failures int
		want     Failure
		calls    int
	}{
		{"", 1, FailureExternalDependency, 1},
		{"3", 2, FailureNone, 3},
		{"2", 5, FailureExternalDependency, 2},
	} {
		t.Run("GET_SOURCES_ATTEMPTS="+tc.attempts, func(t *testing.T) {
			tf := &flaky{failures: tc.failures}
			h := newHarness(t, Config{Transfers: tf})
			j := fixtureJob(t, "job_response_successful.json")
			j.Variables = j.Variables[:len(j.Variables)-1]
			if tc.attempts != "" {
				addVar(j, job.Variable{Key: "GET_SOURCES_ATTEMPTS", Value: tc.attempts})
			}
			res, err := h.runner.Run(t.Context(), Spec{ID: "attempts", Job: j, Out: newWatchBuf("")})
			if err != nil {
				t.Fatal(err)
			}
			if res.Failure != tc.want || len(tf.calls) != tc.calls {
				t.Errorf("failure %q after %d calls, want %q after %d", res.Failure, len(tf.calls), tc.want, tc.calls)
			}
		})
	}
}

// RUNNER_SCRIPT_TIMEOUT ends the script; after_script still runs, and the
// last line is gitlab-runner's for a script timeout.
//
// spec: FAIL-03
func TestScriptTimeout(t *testing.T) {
	h := newHarness(t, Config{})
	j := fixtureJob(t, "job_response_long_running.json")
	addVar(j, job.Variable{Key: "RUNNER_SCRIPT_TIMEOUT", Value: "2s"})
	out := newWatchBuf("$ sleep 3600")
	hd, err := h.runner.Start(t.Context(), Spec{ID: "scripttimeout", Job: j, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	<-out.seen
	h.clk.Advance(2 * time.Second)
	res := hd.Result()
	tr := out.String()
	if res.Failure != FailureTimeout ||
		!strings.Contains(tr, "job status timedout") ||
		!strings.Contains(tr, "ERROR: Job failed: script timeout: context deadline exceeded") {
		t.Errorf("result %+v; trace:\n%s", res, tr)
	}
}

// The relay's notices are written by the node right after the header and
// before the first section, styled by level, so the trace GitLab gets is
// the node's output byte for byte.
//
// spec: TRACE-06, SPEC-23
func TestNoticesAfterHeader(t *testing.T) {
	h := newHarness(t, Config{})
	j := fixtureJob(t, "job_response_successful.json")
	j.Notices = []job.Notice{
		{Level: "warning", Text: "service alias dropped"},
		{Level: "", Text: "Job triggered by policy"},
		{Level: "info", Text: "an info line"},
	}
	out := newWatchBuf("")
	if res, err := h.runner.Run(t.Context(), Spec{ID: "notices", Job: j, Out: out}); err != nil || res.Failure != FailureNone {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	tr := out.String()
	warn := strings.Index(tr, "\x1b[0;33mWARNING: service alias dropped\x1b[0;m")
	plain := strings.Index(tr, "\x1b[0KJob triggered by policy\x1b[0;m")
	info := strings.Index(tr, "\x1b[32;1man info line\x1b[0;m")
	first := strings.Index(tr, "section_start:")
	if warn < 0 || plain < 0 || info < 0 {
		t.Fatalf("trace lacks a styled notice:\n%q", tr)
	}
	if !(strings.Index(tr, "Running with vk") < warn && warn < plain && plain < info && info < first) {
		t.Errorf("notices not in order between the header and the first section:\n%q", tr)
	}
}

// prepareErrExec is an executor whose Prepare fails with a given error, as
// a container backend does when an image cannot be pulled.
type prepareErrExec struct{ err error }

func (p prepareErrExec) Prepare(context.Context, vkexec.PrepareRequest) (vkexec.Job, error) {
	return nil, p.err
}

// A backend's Prepare error that also wraps ErrPrepare is classified by
// its more specific sentinel first: image_pull and configuration are not
// system failures.
//
// spec: FAIL-04, FAIL-05, FAIL-07
func TestPrepareErrorClasses(t *testing.T) {
	tests := []struct {
		err  error
		want Failure
	}{
		{fmt.Errorf("%w: %w: registry said 404", vkexec.ErrPrepare, vkexec.ErrImagePull), FailureImagePull},
		{fmt.Errorf("%w: %w: no image on an image-only node", vkexec.ErrPrepare, vkexec.ErrConfiguration), FailureConfiguration},
		{fmt.Errorf("%w: disk full", vkexec.ErrPrepare), FailureSystem},
	}
	for _, tc := range tests {
		r, err := New(Config{Executor: prepareErrExec{tc.err}, Version: "1.2.3", Clock: clock.NewFake(testStart), Log: testlog.New(t)})
		if err != nil {
			t.Fatal(err)
		}
		out := newWatchBuf("")
		res, err := r.Run(t.Context(), Spec{ID: "p", Job: fixtureJob(t, "job_response_successful.json"), Out: out})
		if err != nil {
			t.Fatal(err)
		}
		if res.Failure != tc.want {
			t.Errorf("Prepare error %v: failure %q, want %q\n%s", tc.err, res.Failure, tc.want, out.String())
		}
	}
}

// A job the node runs without caches (Spec.WithoutCaches, set under
// [registry] guest_credential = "job" for a start without a cache
// repository) gets the reason as a warning in both cache sections, no
// cache transfer at all, and still succeeds with its other transfers.
//
// spec: XFER-15
func TestWithoutCachesSkipsCacheTransfers(t *testing.T) {
	tf := &transfers{}
	h := newHarness(t, Config{Transfers: tf})
	out := newWatchBuf("")
	const why = "no cache repository for this job"
	res, err := h.runner.Run(t.Context(), Spec{ID: "nocache", Job: transferJob(t), Out: out, WithoutCaches: why})
	if err != nil || res.Failure != FailureNone {
		t.Fatalf("Run = %+v, %v\n%s", res, err, out.String())
	}
	if got, want := strings.Join(tf.calls, " "), "get_sources download_artifacts upload_artifacts(failed=false)"; got != want {
		t.Errorf("transfers:\n got %s\nwant %s", got, want)
	}
	if got, want := strings.Join(sections(out.String()), " "), "prepare_executor prepare_script get_sources restore_cache download_artifacts step_script step_release after_script archive_cache upload_artifacts_on_success cleanup_file_variables"; got != want {
		t.Errorf("sections:\n got %s\nwant %s", got, want)
	}
	if n := strings.Count(out.String(), "WARNING: Skipping the cache: "+why); n != 2 {
		t.Errorf("the warning is in the trace %d times, want in restore_cache and archive_cache:\n%s", n, out.String())
	}
}
