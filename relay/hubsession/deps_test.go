package hubsession

import (
	"testing"

	"github.com/vk-ci/vk/internal/deptest"
)

// The relay never imports the hub or the scheduler (STYLE "Layout").
func TestDeps(t *testing.T) {
	deptest.Forbid(t, "github.com/vk-ci/vk/relay/hubsession", "github.com/vk-ci/vk/hub/", "github.com/vk-ci/vk/sched", "github.com/vk-ci/vk/sched/", "github.com/vk-ci/vk/node/")
}
