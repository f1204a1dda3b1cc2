package node

import (
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/microvmtest"
	"github.com/vk-ci/vk/internal/ocitest"
	"github.com/vk-ci/vk/internal/registrytest"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/proto/dispatch"
	"github.com/vk-ci/vk/proto/job"
)

// resultWithin is resultOf with a longer wait: a guest under TCG boots in
// tens of seconds on a loaded host.
func resultWithin(t *testing.T, h *testHub, from int, id string, d time.Duration) *dispatch.Result {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		h.mu.Lock()
		for i := from; i < len(h.log); i++ {
			if r, ok := h.log[i].(*dispatch.Result); ok && r.Job == id {
				h.mu.Unlock()
				return r
			}
		}
		ch := h.changed
		h.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("no result for %s in %v; frames: %s", id, d, h.dump())
		}
	}
}

// leftoverVM starts a real QEMU as a crashed node's job would have left
// it — paused before the guest's first instruction, its pid file and
// agent socket in the job's directory under root — and returns its pid.
func leftoverVM(t *testing.T, root, id string) int {
	t.Helper()
	dir := filepath.Join(root, id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := osexec.Command("qemu-system-x86_64", "-M", "microvm", "-accel", "tcg", "-S", "-nodefaults", "-no-user-config",
		"-nographic", "-display", "none", "-pidfile", filepath.Join(dir, "qemu.pid"),
		"-chardev", "socket,id=agent,path="+filepath.Join(dir, "agent.sock")+",server=on,wait=off")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go cmd.Wait() // reaps it once the sweep killed it
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	for i := 0; ; i++ {
		if _, err := os.Stat(filepath.Join(dir, "qemu.pid")); err == nil {
			break
		}
		if i == 500 {
			t.Fatal("the leftover QEMU wrote no pid file")
		}
		time.Sleep(10 * time.Millisecond) // polling for a file QEMU writes
	}
	os.WriteFile(filepath.Join(dir, "root.qcow2"), []byte("overlay"), 0o600)
	return cmd.Process.Pid
}

// With [executor] backend = "microvm" the node runs a job in its own
// guest booted from the job's image, pulled from a real registry: the
// script runs in the image's tree, and the trace names the executor.
// Before that, at start, the node swept what a crashed run left: a QEMU
// still running in a job directory is killed, and the directory (socket,
// overlay) removed. The image's disk made for the job stays cached,
// untouched by what the job wrote.
//
// spec: STAGE-04, STAGE-08, NODE-15, NODE-17
func TestMicroVMBackendRunsJobInItsImage(t *testing.T) {
	agent := microvmtest.Agent(t)
	reg := registrytest.New(t)
	pushTestImage(t, reg.Addr, "test/vm", "v1", testRootfsLayer(t, ocitest.File{Name: "etc/vk-marker", Body: "inside-the-image\n"}))
	state := t.TempDir()
	pid := leftoverVM(t, filepath.Join(state, "microvm"), "crashed-job")

	h, a := connected(t, func(c *Config) {
		c.Node.StateDir = state
		c.Executor.Backend = BackendMicroVM
		c.Executor.MicroVM = MicroVMConfig{Accel: "tcg", Agent: agent, BootTimeoutSecs: 300, DiskMiB: 128}
		c.Executor.Images.PlainHTTP = []string{reg.Addr}
	}, Options{})
	if a.be.microvm == nil || a.be.reported() != BackendMicroVM {
		t.Fatalf("backend microvm: no microvm executor (reported %q)", a.be.reported())
	}
	if _, err := os.Stat(filepath.Join(state, "microvm", "crashed-job")); !os.IsNotExist(err) {
		t.Errorf("the crashed job's directory is still there (%v)", err)
	}
	if st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil && !strings.Contains(string(st), ") Z ") {
		t.Errorf("the crashed job's QEMU %d still runs", pid)
	}

	spec := testSpec("cat /etc/vk-marker", `[ -n "$BASH_VERSION" ] && echo "in bash"`, "grep -c ^processor /proc/cpuinfo",
		"echo job > /written-by-job")
	spec.GitLabCI.Image = &job.Image{Name: reg.Addr + "/test/vm:v1"}
	spec.GitLabCI.Variables = append(spec.GitLabCI.Variables, job.Variable{Key: "MICROVM_CPUS", Value: "1"}, job.Variable{Key: "MICROVM_MEM", Value: "384M"})
	from := h.mark()
	startWith(t, h, "job-vm", "r1", spec)
	res := resultWithin(t, h, from, "job-vm", 5*time.Minute)
	out := string(h.output("job-vm"))
	if res.Result.Failure != "" {
		t.Fatalf("failure %q: %s\n%s", res.Result.Failure, res.Result.Message, out)
	}
	for _, want := range []string{"Using the microvm executor with bash...", "O inside-the-image\n", "O in bash\n", "O 1\n", "after-script-ran"} {
		if !strings.Contains(out, want) {
			t.Errorf("trace lacks %q:\n%s", want, out)
		}
	}
	if u := res.Result.Usage; u == nil || u.CPUs != 1 || u.MemMiB != 384 || u.CPUMS <= 0 || u.PeakMemBytes <= 0 {
		t.Errorf("usage %+v: want the guest's size 1 CPU, 384 MiB, and QEMU's CPU and peak memory", u)
	}
	ents, _ := os.ReadDir(filepath.Join(state, "microvm"))
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "disks initrd.cpio" {
		t.Errorf("left in <state_dir>/microvm after the job: %v, want the disks and the initramfs", names)
	}
	// The job wrote to its copy-on-write overlay, never to the image's
	// cached disk.
	disks, _ := filepath.Glob(filepath.Join(state, "microvm", "disks", "*.ext4"))
	if len(disks) != 1 {
		t.Fatalf("image disks %v, want one", disks)
	}
	if _, err := os.Stat("/usr/sbin/debugfs"); err == nil {
		o, _ := osexec.Command("/usr/sbin/debugfs", "-R", "stat /written-by-job", disks[0]).CombinedOutput()
		m, _ := osexec.Command("/usr/sbin/debugfs", "-R", "cat /etc/vk-marker", disks[0]).CombinedOutput()
		if !strings.Contains(string(o), "not found") || !strings.Contains(string(m), "inside-the-image") {
			t.Errorf("the image's disk: stat of the job's file %q, the image's file %q", o, m)
		}
	}
}

// The service keys of [executor.microvm] reach the microvm executor's
// configuration: the service VMs' memory and vCPUs and the wait for
// their ports, -1 meaning no health check.
func TestMicroVMServiceKeysReachTheExecutor(t *testing.T) {
	for _, tt := range []struct {
		keys     MicroVMConfig
		mem      int64
		cpus     int
		wait     time.Duration
		waitDesc string
	}{
		{MicroVMConfig{ServiceMemMiB: 512, ServiceCPUs: 2, WaitForServicesTimeout: 90}, 512, 2, 90 * time.Second, "90 s"},
		{MicroVMConfig{WaitForServicesTimeout: -1}, 0, 0, -1, "negative"},
		{MicroVMConfig{}, 0, 0, 0, "0, the executor's default"},
	} {
		cfg := testConfig(t, t.TempDir())
		tt.keys.Agent = "/nonexistent/vk-agent" // only named, never run here
		cfg.Executor.MicroVM = tt.keys
		a := &Agent{cfg: cfg, log: testlog.New(t)}
		mc, err := a.microvmConfig(&backends{microvmRoot: filepath.Join(cfg.Node.StateDir, "microvm")})
		if err != nil {
			t.Fatal(err)
		}
		if mc.ServiceMemMiB != tt.mem || mc.ServiceCPUs != tt.cpus || mc.ServiceWait != tt.wait {
			t.Errorf("keys %+v: executor gets service memory %d, vCPUs %d, wait %v; want %d, %d, %s",
				tt.keys, mc.ServiceMemMiB, mc.ServiceCPUs, mc.ServiceWait, tt.mem, tt.cpus, tt.waitDesc)
		}
	}
}
