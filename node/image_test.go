package node

import (
	"os"
	"testing"

	"github.com/vk-ci/vk/internal/need"
	"github.com/vk-ci/vk/internal/ocitest"
	"github.com/vk-ci/vk/node/exec/oci"
)

// The agent's container tests build their images with the same helpers as
// the container backend's (internal/ocitest): a busybox-static rootfs
// with the host's bash and its libraries, pushed to a real docker-registry.

// needOCI skips the test unless the container backend can run here.
func needOCI(t *testing.T) {
	t.Helper()
	if err := oci.Available("", ""); err != nil {
		need.Missingf(t, "container backend unavailable (needs root, cgroup v1 and runc): %v", err)
	}
	if _, err := os.Stat(ocitest.Busybox); err != nil {
		need.Missingf(t, "busybox-static missing for the test image (apt-get install -y busybox-static): %v", err)
	}
}

// testRootfsLayer is a gzip tar of the base rootfs and extra files.
func testRootfsLayer(t *testing.T, extra ...ocitest.File) []byte {
	t.Helper()
	return ocitest.Layer(t, append(ocitest.BaseFiles(t), extra...))
}

// pushTestImage pushes a one-layer image for this host's platform to the
// plain-HTTP registry at host as repo:tag.
func pushTestImage(t *testing.T, host, repo, tag string, layer []byte) {
	t.Helper()
	ocitest.Push(t, host, repo+":"+tag, ocitest.Host(), map[string]any{"Env": []string{"PATH=/bin"}}, layer)
}
