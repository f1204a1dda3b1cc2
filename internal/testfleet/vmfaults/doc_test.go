// Package vmfaults_test runs the faults of the end-to-end fleet
// (internal/testfleet) on a node with [executor] backend = "microvm":
// cancels, a timeout and a real SIGKILL of the node's process while a
// guest runs a job. It is a package of its own, test files only, so that
// its guest boots (TCG here, 10–40 s each on a loaded host) get go test's
// 600 s to themselves; internal/testfleet/vmfleet has the pipeline. The
// shared helpers are internal/testfleet/fleettest's.
package vmfaults_test

import (
	"context"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/testfleet"
	"github.com/vk-ci/vk/internal/testfleet/fleettest"
)

var (
	readme       = fleettest.Readme
	needBinaries = fleettest.NeedBinaries
	stripANSI    = fleettest.StripANSI
	buildVK      = fleettest.BuildVK
)

func newFleet(t *testing.T, o testfleet.Options) *testfleet.Fleet {
	t.Helper()
	return fleettest.Start(t, o)
}

func timeout(t *testing.T, d time.Duration) context.Context { return fleettest.Timeout(t, d) }

func checkTraces(t *testing.T, ctx context.Context, tn *testfleet.Tenant, pl gitlabfake.Pipeline) int {
	t.Helper()
	return fleettest.CheckTraces(t, ctx, tn, pl)
}
