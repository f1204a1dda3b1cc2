// Package microvmtest gives the tests that boot a microVM what they need
// from the host: a check that QEMU, a guest kernel, the image tools
// (mkfs.ext4, qemu-img) and busybox-static are here, which skips naming
// what is missing (and fails instead under CI=true, internal/need), and
// a freshly built static vk-agent for the guest.
//
// node/exec/microvm's own tests cannot use it (this package imports that
// one) and keep their own agent build.
package microvmtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/vk-ci/vk/internal/need"
	"github.com/vk-ci/vk/internal/ocitest"
	"github.com/vk-ci/vk/node/exec/microvm"
)

// NeedHost skips t (fails it under CI=true) unless the host has QEMU, a
// guest kernel, mkfs.ext4, qemu-img and busybox-static.
func NeedHost(t testing.TB) {
	t.Helper()
	if err := microvm.Available("", ""); err != nil {
		need.Missingf(t, "%v", err)
	}
	if err := microvm.AvailableImages(); err != nil {
		need.Missingf(t, "%v", err)
	}
	if _, err := os.Stat(ocitest.Busybox); err != nil {
		need.Missingf(t, "busybox-static missing (apt-get install -y busybox-static): %v", err)
	}
}

// Agent checks the host as [NeedHost] does and returns the path of a
// static vk-agent built from this tree into t's temporary directory.
func Agent(t testing.TB) string {
	t.Helper()
	NeedHost(t)
	bin := filepath.Join(t.TempDir(), "vk-agent")
	build := exec.Command("go", "build", "-o", bin, "github.com/vk-ci/vk/cmd/vk-agent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build vk-agent: %v\n%s", err, out)
	}
	return bin
}
