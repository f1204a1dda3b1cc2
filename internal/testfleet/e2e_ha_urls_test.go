package testfleet_test

import (
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/testfleet"
	"github.com/vk-ci/vk/relay"
)

// TestHARelayListsEveryInstance: a relay whose [hub] urls lists both
// instances, the leader first, loses that leader's machine and nothing
// points its first URL anywhere else (it stays unreachable to the end).
// The relay's hub client and session move to the second URL, follow it
// once it leads, and the pipelines before and after the failover both
// succeed, each job handed out by GitLab once.
//
// spec: BS-12, RSESS-01
func TestHARelayListsEveryInstance(t *testing.T) {
	f, db := haFleet(t, testfleet.Options{Relay: func(f *testfleet.Fleet, r *testfleet.Relay, c *relay.Config) {
		c.Hub.URLs = []string{r.HubURL(), "https://" + f.Standby().Addr()}
	}})
	tn := f.Tenants()[0]
	ctx := timeout(t, 2*time.Minute)
	run := func(name string) {
		t.Helper()
		pl, err := tn.CreatePipeline("acme/"+name, readme, gitlabfake.PipelineSpec{Jobs: []gitlabfake.JobSpec{{Name: "work",
			Script: []string{"echo " + name}}}})
		if err != nil {
			t.Fatal(err)
		}
		states, err := tn.WaitFinished(ctx, pl)
		if err != nil {
			t.Fatal(err)
		}
		if states["work"] != gitlabfake.StateSuccess {
			ji, _ := tn.GitLab.Job(pl.Jobs["work"])
			t.Fatalf("%s: work = %s (%s), want success", name, states["work"], ji.FailureReason)
		}
	}
	run("before")

	killedAt := time.Now()
	db.Blackhole(true) // the leader's machine is lost: its lease must expire
	killed := make(chan error, 1)
	go func() { killed <- f.Hub().Kill() }() // its shutdown waits for the database
	select {
	case <-f.Standby().Server().Leading():
		t.Logf("standby leading %v after the leader was lost", time.Since(killedAt).Round(time.Millisecond))
	case <-ctx.Done():
		t.Fatal("the standby never took over")
	}
	db.Blackhole(false) // the deposed leader's last writes are fenced; its shutdown can end
	if err := <-killed; err != nil {
		t.Logf("kill: %v", err)
	}
	run("after")
	t.Logf("the pipeline after the failover finished %v after the leader was lost", time.Since(killedAt).Round(time.Millisecond))
	if !tn.Relay.HubLink().Blocked() {
		t.Fatal("the relay's first-listed hub became reachable again: the test proves nothing")
	}
	handed := 0
	for _, r := range tn.GitLab.RequestsTo(gitlabfake.RouteJobRequest) {
		if r.Status == 201 {
			handed++
		}
	}
	if handed != 2 {
		t.Errorf("GitLab handed out %d jobs, want 2", handed)
	}
}
