package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/node/exec"
)

func newExec(t *testing.T, cfg Config) *Executor {
	t.Helper()
	cfg.Root = filepath.Join(t.TempDir(), "jobs")
	cfg.Log = testlog.New(t)
	// A parent of our own, so tests never meet other jobs' cgroups.
	cfg.CgroupParent = fmt.Sprintf("vk-test-%d", os.Getpid())
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dirs, _ := filepath.Glob(filepath.Join(DefaultCgroupRoot, "*", cfg.CgroupParent))
		for _, d := range dirs {
			_ = os.Remove(d)
		}
	})
	return e
}

var jobSeq struct {
	sync.Mutex
	n int
}

func prepare(t *testing.T, e *Executor, size exec.Size) exec.Job {
	t.Helper()
	jobSeq.Lock()
	jobSeq.n++
	id := strings.NewReplacer("/", "_").Replace(t.Name()) + "-" + string(rune('a'+jobSeq.n%26))
	jobSeq.Unlock()
	j, err := e.Prepare(t.Context(), exec.PrepareRequest{ID: id, Size: size})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.Cleanup(context.Background()) })
	return j
}

func TestRunStreamsAndExitCodes(t *testing.T) {
	e := newExec(t, Config{})
	j := prepare(t, e, exec.Size{})
	tests := []struct {
		name, body     string
		stdout, stderr string
		code           int
	}{
		{"ok", "echo out; echo err >&2", "out\n", "err\n", 0},
		{"exit 3", "echo before; exit 3", "before\n", "", 3},
		{"cwd is builds dir", "pwd", j.BuildsDir() + "\n", "", 0},
		{"clean env", `echo "$HOME|${VK_SECRET_FROM_NODE:-unset}|$EXTRA"`, filepath.Join(filepath.Dir(j.BuildsDir()), "home") + "|unset|x\n", "", 0},
		{"background process does not hold output", "sleep 1000 & echo bg", "bg\n", "", 0},
	}
	t.Setenv("VK_SECRET_FROM_NODE", "leak")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var o, e testlog.Buffer
			res, err := j.Run(t.Context(), exec.Script{Name: "s", Body: tc.body, Env: []string{"EXTRA=x"}}, &o, &e)
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != tc.code || o.String() != tc.stdout || e.String() != tc.stderr {
				t.Errorf("Run(%q) = code %d, stdout %q, stderr %q; want %d, %q, %q",
					tc.body, res.ExitCode, o.String(), e.String(), tc.code, tc.stdout, tc.stderr)
			}
		})
	}
}

func TestCancel(t *testing.T) {
	e := newExec(t, Config{})
	script := `trap 'echo got TERM; exit 7' TERM; echo ready; while :; do sleep 0.05; done`
	t.Run("graceful", func(t *testing.T) {
		j := prepare(t, e, exec.Size{})
		out := testlog.Watching("ready")
		go func() { <-out.Seen(); j.Cancel(exec.Graceful) }()
		res, err := j.Run(t.Context(), exec.Script{Name: "s", Body: script}, out, &testlog.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		if res.ExitCode != 7 || !strings.Contains(out.String(), "got TERM") {
			t.Errorf("graceful cancel: code %d, out %q; want 7 and the trap's line", res.ExitCode, out.String())
		}
	})
	t.Run("immediate", func(t *testing.T) {
		j := prepare(t, e, exec.Size{})
		out := testlog.Watching("ready")
		go func() { <-out.Seen(); j.Cancel(exec.Immediate) }()
		res, err := j.Run(t.Context(), exec.Script{Name: "s", Body: script}, out, &testlog.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		if res.ExitCode != -1 || res.Signal != "killed" || strings.Contains(out.String(), "got TERM") {
			t.Errorf("immediate cancel: %+v, out %q; want killed without the trap", res, out.String())
		}
	})
	t.Run("context", func(t *testing.T) {
		j := prepare(t, e, exec.Size{})
		out := testlog.Watching("ready")
		ctx, cancel := context.WithCancel(t.Context())
		go func() { <-out.Seen(); cancel() }()
		res, err := j.Run(ctx, exec.Script{Name: "s", Body: script}, out, &testlog.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Signal != "killed" {
			t.Errorf("ctx cancel: %+v, want killed", res)
		}
	})
}

func TestCleanupRemovesEverything(t *testing.T) {
	e := newExec(t, Config{})
	j := prepare(t, e, exec.Size{CPUs: 1, MemMiB: 64})
	if _, err := j.Run(t.Context(), exec.Script{Name: "s", Body: "echo x > file"}, &testlog.Buffer{}, &testlog.Buffer{}); err != nil {
		t.Fatal(err)
	}
	var cgDirs []string
	if pj := j.(*job); pj.cg != nil {
		for _, d := range pj.cg.dirs {
			cgDirs = append(cgDirs, d)
		}
	}
	if err := j.Cleanup(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, d := range append(cgDirs, filepath.Dir(j.BuildsDir())) {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still exists after Cleanup (err %v)", d, err)
		}
	}
	if _, err := j.Run(t.Context(), exec.Script{Name: "s", Body: "true"}, &testlog.Buffer{}, &testlog.Buffer{}); !errors.Is(err, exec.ErrCleanedUp) {
		t.Errorf("Run after Cleanup: %v, want ErrCleanedUp", err)
	}
	if err := j.Cleanup(t.Context()); err != nil {
		t.Errorf("second Cleanup: %v", err)
	}
	if w := j.Usage().Wall; w <= 0 {
		t.Errorf("Usage().Wall = %v after Cleanup", w)
	}
}

// spec: NODE-09, NODE-17
func TestMemoryLimitKillsJob(t *testing.T) {
	e := newExec(t, Config{})
	if !e.Cgroups() {
		t.Skip("no writable cgroup v1 memory controller on this host (need root and /sys/fs/cgroup/memory)")
	}
	j := prepare(t, e, exec.Size{CPUs: 1, MemMiB: 32})
	// bash holds 128 MiB in a variable.
	res, err := j.Run(t.Context(), exec.Script{Name: "s", Body: "x=$(head -c 134217728 /dev/zero | tr '\\0' a); echo ${#x}"}, &testlog.Buffer{}, &testlog.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.OOMKilled || res.ExitCode == 0 {
		t.Errorf("Run over the limit = %+v, want OOMKilled and a failing exit", res)
	}
	u := j.Usage()
	if u.Size != (exec.Size{CPUs: 1, MemMiB: 32}) {
		t.Errorf("Usage().Size = %+v", u.Size)
	}
	if u.PeakMemBytes <= 0 || u.PeakMemBytes > 33<<20 {
		t.Errorf("Usage().PeakMemBytes = %d, want within (0, 32 MiB]", u.PeakMemBytes)
	}
	// A run within the limit is not reported as OOM.
	res, err = j.Run(t.Context(), exec.Script{Name: "s", Body: "x=$(head -c 1048576 /dev/zero | tr '\\0' a); echo ${#x}"}, &testlog.Buffer{}, &testlog.Buffer{})
	if err != nil || res.OOMKilled || res.ExitCode != 0 {
		t.Errorf("Run within the limit = %+v, %v", res, err)
	}
}

// spec: NODE-14
func TestUsageCountsCPU(t *testing.T) {
	e := newExec(t, Config{})
	j := prepare(t, e, exec.Size{})
	start := time.Now()
	if _, err := j.Run(t.Context(), exec.Script{Name: "s", Body: "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"}, &testlog.Buffer{}, &testlog.Buffer{}); err != nil {
		t.Fatal(err)
	}
	u := j.Usage()
	if u.CPU <= 0 || u.CPU > time.Since(start)*2+time.Second {
		t.Errorf("Usage().CPU = %v", u.CPU)
	}
	if u.PeakMemBytes <= 0 {
		t.Errorf("Usage().PeakMemBytes = %d", u.PeakMemBytes)
	}
}

func TestRunsAsUnprivilegedUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch users")
	}
	e := newExec(t, Config{User: &User{UID: 65534, GID: 65534}})
	// The test's temp dir must be traversable by the user.
	for _, d := range []string{filepath.Dir(e.cfg.Root), filepath.Dir(filepath.Dir(e.cfg.Root))} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for d := filepath.Dir(e.cfg.Root); d != "/"; d = filepath.Dir(d) {
		if st, err := os.Stat(d); err == nil && st.Mode().Perm()&0o001 == 0 {
			t.Skipf("%s is not traversable by others", d)
		}
	}
	j := prepare(t, e, exec.Size{})
	var o, er testlog.Buffer
	res, err := j.Run(t.Context(), exec.Script{Name: "s", Body: "id -u; id -g; touch mine && echo wrote"}, &o, &er)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || o.String() != "65534\n65534\nwrote\n" {
		t.Errorf("as nobody: code %d, out %q, err %q", res.ExitCode, o.String(), er.String())
	}
}

func TestPrepareRejectsBadID(t *testing.T) {
	e := newExec(t, Config{})
	for _, id := range []string{"", "..", "a/b", "x y"} {
		if _, err := e.Prepare(t.Context(), exec.PrepareRequest{ID: id}); !errors.Is(err, exec.ErrPrepare) {
			t.Errorf("Prepare(%q) = %v, want ErrPrepare", id, err)
		}
	}
}
