// Package vmfleet_test runs a pipeline through the end-to-end fleet
// (internal/testfleet) on a node with [executor] backend = "microvm":
// jobs in QEMU guests (TCG here, each boot 10–40 s on a loaded host),
// services in guests beside them, an OOM inside one. It is a package of
// its own, test files only, because go test gives each package 600 s and
// internal/testfleet's own tests take most of that; the microVM faults
// are internal/testfleet/vmfaults', for the same reason. The fleet
// helpers both use are internal/testfleet/fleettest's, called directly.
package vmfleet_test

// imageMarker is baked into the test image: only a job running in it can
// read it.
const imageMarker = "marker-only-inside-the-image"
