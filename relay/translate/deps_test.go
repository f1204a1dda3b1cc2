package translate

import (
	"testing"

	"github.com/vk-ci/vk/internal/deptest"
)

// Translation depends on the wire types it converts between and nothing
// with a network, clock or state of its own: never the hub or the
// scheduler (STYLE layout).
func TestDeps(t *testing.T) {
	deptest.StdlibOnly(t, "github.com/vk-ci/vk/relay/translate",
		"github.com/vk-ci/vk/proto/job",
		"github.com/vk-ci/vk/relay/gitlab",
		"github.com/vk-ci/vk/internal/clock",
		"github.com/vk-ci/vk/internal/logkey",
		"github.com/vk-ci/vk/internal/version",
	)
	deptest.Forbid(t, "github.com/vk-ci/vk/relay/translate",
		"github.com/vk-ci/vk/hub/", "github.com/vk-ci/vk/sched", "github.com/vk-ci/vk/sched/")
}
