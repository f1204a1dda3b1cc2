package gitlab

import (
	"testing"

	"github.com/vk-ci/vk/internal/deptest"
)

// The GitLab client depends on the standard library and vk's small
// internal helpers only: never on the hub, the scheduler, the node or
// other relay packages (STYLE layout).
func TestDeps(t *testing.T) {
	deptest.StdlibOnly(t, "github.com/vk-ci/vk/relay/gitlab",
		"github.com/vk-ci/vk/internal/clock",
		"github.com/vk-ci/vk/internal/logkey",
		"github.com/vk-ci/vk/internal/version",
	)
}
