package sessionclient

import (
	"testing"

	"github.com/vk-ci/vk/internal/deptest"
)

// The shared client knows no session kind: no proto package, and never
// the hub, the scheduler, the node or the relay. Kinds bring their frames.
func TestDeps(t *testing.T) {
	deptest.Forbid(t, "github.com/vk-ci/vk/internal/sessionclient",
		"github.com/vk-ci/vk/proto/", "github.com/vk-ci/vk/hub/", "github.com/vk-ci/vk/sched", "github.com/vk-ci/vk/sched/",
		"github.com/vk-ci/vk/node/", "github.com/vk-ci/vk/relay/")
}
