package cgroupv1

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/vk-ci/vk/internal/need"
)

const hostRoot = DefaultRoot

// noSuchPID is above the kernel's PID_MAX_LIMIT (4194304): kill(2) on it
// always fails with ESRCH, so fake cgroup.procs files can list it safely.
const noSuchPID = 4194305

var parentSeq atomic.Int32

// hostGroup returns a group named name under a parent of this test's own
// on the host's real cgroup v1 hierarchies, removed (processes killed)
// when the test ends; it skips the test where the host has none.
func hostGroup(t *testing.T, name string) Group {
	t.Helper()
	if !Available(hostRoot) {
		need.Missingf(t, "needs root and a cgroup v1 memory hierarchy under %s", hostRoot)
	}
	parent := fmt.Sprintf("vk-cgtest-%d-%d", os.Getpid(), parentSeq.Add(1))
	t.Cleanup(func() {
		dirs, _ := filepath.Glob(filepath.Join(hostRoot, "*", parent))
		for _, d := range dirs {
			if err := RemoveTree(context.Background(), d, 5*time.Second); err != nil {
				t.Errorf("test cleanup: %v", err)
			}
		}
	})
	return Group{Root: hostRoot, Path: parent + "/" + name}
}

// fakeRoot makes a directory tree standing in for a cgroup root with the
// given controller directories (plain files: no kernel behind them).
func fakeRoot(t *testing.T, ctrls ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, c := range ctrls {
		if err := os.Mkdir(filepath.Join(root, c), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func writeFakeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readTrim(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// startSleep starts a sleep outside any job cgroup and reaps it when the
// test ends.
func startSleep(t *testing.T) *osexec.Cmd {
	t.Helper()
	cmd := osexec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

// killedBySIGKILL waits for cmd and reports whether SIGKILL ended it.
func killedBySIGKILL(cmd *osexec.Cmd) bool {
	_ = cmd.Wait()
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

func TestAvailable(t *testing.T) {
	noMem := fakeRoot(t, "cpu", "pids")
	withMem := fakeRoot(t, "memory")
	writeFakeFile(t, filepath.Join(withMem, "memory", "memory.limit_in_bytes"), "9223372036854771712\n")
	for _, tc := range []struct {
		name, root string
		want       bool
	}{
		{"missing root", filepath.Join(t.TempDir(), "nope"), false},
		{"no memory controller", noMem, false},
		{"memory controller", withMem, os.Geteuid() == 0},
	} {
		if got := Available(tc.root); got != tc.want {
			t.Errorf("%s: Available(%s) = %v, want %v", tc.name, tc.root, got, tc.want)
		}
	}
}

// spec: NODE-09, NODE-17
func TestCreateWritesTheEnvelope(t *testing.T) {
	g := hostGroup(t, "job-1")
	dirs, err := g.Create(Limits{MemBytes: 64 << 20, CPUs: 2, PidsMax: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"memory", "cpu", "cpuacct", "pids"} {
		if dirs[c] != g.Dir(c) || !exists(g.Dir(c)) {
			t.Errorf("Create dirs[%s] = %q, want existing %q", c, dirs[c], g.Dir(c))
		}
	}
	for _, tc := range []struct{ ctrl, file, want string }{
		{"memory", "memory.limit_in_bytes", strconv.Itoa(64 << 20)},
		{"memory", "memory.swappiness", "0"},
		{"cpu", "cpu.cfs_period_us", "100000"},
		{"cpu", "cpu.cfs_quota_us", "200000"},
		{"pids", "pids.max", "100"},
	} {
		if got := readTrim(t, filepath.Join(g.Dir(tc.ctrl), tc.file)); got != tc.want {
			t.Errorf("%s/%s = %s, want %s", tc.ctrl, tc.file, got, tc.want)
		}
	}
	if exists(filepath.Join(g.Dir("memory"), "memory.memsw.limit_in_bytes")) {
		if got := readTrim(t, filepath.Join(g.Dir("memory"), "memory.memsw.limit_in_bytes")); got != strconv.Itoa(64<<20) {
			t.Errorf("memory.memsw.limit_in_bytes = %s, want the memory limit", got)
		}
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	for c, d := range dirs {
		if exists(d) {
			t.Errorf("%s: %s left after Remove", c, d)
		}
	}
}

// spec: NODE-17
func TestCreateZeroLimitsLeaveNoCap(t *testing.T) {
	g := hostGroup(t, "job-1")
	if _, err := g.Create(Limits{}); err != nil {
		t.Fatal(err)
	}
	if got := readTrim(t, filepath.Join(g.Dir("pids"), "pids.max")); got != "max" {
		t.Errorf("pids.max = %s, want max", got)
	}
	if got := readTrim(t, filepath.Join(g.Dir("cpu"), "cpu.cfs_quota_us")); got != "-1" {
		t.Errorf("cpu.cfs_quota_us = %s, want -1", got)
	}
	if n, _ := g.ReadInt("memory", "memory.limit_in_bytes"); n < 1<<50 {
		t.Errorf("memory.limit_in_bytes = %d, want the unlimited default", n)
	}
}

func TestCreateRefusesAnExistingGroup(t *testing.T) {
	g := hostGroup(t, "job-1")
	if _, err := g.Create(Limits{MemBytes: 32 << 20}); err != nil {
		t.Fatal(err)
	}
	dirs, err := g.Create(Limits{MemBytes: 64 << 20})
	if !errors.Is(err, fs.ErrExist) || dirs != nil {
		t.Fatalf("second Create = %v, %v; want nil, ErrExist", dirs, err)
	}
	// The failed Create removed nothing of the first and changed no limit.
	for _, c := range []string{"memory", "cpu", "cpuacct", "pids"} {
		if !exists(g.Dir(c)) {
			t.Errorf("%s gone after a refused Create", g.Dir(c))
		}
	}
	if got := readTrim(t, filepath.Join(g.Dir("memory"), "memory.limit_in_bytes")); got != strconv.Itoa(32<<20) {
		t.Errorf("memory.limit_in_bytes = %s after a refused Create, want the first's", got)
	}
}

func TestCreateRollsBackWhatItMade(t *testing.T) {
	root := fakeRoot(t, "memory", "cpu", "pids")
	g := Group{Root: root, Path: "vk/job-1"}
	// Another's directory in cpu: memory is made first, then cpu fails.
	if err := os.MkdirAll(g.Dir("cpu"), 0o755); err != nil {
		t.Fatal(err)
	}
	if dirs, err := g.Create(Limits{}); !errors.Is(err, fs.ErrExist) || dirs != nil {
		t.Fatalf("Create = %v, %v; want nil, ErrExist", dirs, err)
	}
	if exists(g.Dir("memory")) {
		t.Error("the memory directory Create made is left after its failure")
	}
	if !exists(g.Dir("cpu")) {
		t.Error("Create removed a directory it did not make")
	}
}

func TestCreateSkipsUnmountedControllers(t *testing.T) {
	root := fakeRoot(t, "memory")
	g := Group{Root: root, Path: "p/job-1"}
	dirs, err := g.Create(Limits{MemBytes: 1 << 20, CPUs: 2, PidsMax: 5})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"memory": g.Dir("memory")}; !mapsEqual(dirs, want) {
		t.Errorf("Create dirs = %v, want %v", dirs, want)
	}
	if got := readTrim(t, filepath.Join(g.Dir("memory"), "memory.limit_in_bytes")); got != "1048576" {
		t.Errorf("memory.limit_in_bytes = %s", got)
	}
	// No swap accounting here: memsw is not created.
	if exists(filepath.Join(g.Dir("memory"), "memory.memsw.limit_in_bytes")) {
		t.Error("memory.memsw.limit_in_bytes written where the kernel has none")
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// The limits Create writes are exactly the envelope, and absent for a
// zero field, whatever the envelope.
//
// spec: NODE-17
func TestCreateLimitsProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		root, err := os.MkdirTemp(t.TempDir(), "root")
		if err != nil {
			rt.Fatal(err)
		}
		for _, c := range controllers {
			if err := os.Mkdir(filepath.Join(root, c), 0o755); err != nil {
				rt.Fatal(err)
			}
		}
		lim := Limits{
			MemBytes: rapid.Int64Range(0, 1<<40).Draw(rt, "mem"),
			CPUs:     rapid.IntRange(0, 512).Draw(rt, "cpus"),
			PidsMax:  rapid.IntRange(0, 1<<22).Draw(rt, "pids"),
		}
		g := Group{Root: root, Path: "vk/j"}
		if _, err := g.Create(lim); err != nil {
			rt.Fatal(err)
		}
		check := func(ctrl, file string, set bool, want int64) {
			n, ok := g.ReadInt(ctrl, file)
			if ok != set || (set && n != want) {
				rt.Errorf("%s/%s = %d, %v; want %d, %v", ctrl, file, n, ok, want, set)
			}
		}
		check("memory", "memory.limit_in_bytes", lim.MemBytes > 0, lim.MemBytes)
		check("cpu", "cpu.cfs_period_us", lim.CPUs > 0, 100000)
		check("cpu", "cpu.cfs_quota_us", lim.CPUs > 0, int64(lim.CPUs)*100000)
		check("pids", "pids.max", lim.PidsMax > 0, int64(lim.PidsMax))
	})
}

func TestProcs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string // path under root → content
		sub   string
		want  []int
	}{
		{"pids first, junk and non-positive left out",
			map[string]string{"pids/g/cgroup.procs": "12\n0\n-3\nx\n34\n", "memory/g/cgroup.procs": "99\n"}, "", []int{12, 34}},
		{"memory when pids has none", map[string]string{"memory/g/cgroup.procs": "7\n"}, "", []int{7}},
		{"a child cgroup", map[string]string{"pids/g/job/cgroup.procs": "5\n6\n", "pids/g/cgroup.procs": "1\n"}, "job", []int{5, 6}},
		{"empty", map[string]string{"pids/g/cgroup.procs": ""}, "", nil},
		{"nowhere", nil, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for p, c := range tc.files {
				writeFakeFile(t, filepath.Join(root, p), c)
			}
			if got := (Group{Root: root, Path: "g"}).Procs(tc.sub); !slices.Equal(got, tc.want) {
				t.Errorf("Procs(%q) = %v, want %v", tc.sub, got, tc.want)
			}
		})
	}
}

func TestOOMKillsSumsTheGroupAndItsChildren(t *testing.T) {
	const ctl = "oom_kill_disable 0\nunder_oom 0\n"
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  int64
		known bool
	}{
		{"own and children", map[string]string{
			"memory/g/memory.oom_control":     ctl + "oom_kill 2\n",
			"memory/g/job/memory.oom_control": ctl + "oom_kill 3\n",
			"memory/g/svc/memory.oom_control": ctl + "oom_kill 0\n",
		}, 5, true},
		{"only a child knows", map[string]string{
			"memory/g/memory.oom_control":     ctl,
			"memory/g/job/memory.oom_control": ctl + "oom_kill 1\n",
		}, 1, true},
		{"kernel without the counter", map[string]string{"memory/g/memory.oom_control": ctl}, 0, false},
		{"no group", nil, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for p, c := range tc.files {
				writeFakeFile(t, filepath.Join(root, p), c)
			}
			n, ok := Group{Root: root, Path: "g"}.OOMKills()
			if n != tc.want || ok != tc.known {
				t.Errorf("OOMKills() = %d, %v; want %d, %v", n, ok, tc.want, tc.known)
			}
		})
	}
}

// A process added to the group is listed, counted, killed with its
// group, and the group then goes.
func TestAddKillRemove(t *testing.T) {
	g := hostGroup(t, "job-1")
	if _, err := g.Create(Limits{MemBytes: 64 << 20, PidsMax: 50}); err != nil {
		t.Fatal(err)
	}
	cmd := startSleep(t)
	pid := cmd.Process.Pid
	if err := g.Add(pid); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"memory", "cpu", "cpuacct", "pids"} {
		b, _ := os.ReadFile(filepath.Join(g.Dir(c), "cgroup.procs"))
		if !slices.Contains(strings.Fields(string(b)), strconv.Itoa(pid)) {
			t.Errorf("%s: pid %d not in cgroup.procs %q", c, pid, b)
		}
	}
	if got := g.Procs(""); !slices.Equal(got, []int{pid}) {
		t.Errorf("Procs = %v, want [%d]", got, pid)
	}
	if _, ok := g.CPU(); !ok {
		t.Error("CPU() unknown for a live group")
	}
	// sleep's pages were charged before it moved in: the peak may be 0.
	if p, ok := g.PeakMemBytes(); !ok || p < 0 {
		t.Errorf("PeakMemBytes() = %d, %v", p, ok)
	}
	// Remove kills nothing: a busy group stays and is reported.
	if err := g.Remove(); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("Remove of a busy group = %v, want EBUSY", err)
	}
	if !exists(g.Dir("pids")) {
		t.Fatal("Remove took a busy group")
	}
	if err := g.Kill(t.Context(), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if !killedBySIGKILL(cmd) {
		t.Errorf("sleep ended with %v, want SIGKILL", cmd.ProcessState)
	}
	if got := g.Procs(""); len(got) != 0 {
		t.Errorf("Procs after Kill = %v", got)
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	ents, _ := filepath.Glob(filepath.Join(hostRoot, "*", g.Path))
	if len(ents) != 0 {
		t.Errorf("left after Remove: %v", ents)
	}
}

// Memory over the limit in a child cgroup (where runc puts a container)
// is an OOM kill the group counts.
//
// spec: NODE-09, NODE-17
func TestOOMKillInAChildIsCounted(t *testing.T) {
	g := hostGroup(t, "job-1")
	if _, err := g.Create(Limits{MemBytes: 32 << 20}); err != nil {
		t.Fatal(err)
	}
	if n, _ := g.ReadInt("memory", "memory.use_hierarchy"); n != 1 {
		t.Skip("memory.use_hierarchy is off: a child is not bound by the group's limit")
	}
	sub := filepath.Join(g.Dir("memory"), "job")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	before, _ := g.OOMKills()
	// bash waits on stdin until it is in the child, then holds 128 MiB.
	cmd := osexec.Command("bash", "--noprofile", "--norc", "-c",
		`read -r _ || exit 125; x=$(head -c 134217728 /dev/zero | tr '\0' a); echo ${#x}`)
	gate, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := os.WriteFile(filepath.Join(sub, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := gate.Write([]byte("\n")); err != nil {
		t.Fatal(err)
	}
	if !killedBySIGKILL(cmd) {
		t.Errorf("bash over the limit ended with %v, want SIGKILL", cmd.ProcessState)
	}
	if after, ok := g.OOMKills(); !ok || after <= before {
		t.Errorf("OOMKills() = %d, %v after an OOM kill in a child; before %d", after, ok, before)
	}
	if p, ok := g.PeakMemBytes(); !ok || p < 16<<20 {
		t.Errorf("PeakMemBytes() = %d, %v after reaching the limit in a child", p, ok)
	}
	// The pipeline's other processes may still be dying: kill them (they
	// are in the memory hierarchy only), then Remove takes the child too.
	if err := KillTree(t.Context(), g.Dir("memory"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	if exists(sub) || exists(g.Dir("memory")) {
		t.Error("group or child left after Remove")
	}
}

// A leftover group's processes, in it and in its child cgroups, are
// killed and the whole tree removed.
//
// spec: FAIL-08
func TestRemoveTreeKillsAndRemoves(t *testing.T) {
	g := hostGroup(t, "job-1")
	if _, err := g.Create(Limits{}); err != nil {
		t.Fatal(err)
	}
	child := filepath.Join(g.Dir("pids"), "svc-0")
	if err := os.Mkdir(child, 0o755); err != nil {
		t.Fatal(err)
	}
	inGroup, inChild := startSleep(t), startSleep(t)
	if err := os.WriteFile(filepath.Join(g.Dir("pids"), "cgroup.procs"), []byte(strconv.Itoa(inGroup.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(child, "cgroup.procs"), []byte(strconv.Itoa(inChild.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := RemoveTree(t.Context(), g.Dir("pids"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*osexec.Cmd{inGroup, inChild} {
		if !killedBySIGKILL(c) {
			t.Errorf("pid %d ended with %v, want SIGKILL", c.Process.Pid, c.ProcessState)
		}
	}
	if exists(child) || exists(g.Dir("pids")) {
		t.Error("cgroup tree left after RemoveTree")
	}
	if err := RemoveTree(t.Context(), g.Dir("pids"), time.Second); err != nil {
		t.Errorf("RemoveTree of a missing directory = %v", err)
	}
}

func TestKillTreeReportsSurvivors(t *testing.T) {
	root := t.TempDir()
	// A process that never leaves: the file is not a cgroup.
	writeFakeFile(t, filepath.Join(root, "sub", "cgroup.procs"), strconv.Itoa(noSuchPID)+"\n")
	err := KillTree(t.Context(), root, 30*time.Millisecond)
	if !errors.Is(err, ErrSurvivors) || !strings.Contains(err.Error(), strconv.Itoa(noSuchPID)) {
		t.Errorf("KillTree = %v, want ErrSurvivors naming %d", err, noSuchPID)
	}
	// A done context ends the wait long before its bound.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	start := time.Now()
	if err := KillTree(ctx, root, time.Hour); !errors.Is(err, ErrSurvivors) {
		t.Errorf("KillTree with a done context = %v, want ErrSurvivors", err)
	}
	if d := time.Since(start); d > time.Minute {
		t.Errorf("KillTree with a done context took %v", d)
	}
	if err := KillTree(t.Context(), filepath.Join(root, "missing"), time.Second); err != nil {
		t.Errorf("KillTree of a missing directory = %v", err)
	}
}

// The shared parent goes only when its last group has gone.
func TestRemoveEmpty(t *testing.T) {
	g := hostGroup(t, "job-1")
	parent := Group{Root: g.Root, Path: filepath.Dir(g.Path)}
	if _, err := g.Create(Limits{}); err != nil {
		t.Fatal(err)
	}
	parent.RemoveEmpty()
	if !exists(g.Dir("memory")) || !exists(parent.Dir("memory")) {
		t.Fatal("RemoveEmpty took a parent that still has a group")
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	parent.RemoveEmpty()
	if left, _ := filepath.Glob(filepath.Join(hostRoot, "*", parent.Path)); len(left) != 0 {
		t.Errorf("empty parent left: %v", left)
	}
}

// Create succeeds while another goroutine removes the shared parent
// whenever it finds it empty, as the last job under it leaving (or a
// test's cleanup) does — here up to 5 times per hierarchy, fewer than
// Create's attempts, so every Create must succeed; without the re-make
// one of them would fail with ENOENT.
func TestCreateSurvivesAParentRemovedMeanwhile(t *testing.T) {
	root := fakeRoot(t, "memory", "cpu", "cpuacct", "pids")
	const removals = 5
	stop := make(chan struct{})
	spent := make(chan struct{}) // closed when every removal is used
	done := make(chan int)
	go func() {
		left := map[string]int{}
		for _, c := range controllers {
			left[c] = removals
		}
		total := 0
		defer func() { done <- total }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, c := range controllers {
				if left[c] > 0 && syscall.Rmdir(filepath.Join(root, c, "shared")) == nil {
					left[c]--
					if total++; total == removals*len(controllers) {
						close(spent)
					}
				}
			}
		}
	}()
	defer func() {
		close(stop)
		t.Logf("the parent was removed %d times meanwhile", <-done)
	}()
	for i := range 5000 {
		select {
		case <-spent:
			return
		default:
		}
		g := Group{Root: root, Path: "shared/job-" + strconv.Itoa(i)}
		if _, err := g.Create(Limits{}); err != nil {
			t.Fatalf("Create #%d with the parent removed meanwhile: %v", i, err)
		}
		if err := g.Remove(); err != nil {
			t.Fatal(err)
		}
	}
}
