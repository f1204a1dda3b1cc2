package hubclient

import (
	"testing"

	"github.com/vk-ci/vk/internal/deptest"
)

// The relay and the node import this package, and they must never depend
// on the hub's packages or the scheduler (STYLE, import DAG).
func TestDeps(t *testing.T) {
	deptest.Forbid(t, "github.com/vk-ci/vk/hubclient", "github.com/vk-ci/vk/hub", "github.com/vk-ci/vk/hub/", "github.com/vk-ci/vk/sched",
		"github.com/vk-ci/vk/relay", "github.com/vk-ci/vk/relay/", "github.com/vk-ci/vk/node", "github.com/vk-ci/vk/node/")
}
