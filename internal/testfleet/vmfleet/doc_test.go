// Package vmfleet_test runs a pipeline through the end-to-end fleet
// (internal/testfleet) on a node with [executor] backend = "microvm":
// jobs in QEMU guests (TCG here, each boot 10–40 s on a loaded host),
// services in guests beside them, an OOM inside one. It is a package of
// its own, test files only, because go test gives each package 600 s and
// internal/testfleet's own tests take most of that; the microVM faults
// are internal/testfleet/vmfaults', for the same reason. The shared
// helpers are internal/testfleet/fleettest's.
package vmfleet_test

import (
	"context"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/testfleet"
	"github.com/vk-ci/vk/internal/testfleet/fleettest"
)

// imageMarker is baked into the test image: only a job running in it can
// read it.
const imageMarker = "marker-only-inside-the-image"

var (
	readme       = fleettest.Readme
	needBinaries = fleettest.NeedBinaries
	stripANSI    = fleettest.StripANSI
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
