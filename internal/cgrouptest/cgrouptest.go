// Package cgrouptest cleans up after the test harnesses that run real
// node agents (internal/testfleet, internal/realhub): each gives its
// node a cgroup parent of its own, which the stopped agent leaves behind.
package cgrouptest

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Root is where the cgroup v1 controllers (and the unified hierarchy) are
// mounted.
const Root = "/sys/fs/cgroup"

// RemoveParents removes a stopped node's (now empty) cgroup parents,
// parent and parent-oci, in every hierarchy, for the process and the oci
// backends: stopped agents remove their jobs' cgroups, not the parents.
// For test harnesses that start nodes of their own (internal/realhub).
func RemoveParents(parent string) {
	if parent == "" {
		return
	}
	ctrls, err := os.ReadDir(Root)
	if err != nil {
		return
	}
	// The parents empty once the last killed job's processes have left
	// their cgroups; under load that can take a moment after the agent
	// stopped, so an rmdir answered EBUSY is retried for a while (external
	// processes: polled with a deadline).
	deadline := time.Now().Add(5 * time.Second)
	for _, c := range ctrls {
		for _, p := range []string{parent, parent + "-oci"} {
			dir := filepath.Join(Root, c.Name(), p)
			for {
				err := os.Remove(dir)
				if err == nil || !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
}
