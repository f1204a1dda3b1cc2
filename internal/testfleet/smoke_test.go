package testfleet_test

import (
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/testfleet"
)

// spec: RELAY-12, FAIL-01
func TestSmokeOneJob(t *testing.T) {
	f := newFleet(t, testfleet.Options{})
	tn := f.Tenants()[0]
	pl, err := tn.CreatePipeline("acme/smoke", readme, oneJob("hello", "echo hello from vk"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := tn.WaitFinished(timeout(t, 60*time.Second), pl)
	if err != nil {
		t.Fatal(err)
	}
	if st["hello"] != gitlabfake.StateSuccess {
		ji, _ := tn.GitLab.Job(pl.Jobs["hello"])
		t.Fatalf("hello = %s (%s), trace:\n%s", st["hello"], ji.FailureReason, ji.Trace)
	}
	t.Logf("trace:\n%s", tn.GitLab.Trace(pl.Jobs["hello"]))
}
