package sim

import (
	"testing"

	"github.com/vk-ci/vk/relay"
)

// The simulator's vk relay runs as many request loops per runner as
// vk-gitlab does when its configuration sets none, capped the same way by
// the relay's concurrent (the sim's relays have fewer than the 43 runners
// at which vk-gitlab's per-relay ticket cap would lower it): the goals measured with the sim's defaults are
// the goals an operator gets with the relay's (one set of books).
//
// spec: ARB-02, RELAY-02
func TestDefaultsAreTheRelays(t *testing.T) {
	if DefaultRequestConcurrency != relay.DefaultRequestConcurrency {
		t.Fatalf("sim's default request loops %d, vk-gitlab's %d", DefaultRequestConcurrency, relay.DefaultRequestConcurrency)
	}
	for _, conc := range []int{0, 1, 3, 6, 10} {
		s := load(t, "both-backlogged")
		s.VK.RequestConcurrency, s.VK.RelayConcurrent = 0, conc
		s.defaults()
		if want := relay.DefaultLoops(0, conc, 1); s.VK.RequestConcurrency != want {
			t.Errorf("relay concurrent %d: sim runs %d loops per runner, vk-gitlab %d", conc, s.VK.RequestConcurrency, want)
		}
	}
}
