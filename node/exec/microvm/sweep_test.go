package microvm

import (
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"
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
