package sim

import (
	"testing"

	"github.com/vk-ci/vk/internal/deptest"
)

// The simulator drives sched and never the hub (STYLE layout): what it
// proves about a policy is about the core, not the server around it.
func TestDeps(t *testing.T) {
	deptest.Forbid(t, "github.com/vk-ci/vk/sim",
		"github.com/vk-ci/vk/hub", "github.com/vk-ci/vk/hub/", "github.com/vk-ci/vk/node", "github.com/vk-ci/vk/node/",
		"github.com/vk-ci/vk/relay", "github.com/vk-ci/vk/relay/", "github.com/vk-ci/vk/proto/", "net/http")
}
