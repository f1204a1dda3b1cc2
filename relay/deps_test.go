package relay

import (
	"testing"

	"github.com/vk-ci/vk/internal/deptest"
)

// The relay never imports the hub or the scheduler (STYLE layout): it
// talks to the hub through proto, hubclient and its session client only.
// Its tests start the real hub and node through relay/internal/realhub,
// which imports both; so no non-test relay package may import realhub,
// and this test catches it through the hub import.
func TestDeps(t *testing.T) {
	for _, p := range []string{"github.com/vk-ci/vk/relay", "github.com/vk-ci/vk/relay/loop",
		"github.com/vk-ci/vk/relay/state", "github.com/vk-ci/vk/cmd/vk-gitlab"} {
		deptest.Forbid(t, p, "github.com/vk-ci/vk/hub", "github.com/vk-ci/vk/hub/", "github.com/vk-ci/vk/sched", "github.com/vk-ci/vk/sched/",
			"github.com/vk-ci/vk/node", "github.com/vk-ci/vk/node/")
	}
	deptest.StdlibOnly(t, "github.com/vk-ci/vk/relay/state")
}
