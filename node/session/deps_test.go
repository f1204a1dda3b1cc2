package session

import (
	"testing"

	"github.com/vk-ci/vk/internal/deptest"
)

// The node never imports the hub or the scheduler (STYLE "Layout").
func TestDeps(t *testing.T) {
	deptest.Forbid(t, "github.com/vk-ci/vk/node/session", "github.com/vk-ci/vk/hub/", "github.com/vk-ci/vk/sched", "github.com/vk-ci/vk/sched/", "github.com/vk-ci/vk/relay/")
}
