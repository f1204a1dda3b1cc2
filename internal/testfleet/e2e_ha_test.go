package testfleet_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub"
	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/pgtest"
	"github.com/vk-ci/vk/internal/testfleet"
	"github.com/vk-ci/vk/relay/state"
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
	f, db := haFleet(t, testfleet.Options{})
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

	killedAt := loseLeader(t, ctx, f, db)
	ranOnceInSuccess(t, ctx, tn, pl, id, dir, "line 19 of work", killedAt)
	checkTraces(t, ctx, tn, pl)
}

// haFleet starts a fleet of two hub instances on one throwaway
// PostgreSQL under the lease (TTL 1.5 s), the first leading; the first
// reaches the database through the returned proxy.
func haFleet(t *testing.T, o testfleet.Options) (*testfleet.Fleet, *pgtest.Proxy) {
	pg := pgtest.Start(t)
	dsn := pg.NewSchema(t)
	_, schema, _ := strings.Cut(dsn, "search_path=")
	db := pgtest.NewProxy(t, pg.Addr())
	o.Hub = func(c *hub.Config) {
		c.Store = hub.StoreConfig{Kind: hub.StorePostgres, DSN: pgtest.DSNAt(db.Addr(), "postgres") + " search_path=" + schema,
			Lease: true, LeaseTTLMillis: 1500, Instance: "hub-a"}
	}
	o.Standby = func(c *hub.Config) { c.Store.DSN, c.Store.Instance = dsn, "hub-b" }
	return newFleet(t, o), db
}

// loseLeader loses the leader's machine: its database black-holed (the
// lease must expire), every peer's link to it cut; the relay's hub name
// then reaches the standby, as a name resolving to every instance (or a
// load balancer) would. It returns when the standby leads, and when the
// leader was lost.
func loseLeader(t *testing.T, ctx context.Context, f *testfleet.Fleet, db *pgtest.Proxy) time.Time {
	t.Helper()
	standby := f.Standby().Server()
	killedAt := time.Now()
	db.Blackhole(true)
	killed := make(chan error, 1)
	go func() { killed <- f.Hub().Kill() }()
	rl := f.Tenants()[0].Relay.HubLink()
	for !rl.Blocked() {
		pause(time.Millisecond) // Kill blocks its links first, on its own goroutine
	}
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
	return killedAt
}

// TestHAFailoverBeforeAccept loses the leader between its 201 for a job
// and any node's accept: the start it sent never reaches the node (the
// node's link to it is blocked just before). The new leader restores the
// job as undecided, waits for the held of the node whose session was up
// at the takeover, which does not list it, and forgets it; the relay,
// which kept GitLab's job response, reads 404 and submits the job again
// under the same GitLab job. It runs once, in success, its trace whole
// (without the takeover's handling it ended lost: "hub restarted before a
// node accepted the job").
//
// spec: BS-16, BS-17, DECISIONS 16
func TestHAFailoverBeforeAccept(t *testing.T) {
	st := startCutJob(t, func(f *testfleet.Fleet) {
		f.Nodes()[0].Partition() // the start goes into a dead link
	})
	f, db, tn, ctx, dir, pl, id, first := st.f, st.db, st.tn, st.ctx, st.dir, st.pl, st.id, st.first
	// The old leader answered 201: the relay recorded the hub's job.
	for relayHubJob(t, tn, id) != first {
		pause(5 * time.Millisecond)
	}
	killedAt := loseLeader(t, ctx, f, db)

	ranOnceInSuccess(t, ctx, tn, pl, id, dir, "line 4 of work", killedAt)
	if second := relayHubJob(t, tn, id); second == first {
		t.Errorf("the relay still follows hub job %s, want a new submission", first)
	}
	checkTraces(t, ctx, tn, pl)
}

// relayHubJob is the hub job the relay's state file records for GitLab
// job id ("" while none, or once the record is gone).
func relayHubJob(t *testing.T, tn *testfleet.Tenant, id int64) string {
	t.Helper()
	return relayJob(t, tn, id).HubJob
}

// relayJob is the relay's state-file record of GitLab job id (zero when
// none).
func relayJob(t *testing.T, tn *testfleet.Tenant, id int64) state.Job {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(tn.Relay.Dir, "*.json"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var sf struct {
			Jobs []state.Job `json:"jobs"`
		}
		if json.Unmarshal(b, &sf) != nil {
			continue // written by rename, but read defensively
		}
		for _, j := range sf.Jobs {
			if j.GitLabID == id {
				return j
			}
		}
	}
	return state.Job{}
}

// TestHAFailoverLostAnswer loses the leader after it created a job but
// before its 201 reached the relay: the node's link and the relay's are
// blocked just before the start goes out. The new leader forgets the
// job (no held lists it); only then does the relay reach it, repeating
// the submission under the same request_id, whose job left the hub's
// history (410 not_found). The relay submits the job again as a new one:
// it runs once, in success, its trace whole.
//
// spec: BS-16, API-43, DECISIONS 16
func TestHAFailoverLostAnswer(t *testing.T) {
	st := startCutJob(t, func(f *testfleet.Fleet) {
		f.Nodes()[0].Partition()
		f.Tenants()[0].Relay.HubLink().Block() // the 201 is lost with the leader
	})
	f, db, tn, ctx, dir, pl, id, first := st.f, st.db, st.tn, st.ctx, st.dir, st.pl, st.id, st.first
	standby := f.Standby()
	// The old leader stored its answer to the submission (and the
	// admission's job) before its 201 was lost.
	reqID := relayJob(t, tn, id).SubmitRequestID
	for {
		_, aerr := standby.Server().Store().GetAnswer(ctx, tn.Relay.ID, reqID, time.Now())
		adm, merr := standby.Server().Store().GetAdmission(ctx, relayJob(t, tn, id).Admission)
		if aerr == nil && merr == nil && adm.Job == first {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the leader never stored its answer: %v, %v", aerr, merr)
		}
		pause(10 * time.Millisecond)
	}
	db.Blackhole(true)
	killed := make(chan error, 1)
	go func() { killed <- f.Hub().Kill() }()
	select {
	case <-standby.Server().Leading():
	case <-ctx.Done():
		t.Fatal("the standby never took over")
	}
	db.Blackhole(false)
	<-killed
	// The relay reaches the new leader only once it forgot the job.
	for {
		_, err := standby.Server().Store().GetJob(ctx, first)
		if errors.Is(err, store.ErrNotFound) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the new leader never forgot job %s: %v", first, err)
		}
		pause(10 * time.Millisecond)
	}
	rl := tn.Relay.HubLink()
	rl.SetTarget(standby.Addr())
	rl.Heal()

	ranOnceInSuccess(t, ctx, tn, pl, id, dir, "line 4 of work", time.Time{})
	checkTraces(t, ctx, tn, pl)
}

// ranOnceInSuccess waits for pipeline pl and checks that its job "work"
// (GitLab job id) succeeded, that its script (which appends to dir/runs)
// ran once, that its trace shows one run through lastLine, and that
// GitLab handed the job out once. A non-zero lost is when the leader was
// lost, for the log.
func ranOnceInSuccess(t *testing.T, ctx context.Context, tn *testfleet.Tenant, pl gitlabfake.Pipeline, id int64, dir, lastLine string, lost time.Time) {
	t.Helper()
	states, err := tn.WaitFinished(ctx, pl)
	if err != nil {
		t.Fatal(err)
	}
	tr := tn.GitLab.Trace(id)
	if states["work"] != gitlabfake.StateSuccess {
		ji, _ := tn.GitLab.Job(id)
		t.Fatalf("work = %s (%s), want success; trace:\n%s", states["work"], ji.FailureReason, tr)
	}
	if !lost.IsZero() {
		t.Logf("job finished %v after the leader was lost", time.Since(lost).Round(time.Millisecond))
	}
	if runs, _ := os.ReadFile(dir + "/runs"); string(runs) != "run\n" {
		t.Errorf("the job's script ran %d times, want once", bytes.Count(runs, []byte("run")))
	}
	if n := bytes.Count(tr, []byte("Running with vk")); n != 1 || !bytes.Contains(tr, []byte(lastLine)) {
		t.Errorf("trace shows %d runs (want 1) or lacks %q:\n%s", n, lastLine, tr)
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
}

// cutStart is a job whose start the leader sent into links cut just
// before it went out: the fleet, the first hub's database proxy, the
// tenant, the test's deadline, the directory its script writes runs to,
// its pipeline, GitLab job ID and the hub job the old leader started.
type cutStart struct {
	f     *testfleet.Fleet
	db    *pgtest.Proxy
	tn    *testfleet.Tenant
	ctx   context.Context
	dir   string
	pl    gitlabfake.Pipeline
	id    int64
	first string
}

// startCutJob starts an HA fleet and a one-job pipeline ("work", which
// appends to dir/runs and prints five lines) and calls cut on the fleet
// once, just before the leader sends the job's first start to its node;
// it returns once that start went.
func startCutJob(t *testing.T, cut func(f *testfleet.Fleet)) cutStart {
	t.Helper()
	var (
		once    sync.Once
		started = make(chan string, 1)
		f       *testfleet.Fleet
		ready   = make(chan struct{})
	)
	f, db := haFleet(t, testfleet.Options{HubBeforeStart: func(job string) {
		once.Do(func() {
			<-ready
			cut(f)
			started <- job
		})
	}})
	close(ready)
	st := cutStart{f: f, db: db, tn: f.Tenants()[0], ctx: timeout(t, 2*time.Minute), dir: t.TempDir()}
	pl, err := st.tn.CreatePipeline("acme/ha", readme, gitlabfake.PipelineSpec{Jobs: []gitlabfake.JobSpec{{Name: "work", Variables: pidVar(st.dir),
		Script: append([]string{`echo run >> "$PIDDIR/runs"`}, ticker(5, "0.1")...)}}})
	if err != nil {
		t.Fatal(err)
	}
	st.pl, st.id = pl, pl.Jobs["work"]
	select {
	case st.first = <-started:
	case <-st.ctx.Done():
		t.Fatal("the leader never started the job")
	}
	return st
}
