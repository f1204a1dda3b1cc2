package microvm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The initramfs gets each module the guest needs by its path in the
// kernel's tree, those built in left out.
func TestKernelModulesOfTheHostKernel(t *testing.T) {
	k := newestKernel()
	if k == "" {
		t.Skip("no /boot/vmlinuz-*: nothing to look up")
	}
	ver := strings.TrimPrefix(filepath.Base(k), "vmlinuz-")
	if _, err := os.Stat(filepath.Join("/lib/modules", ver, "kernel/drivers/net/virtio_net.ko")); err != nil {
		t.Skip("this kernel has no virtio_net module")
	}
	got := kernelModules(ver, "../net/core/failover.ko", "net/no-such.ko", "net/virtio_net.ko")
	want := []string{"/lib/modules/" + ver + "/kernel/net/core/failover.ko", "/lib/modules/" + ver + "/kernel/drivers/net/virtio_net.ko"}
	if len(got) != 2 || filepath.Clean(got[0]) != want[0] || got[1] != want[1] {
		t.Errorf("kernelModules = %q, want %q", got, want)
	}
}
