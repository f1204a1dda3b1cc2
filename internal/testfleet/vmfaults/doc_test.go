// Package vmfaults_test runs the faults of the end-to-end fleet
// (internal/testfleet) on a node with [executor] backend = "microvm":
// cancels, a timeout and a real SIGKILL of the node's process while a
// guest runs a job. It is a package of its own, test files only, so that
// its guest boots (TCG here, 10–40 s each on a loaded host) get go test's
// 600 s to themselves; internal/testfleet/vmfleet has the pipeline. The
// fleet helpers both use are internal/testfleet/fleettest's, called
// directly.
package vmfaults_test
