package testfleet_test

import (
	"context"
	"errors"
	"os/exec"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/need"
	"github.com/vk-ci/vk/internal/testfleet"
	"github.com/vk-ci/vk/internal/testlog"
)

// needBinaries skips the test when a real component it runs is missing.
func needBinaries(t *testing.T, bins ...string) {
	t.Helper()
	for _, b := range bins {
		if _, err := exec.LookPath(b); err != nil {
			need.Missingf(t, "%s not installed (apt-get install -y %s)", b, b)
		}
	}
}

// newFleet starts a fleet for the test, skipping only when a component is
// not wired yet (testfleet.ErrNotWired) or a binary is missing.
func newFleet(t *testing.T, o testfleet.Options) *testfleet.Fleet {
	t.Helper()
	needBinaries(t, "git", "bash")
	if o.Caches {
		needBinaries(t, testfleet.RegistryBinary)
	}
	if o.Log == nil {
		o.Log = testlog.New(t)
	}
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	f, err := testfleet.Start(ctx, o)
	if errors.Is(err, testfleet.ErrNotWired) {
		t.Skipf("component not wired yet: %v", err)
	}
	if err != nil {
		t.Fatalf("testfleet.Start: %v", err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Logf("fleet close: %v", err)
		}
	})
	return f
}

// timeout bounds a test's waits on the fleet.
func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// oneJob is a pipeline of a single job.
func oneJob(name string, script ...string) gitlabfake.PipelineSpec {
	return gitlabfake.PipelineSpec{Jobs: []gitlabfake.JobSpec{{Name: name, Stage: "test", Script: script}}}
}

var readme = map[string]string{"README.md": "e2e\n"}
