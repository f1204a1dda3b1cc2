package testfleet_test

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub"
	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/pgtest"
	"github.com/vk-ci/vk/internal/testfleet"
)

// TestHAFailoverMidJob runs two hub instances on one throwaway
// PostgreSQL (store.lease), the node holding a session to each. The
// leader's machine is lost while a job runs: its database unreachable (so
// the lease must expire), every peer's connection to it cut. The standby
// takes the lease, the node hears its epoch on the session it already
// held and resends report, held and output from the last ack; the relay,
// whose hub name now reaches the standby, follows it. The job ends once,
// in success, its trace whole and byte-identical to the stored output.
//
// spec: BS-10, BS-12, BS-13, BS-14, BS-15, BS-16, FAIL-18, NSESS-24, DECISIONS 6
func TestHAFailoverMidJob(t *testing.T) {
	pg := pgtest.Start(t)
	dsn := pg.NewSchema(t)
	_, schema, _ := strings.Cut(dsn, "search_path=")
	db := pgtest.NewProxy(t, pg.Addr())
	f := newFleet(t, testfleet.Options{
		Hub: func(c *hub.Config) {
			c.Store = hub.StoreConfig{Kind: hub.StorePostgres, DSN: pgtest.DSNAt(db.Addr(), "postgres") + " search_path=" + schema,
				Lease: true, LeaseTTLMillis: 1500, Instance: "hub-a"}
		},
		Standby: func(c *hub.Config) { c.Store.DSN, c.Store.Instance = dsn, "hub-b" },
	})
	tn := f.Tenants()[0]
	ctx := timeout(t, 2*time.Minute)
	dir := t.TempDir()
	pl, err := tn.CreatePipeline("acme/ha", readme, gitlabfake.PipelineSpec{Jobs: []gitlabfake.JobSpec{{Name: "work", Variables: pidVar(dir),
		Script: append([]string{`echo run >> "$PIDDIR/runs"`}, ticker(20, "0.3")...)}}})
	if err != nil {
		t.Fatal(err)
	}
	id := pl.Jobs["work"]
	if _, err := tn.WaitHubJob(ctx, id, testfleet.Started); err != nil {
		t.Fatal(err)
	}
	if err := tn.WaitTrace(ctx, id, "line 2 of"); err != nil {
		t.Fatal(err)
	}

	standby := f.Standby().Server()
	killedAt := time.Now()
	db.Blackhole(true)
	killed := make(chan error, 1)
	go func() { killed <- f.Hub().Kill() }()
	rl := tn.Relay.HubLink()
	for !rl.Blocked() {
		pause(time.Millisecond) // Kill blocks its links first, on its own goroutine
	}
	// The relay's hub name now reaches the standby, as a name resolving
	// to every instance (or a load balancer) would.
	rl.SetTarget(f.Standby().Addr())
	rl.Heal()
	select {
	case <-standby.Leading():
		t.Logf("standby leading %v after the leader was lost", time.Since(killedAt).Round(time.Millisecond))
	case <-ctx.Done():
		t.Fatal("the standby never took over")
	}
	db.Blackhole(false) // the deposed leader's last writes are fenced; its shutdown can end
	if err := <-killed; err != nil {
		t.Logf("kill: %v", err)
	}

	states, err := tn.WaitFinished(ctx, pl)
	if err != nil {
		t.Fatal(err)
	}
	tr := tn.GitLab.Trace(id)
	if states["work"] != gitlabfake.StateSuccess {
		ji, _ := tn.GitLab.Job(id)
		t.Fatalf("work = %s (%s), want success; trace:\n%s", states["work"], ji.FailureReason, tr)
	}
	t.Logf("job finished %v after the leader was lost", time.Since(killedAt).Round(time.Millisecond))
	if runs, _ := os.ReadFile(dir + "/runs"); string(runs) != "run\n" {
		t.Errorf("the job's script ran %d times, want once", bytes.Count(runs, []byte("run")))
	}
	if n := bytes.Count(tr, []byte("Running with vk")); n != 1 {
		t.Errorf("trace shows %d runs, want 1", n)
	}
	if !bytes.Contains(tr, []byte("line 19 of work")) {
		t.Errorf("trace incomplete:\n%s", tr)
	}
	handed := 0
	for _, r := range tn.GitLab.RequestsTo(gitlabfake.RouteJobRequest) {
		if r.Status == 201 {
			handed++
		}
	}
	if handed != 1 {
		t.Errorf("GitLab handed out %d jobs, want 1", handed)
	}
	checkTraces(t, ctx, tn, pl)
}
