package hub

import (
	"testing"

	"github.com/vk-ci/vk/internal/deptest"
)

// The hub speaks the protocol to its peers and never links their code: no
// package under hub/, and not vk-hub, imports the relay, the node or the
// client library relays and nodes call the hub with (wire types live in
// proto).
func TestDeps(t *testing.T) {
	pkgs := append(deptest.Packages(t, "github.com/vk-ci/vk/hub/..."), "github.com/vk-ci/vk/cmd/vk-hub")
	if len(pkgs) < 5 {
		t.Fatalf("go list hub/... found only %v", pkgs)
	}
	for _, p := range pkgs {
		deptest.Forbid(t, p, "github.com/vk-ci/vk/relay", "github.com/vk-ci/vk/relay/",
			"github.com/vk-ci/vk/node", "github.com/vk-ci/vk/node/", "github.com/vk-ci/vk/hubclient")
	}
}
