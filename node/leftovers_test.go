package node

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/pki"
	"github.com/vk-ci/vk/internal/need"
	"github.com/vk-ci/vk/internal/registrytest"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
	"github.com/vk-ci/vk/proto/job"
)

// childEnv carries a node config (JSON) to a child agent process: the
// test binary re-executed, which runs an agent until it is killed.
const childEnv = "VK_NODE_TEST_CHILD"

type childSpec struct {
	Config Config
	HubURL string
	CAPEM  []byte
}

func TestMain(m *testing.M) {
	if v := os.Getenv(childEnv); v != "" {
		runChildAgent(v)
		return
	}
	os.Exit(m.Run())
}

// runChildAgent runs an agent for a killed-agent test and never returns:
// the parent kills it with SIGKILL.
func runChildAgent(spec string) {
	var cs childSpec
	if err := json.Unmarshal([]byte(spec), &cs); err != nil {
		fmt.Fprintln(os.Stderr, "child spec:", err)
		os.Exit(2)
	}
	tc, err := pki.ClientConfig(cs.CAPEM, "")
	if err != nil {
		fmt.Fprintln(os.Stderr, "child tls:", err)
		os.Exit(2)
	}
	_, err = Start(context.Background(), cs.Config, nil, Options{
		Identity:  &Identity{NodeID: testNode, Key: testKey, HubURL: cs.HubURL},
		TLSConfig: tc,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child start:", err)
		os.Exit(2)
	}
	select {}
}

// startChild runs an agent with cfg in a child process.
func startChild(t *testing.T, h *testHub, cfg Config) *osexec.Cmd {
	t.Helper()
	b, err := json.Marshal(childSpec{Config: cfg, HubURL: h.url, CAPEM: h.caPEM})
	if err != nil {
		t.Fatal(err)
	}
	cmd := osexec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(b))
	logf, err := os.Create(filepath.Join(t.TempDir(), "child.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("child agent's output:\n%s", b)
		}
	})
	return cmd
}

// alive reports whether pid exists (a zombie counts).
func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// A node agent killed mid-job (SIGKILL: no cleanup) leaves the job's
// processes in its cgroup, and with the oci backend its runc container
// and overlay mount; the next agent on the same state dir removes them
// all before it runs anything, and the job ends interrupted (FAIL-08).
//
// spec: FAIL-08
func TestKilledAgentLeftoversRemoved(t *testing.T) {
	for _, backend := range []string{BackendProcess, BackendOCI} {
		t.Run(backend, func(t *testing.T) {
			if _, err := os.Stat(filepath.Join(cgroupRoot, "memory", "memory.limit_in_bytes")); err != nil || os.Geteuid() != 0 {
				need.Missingf(t, "needs root and cgroup v1 (memory) to leave cgroups behind: %v", err)
			}
			h := startHub(t)
			cfg := testConfig(t, t.TempDir())
			parent := testCgroupParent(t)
			cfg.Executor.Cgroups, cfg.Executor.CgroupParent, cfg.Executor.Backend = true, parent, backend
			pidFile := filepath.Join(t.TempDir(), "sleep.pid")
			spec := testSpec("sleep 1000 & echo $! > " + pidFile + "; echo started; wait")
			cgParent := parent
			if backend == BackendOCI {
				needOCI(t)
				reg := registrytest.New(t)
				pushTestImage(t, reg.Addr, "test/job", "v1", testRootfsLayer(t))
				cfg.Executor.Images.PlainHTTP = []string{reg.Addr}
				spec = testSpec("sleep 1000 & echo started; wait")
				spec.GitLabCI.Image = &job.Image{Name: reg.Addr + "/test/job:v1"}
				cgParent = parent + "-oci"
			}
			child := startChild(t, h, cfg)
			waitFor[*dispatch.Held](h, 0, nil)
			from := h.mark()
			startWith(t, h, "job-k", "r1", spec)
			h.waitCond("the job's first output", func() bool { return strings.Contains(string(h.out["job-k"]), "O started\n") })
			jobCg := filepath.Join(cgroupRoot, "memory", cgParent, "job-k")
			var sleepPID int
			if backend == BackendProcess {
				b, err := os.ReadFile(pidFile)
				if err != nil {
					t.Fatal(err)
				}
				sleepPID, _ = strconv.Atoi(strings.TrimSpace(string(b)))
			}

			if err := child.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			child.Wait()
			// The premise: the dead agent left its job behind.
			if _, err := os.Stat(jobCg); err != nil {
				t.Fatalf("no leftover job cgroup after the kill: %v", err)
			}
			ociRoot := filepath.Join(cfg.Node.StateDir, "oci")
			runcList := func() string {
				out, _ := osexec.Command("runc", "--root", filepath.Join(ociRoot, ".runc"), "list", "-q").Output()
				return strings.TrimSpace(string(out))
			}
			mounts := func() []string {
				b, _ := os.ReadFile("/proc/self/mountinfo")
				return mountPoints(b, ociRoot)
			}
			switch backend {
			case BackendProcess:
				if sleepPID <= 0 || !alive(sleepPID) {
					t.Fatalf("the job's sleep (pid %d) died with the agent: nothing left to clean", sleepPID)
				}
			case BackendOCI:
				if runcList() == "" || len(mounts()) == 0 {
					t.Fatalf("no leftover container (%q) or mounts (%v) after the kill", runcList(), mounts())
				}
			}

			startAgent(t, h, cfg, Options{})
			if dirs, _ := filepath.Glob(filepath.Join(cgroupRoot, "*", cgParent, "job-k")); len(dirs) != 0 {
				t.Errorf("job cgroups left after the restart: %v", dirs)
			}
			if backend == BackendProcess {
				deadline := time.Now().Add(10 * time.Second)
				for alive(sleepPID) && time.Now().Before(deadline) {
					time.Sleep(20 * time.Millisecond) // an external process being reaped by init
				}
				if alive(sleepPID) {
					t.Errorf("the job's sleep (pid %d) still runs after the restart", sleepPID)
				}
			} else {
				if l := runcList(); l != "" {
					t.Errorf("runc containers left after the restart: %q", l)
				}
				if m := mounts(); len(m) != 0 {
					t.Errorf("mounts left after the restart: %v", m)
				}
				if ents, _ := os.ReadDir(ociRoot); len(ents) != 1 {
					t.Errorf("oci root after the restart: %v, want only .runc", ents)
				}
			}
			res := resultOf(h, from, "job-k")
			if res.Result.Failure != client.FailureInterrupted {
				t.Errorf("failure %q, want interrupted", res.Result.Failure)
			}
		})
	}
}

func TestMountPoints(t *testing.T) {
	info := []byte(`22 1 8:1 / / rw - ext4 /dev/sda1 rw
90 22 0:50 / /var/lib/vk/node/oci/j1/job/merged rw - overlay overlay rw
91 22 0:51 / /var/lib/vk/node/oci/j\0401/job/merged rw - overlay overlay rw
92 90 0:52 / /var/lib/vk/node/oci/j1/job/merged/proc rw - proc proc rw
93 22 0:53 / /var/lib/vk/node/oci-other/x rw - tmpfs tmpfs rw
`)
	got := mountPoints(info, "/var/lib/vk/node/oci")
	want := []string{"/var/lib/vk/node/oci/j1/job/merged/proc", "/var/lib/vk/node/oci/j1/job/merged", "/var/lib/vk/node/oci/j 1/job/merged"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("mountPoints = %q, want %q", got, want)
	}
}
