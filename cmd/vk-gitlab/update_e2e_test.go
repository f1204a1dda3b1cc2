package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/realhub"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/relay/state"
)

// buildRelay builds vk-gitlab as release into path.
func buildRelay(t *testing.T, path, release string) {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go toolchain on PATH to build vk-gitlab twice")
	}
	cmd := exec.Command(goBin, "build", "-o", path,
		"-ldflags", "-X github.com/vk-ci/vk/internal/version.Version="+release, "github.com/vk-ci/vk/cmd/vk-gitlab")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build vk-gitlab %s: %v\n%s", release, err, out)
	}
}

// syncBuffer is a process's stderr, read while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// vkHub runs one of vk-hub's operator commands against the hub.
func vkHub(t *testing.T, socket string, args ...string) string {
	t.Helper()
	root := &cobra.Command{Use: "vk-hub", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(admin.Commands(func() string { return socket })...)
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	if err := root.ExecuteContext(t.Context()); err != nil {
		t.Fatalf("vk-hub %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// waitUntil polls cond (another process's state: nothing to wait on
// but its answers) every 50 ms for up to 90 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A relay whose [hub] allow lists update is updated from the hub with
// the operator's commands: two builds of vk-gitlab differing only in
// their release, the first running against the real hub and the fake
// GitLab with a job waiting on a file; the second, signed off the hub
// with `vk-hub relays sign-key` and `sign`, published and sent with
// `relays publish` and `relays update`. The relay installs it in place,
// keeps its PID (exec), reports the new release, resumes the running job
// from its state file and finishes it in GitLab with one final update.
//
// spec: OPS-04
func TestUpdateFromHubE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("builds vk-gitlab twice")
	}
	const rel1, rel2 = "0.9.1-e2e", "0.9.2-e2e"
	bin := t.TempDir()
	exe := filepath.Join(bin, "run", "vk-gitlab")
	next := filepath.Join(bin, "release", "vk-gitlab")
	buildRelay(t, exe, rel1)
	buildRelay(t, next, rel2)

	gl := gitlabfake.New(gitlabfake.Options{LongPoll: 500 * time.Millisecond, Logger: testlog.New(t)})
	if err := gl.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gl.Close() })
	proj, err := gl.CreateProject("acme/web", map[string]string{"README.md": "hi\n"}, gitlabfake.ProjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hub := realhub.Start(t, realhub.Options{})
	sock := hub.AdminSocket()

	// The release key, made and used off the hub.
	keys := t.TempDir()
	vkHub(t, sock, "relays", "sign-key", "--out", filepath.Join(keys, "release"))
	vkHub(t, sock, "relays", "sign", "--key", filepath.Join(keys, "release.key"), "--release", rel2, next)

	dir := filepath.Join(t.TempDir(), "state")
	if err := state.CheckDir(dir); err != nil {
		t.Fatal(err)
	}
	enrol := hub.JoinRelay(dir, "relay-e2e")
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(gl.RunnerToken()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(t.TempDir(), "vk-gitlab.toml")
	cfg := fmt.Sprintf(`version = 1
state_dir = %q
concurrent = 2
shutdown_timeout = 600

[gitlab]
url = %q

[hub]
allow = ["update"]
release_key_file = %q

[[runners]]
name = "r1"
token_file = %q
pool = %q
envelope = { mem = "1G", cpus = 1, disk = "1G" }
`, dir, gl.URL(), filepath.Join(keys, "release.pub"), tokenFile, realhub.Pool)
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}

	var logs syncBuffer
	proc := exec.Command(exe, "run", "--config", cfgFile, "--log-format", "json")
	proc.Stdout, proc.Stderr = &logs, &logs
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- proc.Wait() }()
	t.Cleanup(func() {
		proc.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			proc.Process.Kill()
			<-exited
		}
		t.Logf("vk-gitlab's log:\n%s", logs.String())
	})
	relayRelease := func() string {
		rs, err := hub.Admin().Relays(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if r.ID == enrol.ID {
				return r.Release
			}
		}
		return ""
	}
	waitUntil(t, "the relay's report of "+rel1, func() bool { return relayRelease() == rel1 })

	sig := t.TempDir()
	pl, err := gl.CreatePipeline(proj.Path, gitlabfake.PipelineSpec{Jobs: []gitlabfake.JobSpec{{Name: "build",
		Script: []string{"echo before", "while [ ! -e " + filepath.Join(sig, "go") + " ]; do sleep 0.05; done", "echo after"}}}})
	if err != nil {
		t.Fatal(err)
	}
	glID := pl.Jobs["build"]
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	if _, err := gl.WaitJobState(ctx, glID, gitlabfake.StateRunning); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the job's record in the state file", func() bool { return stateHasJob(t, dir, glID) })

	vkHub(t, sock, "relays", "publish", "--release", rel2, "--signature", next+".sig", next)
	vkHub(t, sock, "relays", "update", enrol.ID, rel2)
	waitUntil(t, "the relay's report of "+rel2, func() bool { return relayRelease() == rel2 })
	select {
	case err := <-exited:
		t.Fatalf("vk-gitlab exited during the update (%v) instead of exec'ing in place", err)
	default:
	}
	if got, want := fileBytes(t, exe), fileBytes(t, next); !bytes.Equal(got, want) {
		t.Error("the executable is not the published release after the update")
	}
	if _, err := os.Stat(exe + ".old"); err != nil {
		t.Errorf("the old binary was not kept: %v", err)
	}
	if out := vkHub(t, sock, "relays", "list"); !strings.Contains(out, rel2) {
		t.Errorf("relays list does not show %s:\n%s", rel2, out)
	}
	if st := gl.JobState(glID); st != gitlabfake.StateRunning {
		t.Fatalf("GitLab job %d is %s across the update, want running", glID, st)
	}

	if err := os.WriteFile(filepath.Join(sig, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := gl.WaitJobState(ctx, glID, gitlabfake.StateSuccess); err != nil {
		t.Fatal(err)
	}
	ji, err := gl.Job(glID)
	if err != nil {
		t.Fatal(err)
	}
	finals := 0
	for _, u := range ji.Updates {
		if u.State == "success" || u.State == "failed" {
			finals++
		}
	}
	if finals != 1 {
		t.Errorf("%d final updates of job %d, want 1: %+v", finals, glID, ji.Updates)
	}
	if tr := string(ji.Trace); !strings.Contains(tr, "before") || !strings.Contains(tr, "after") {
		t.Errorf("trace %q lacks the output from before and after the update", tr)
	}
	if got := startedReleases(logs.String()); strings.Join(got, " ") != rel1+" "+rel2 {
		t.Errorf("the process started as releases %v, want %s then %s in one process", got, rel1, rel2)
	}
}

// startedReleases lists the release of each "vk-gitlab running" line of
// a JSON log, in order.
func startedReleases(logs string) []string {
	var out []string
	for _, l := range strings.Split(logs, "\n") {
		var m struct{ Msg, Release string }
		if json.Unmarshal([]byte(l), &m) == nil && m.Msg == "vk-gitlab running" {
			out = append(out, m.Release)
		}
	}
	return out
}

// stateHasJob reports whether the runner's state file records GitLab job
// id. It reads the file as the daemon wrote it (the daemon holds it open).
func stateHasJob(t *testing.T, dir string, id int64) bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "r1.json"))
	if err != nil {
		return false
	}
	return bytes.Contains(b, fmt.Appendf(nil, "%d", id))
}

func fileBytes(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
