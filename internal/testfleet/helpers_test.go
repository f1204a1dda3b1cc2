package testfleet_test

import (
	"context"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/testfleet"
	"github.com/vk-ci/vk/internal/testfleet/fleettest"
)

// needBinaries skips the test when a real component it runs is missing
// (fleettest.NeedBinaries).
func needBinaries(t *testing.T, bins ...string) {
	t.Helper()
	fleettest.NeedBinaries(t, bins...)
}

// newFleet starts a fleet for the test (fleettest.Start).
func newFleet(t *testing.T, o testfleet.Options) *testfleet.Fleet {
	t.Helper()
	return fleettest.Start(t, o)
}

// timeout bounds a test's waits on the fleet.
func timeout(t *testing.T, d time.Duration) context.Context { return fleettest.Timeout(t, d) }

// oneJob is a pipeline of a single job.
func oneJob(name string, script ...string) gitlabfake.PipelineSpec {
	return gitlabfake.PipelineSpec{Jobs: []gitlabfake.JobSpec{{Name: name, Stage: "test", Script: script}}}
}

var readme = fleettest.Readme
