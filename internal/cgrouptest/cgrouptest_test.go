package cgrouptest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// RemoveParents removes the parent and its -oci sibling in every
// hierarchy, waiting for a process still leaving it (EBUSY until then).
func TestRemoveParents(t *testing.T) {
	mem := filepath.Join(Root, "memory")
	if _, err := os.Stat(filepath.Join(mem, "cgroup.procs")); err != nil || os.Geteuid() != 0 {
		t.Skipf("needs root and a cgroup v1 memory hierarchy at %s", mem)
	}
	parent := fmt.Sprintf("vk-cgrouptest-%d", os.Getpid())
	var dirs []string
	for _, c := range []string{"memory", "pids"} {
		for _, p := range []string{parent, parent + "-oci"} {
			d := filepath.Join(Root, c, p)
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Skipf("cannot make a cgroup: %v", err)
			}
			dirs = append(dirs, d)
		}
	}
	t.Cleanup(func() {
		for _, d := range dirs {
			os.Remove(d)
		}
	})
	// A process in one of them, ending shortly: the rmdir is EBUSY until
	// it has left.
	cmd := exec.Command("sleep", "0.3")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(Root, "memory", parent, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	go cmd.Wait()
	RemoveParents(parent)
	for _, d := range dirs {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s still there (%v)", d, err)
		}
	}
	RemoveParents("") // nothing to do, no panic
}
