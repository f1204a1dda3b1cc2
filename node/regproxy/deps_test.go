package regproxy

import (
	"testing"

	"github.com/vk-ci/vk/internal/deptest"
)

// TestDeps fences the proxy off from everything that holds the node's own
// registry credential (node's config, node/xfer/cache's Store): it may use
// the standard library, the clock and the log keys only, so the node's
// credential cannot reach it by import.
//
// spec: XFER-18
func TestDeps(t *testing.T) {
	deptest.StdlibOnly(t, "github.com/vk-ci/vk/node/regproxy",
		"github.com/vk-ci/vk/internal/clock", "github.com/vk-ci/vk/internal/logkey")
}
