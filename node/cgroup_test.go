package node

import (
	"context"
	"time"

	"github.com/vk-ci/vk/node/internal/cgroupv1"
)

// removeCgroupTree kills what runs in the cgroup dir and below and removes
// it, for tests' cleanup of their own cgroup parents.
func removeCgroupTree(dir string, wait time.Duration) error {
	return cgroupv1.RemoveTree(context.Background(), dir, wait)
}
