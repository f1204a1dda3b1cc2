package microvm

import (
	"log/slog"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// The sweep removes every job directory a dead executor left and keeps
// the shared initramfs and the images' disks; a pid file naming a process
// that is not that job's QEMU (its pid recycled: here, this test's own
// process) kills nothing. A live leftover QEMU being killed is
// TestMicroVMBackendRunsJobInItsImage's (node).
func TestSweepKeepsSharedFilesAndSparesRecycledPIDs(t *testing.T) {
	root := t.TempDir()
	for _, p := range []string{"initrd.cpio", "disks/abc.ext4", "job1/console.log", "job1/root.qcow2", "probe/kvm-probe/agent.sock"} {
		os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o700)
		os.WriteFile(filepath.Join(root, p), []byte("x"), 0o600)
	}
	os.WriteFile(filepath.Join(root, "job1", pidFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600)
	if err := Sweep(root, nil); err != nil {
		t.Fatal(err)
	}
	var left []string
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			left = append(left, rel)
		}
		return nil
	})
	if len(left) != 2 || left[0] != "disks/abc.ext4" || left[1] != "initrd.cpio" {
		t.Errorf("left after the sweep: %v, want the disk and the initramfs", left)
	}
	if err := Sweep(filepath.Join(root, "absent"), nil); err != nil {
		t.Errorf("sweep of a missing root: %v", err)
	}
}

// The disk of an image the store removed goes with it; other images'
// disks stay.
func TestRemoveDisksOfRemovedImages(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, disksDir), 0o700)
	for _, id := range []string{"aaa", "bbb"} {
		os.WriteFile(filepath.Join(root, disksDir, id+".ext4"), []byte("x"), 0o600)
	}
	e := &Executor{cfg: Config{Root: root}, log: slog.New(slog.DiscardHandler)}
	e.RemoveDisks([]string{"sha256:aaa", "sha256:never-made", "sha256:../../escape"})
	ents, _ := os.ReadDir(filepath.Join(root, disksDir))
	if len(ents) != 1 || ents[0].Name() != "bbb.ext4" {
		t.Errorf("disks left: %v, want bbb.ext4", ents)
	}
}

// A service's VM left running by a dead executor is killed with its
// job's directory: the sweep finds its pid file in the job's svc-N
// directory. The stand-in QEMU is a sleep whose command line names that
// directory, as QEMU's names its files there.
func TestSweepKillsLeftoverServiceVMs(t *testing.T) {
	root := t.TempDir()
	svc := filepath.Join(root, "job1", "svc-0")
	if err := os.MkdirAll(svc, 0o700); err != nil {
		t.Fatal(err)
	}
	// A shell that stays (sleep, then a no-op naming the directory).
	cmd := osexec.Command("sh", "-c", "sleep 300; : "+svc+"/")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if err := os.WriteFile(filepath.Join(svc, pidFile), []byte(strconv.Itoa(cmd.Process.Pid)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Sweep(root, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		t.Fatal("the leftover service VM still runs after the sweep")
	}
	if _, err := os.Stat(filepath.Join(root, "job1")); !os.IsNotExist(err) {
		t.Errorf("the job's directory is still there: %v", err)
	}
}
