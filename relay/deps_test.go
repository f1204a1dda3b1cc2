package relay

import (
	"testing"

	"github.com/vk-ci/vk/internal/deptest"
)

// The relay speaks only the protocol (STYLE layout): no package under
// relay/, and not vk-gitlab, imports the hub, the scheduler or the node.
// It talks to the hub through proto, hubclient and its session client.
// The relay's tests start the real hub and node through internal/realhub,
// which lives outside relay/ for that reason; this test walks every
// package under relay/, so such a harness cannot move back in.
func TestDeps(t *testing.T) {
	pkgs := append(deptest.Packages(t, "github.com/vk-ci/vk/relay/..."), "github.com/vk-ci/vk/cmd/vk-gitlab")
	if len(pkgs) < 5 {
		t.Fatalf("go list relay/... found only %v", pkgs)
	}
	for _, p := range pkgs {
		deptest.Forbid(t, p, "github.com/vk-ci/vk/hub", "github.com/vk-ci/vk/hub/", "github.com/vk-ci/vk/sched", "github.com/vk-ci/vk/sched/",
			"github.com/vk-ci/vk/node", "github.com/vk-ci/vk/node/")
	}
	deptest.StdlibOnly(t, "github.com/vk-ci/vk/relay/state")
}
