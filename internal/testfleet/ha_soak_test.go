package testfleet_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub"
	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/pgtest"
	"github.com/vk-ci/vk/internal/testfleet"
)

// haSoak is one HA soak's fleet and its fault bookkeeping.
type haSoak struct {
	t      *testing.T
	ctx    context.Context
	f      *testfleet.Fleet
	pg     *pgtest.Server
	db     *pgtest.Proxy // hub-a's way to the database
	faults map[string]int
	// refused counts the writes the deposed leaders' stores refused
	// (fenced), read from each killed leader's store.
	refused  int64
	failover []time.Duration
}

// leader returns the instance that leads now and the other one.
func (s *haSoak) leader() (lead, other *testfleet.Hub) {
	a, b := s.f.Hub(), s.f.Standby()
	if srv := b.Server(); srv != nil && srv.Epoch() > 0 && (a.Server() == nil || a.Server().Epoch() < srv.Epoch()) {
		return b, a
	}
	return a, b
}

// waitLeader waits until h leads and points the relays at it (as a name
// resolving to every instance would).
func (s *haSoak) waitLeader(h *testfleet.Hub) {
	s.t.Helper()
	select {
	case <-h.Server().Leading():
	case <-s.ctx.Done():
		s.t.Fatal("no instance took over")
	}
	for _, tn := range s.f.Tenants() {
		l := tn.Relay.HubLink()
		l.SetTarget(h.Addr())
		l.Heal()
	}
}

// killLeader SIGKILLs-in-process the leader (hub-a's database
// black-holed first, so its lease must expire), waits for the other to
// lead, then restarts the killed one as a standby.
func (s *haSoak) killLeader() {
	lead, other := s.leader()
	srv := lead.Server()
	at := time.Now()
	if lead == s.f.Hub() {
		s.db.Blackhole(true)
	}
	killed := make(chan error, 1)
	go func() { killed <- lead.Kill() }()
	s.waitLeader(other)
	s.failover = append(s.failover, time.Since(at))
	s.db.Blackhole(false)
	<-killed
	if st, ok := srv.Store().(interface{ Refused() int64 }); ok {
		s.refused += st.Refused()
	}
	if err := lead.RestartAsStandby(s.ctx); err != nil {
		s.t.Fatalf("restarting the deposed leader: %v", err)
	}
	s.waitLeader(other) // its restart pointed its links back at it
}

// killStandby kills the standby and starts it again.
func (s *haSoak) killStandby() {
	_, other := s.leader()
	if err := other.Kill(); err != nil {
		s.t.Logf("kill standby: %v", err)
	}
	if err := other.RestartAsStandby(s.ctx); err != nil {
		s.t.Fatalf("restarting the standby: %v", err)
	}
	lead, _ := s.leader()
	s.waitLeader(lead)
}

// fault injects one random fault.
func (s *haSoak) fault(rng *rand.Rand) {
	switch k := []string{"leader-kill", "leader-kill", "standby-kill", "db-cut", "pg-restart"}[rng.IntN(5)]; k {
	case "leader-kill":
		s.faults[k]++
		s.killLeader()
	case "standby-kill":
		s.faults[k]++
		s.killStandby()
	case "db-cut":
		s.faults[k]++
		s.db.Cut()
	case "pg-restart":
		s.faults[k]++
		s.pg.Restart(s.t)
	}
}

// TestHASoak runs pipelines for -soak on two hub instances on one
// throwaway PostgreSQL under the lease (default 5 s TTL), two nodes with
// a session to each, while injecting random faults: the leader killed
// without a release (its database black-holed first when it is hub-a)
// and restarted as a standby, the standby killed and restarted, hub-a's
// database connections cut, PostgreSQL restarted. Then every job must
// have succeeded, its script run once (a marker file per run: the
// nodes' work, not GitLab's view), GitLab must have handed it out once
// and got one run's trace, byte-identical to the stored output.
//
// Meanwhile two readers read every job's view through the relay's
// enrolment; porcupine checks that history against jobViewModel (a
// checker timeout fails the test).
//
// spec: BS-10, BS-11, BS-12, BS-16, DECISIONS 16
func TestHASoak(t *testing.T) {
	if *soak == 0 {
		t.Skip("soak runs only with -soak=<duration>, e.g. go test ./internal/testfleet -run HASoak -soak=2m")
	}
	seed := *soakSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("HA soak: %v, seed %d (-soak.seed=%d to replay the fault schedule)", *soak, seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	pg := pgtest.Start(t)
	dsn := pg.NewSchema(t)
	_, schema, _ := strings.Cut(dsn, "search_path=")
	db := pgtest.NewProxy(t, pg.Addr())
	f := newFleet(t, testfleet.Options{
		Nodes:        []testfleet.NodeSpec{{MaxConcurrency: 3}, {MaxConcurrency: 3}},
		JobLostAfter: 30 * time.Second,
		Hub: func(c *hub.Config) {
			c.Store = hub.StoreConfig{Kind: hub.StorePostgres, DSN: pgtest.DSNAt(db.Addr(), "postgres") + " search_path=" + schema,
				Lease: true, Instance: "hub-a"}
		},
		Standby: func(c *hub.Config) { c.Store.DSN, c.Store.Instance = dsn, "hub-b" },
	})
	ctx := timeout(t, *soak+5*time.Minute)
	s := &haSoak{t: t, ctx: ctx, f: f, pg: pg, db: db, faults: map[string]int{}}
	tn := f.Tenants()[0]
	dir := t.TempDir()
	rec := newHistoryRecorder(t, f, tn)
	hctx, stopRec := context.WithCancel(ctx)
	recorded := make(chan struct{})
	go func() {
		defer close(recorded)
		rec.run(hctx, 2)
	}()
	var pls []gitlabfake.Pipeline
	deadline := time.Now().Add(*soak)
	nextFault := time.Now().Add(5 * time.Second)
	for seq := 0; time.Now().Before(deadline); seq++ {
		var specs []gitlabfake.JobSpec
		for i := range 3 {
			name := fmt.Sprintf("p%d-j%d", seq, i)
			specs = append(specs, gitlabfake.JobSpec{Name: name, Stage: "test", Variables: pidVar(dir),
				Script: append([]string{`echo run >> "$PIDDIR/$CI_JOB_NAME.runs"`}, ticker(10+rng.IntN(20), "0.1")...)})
		}
		pl, err := tn.CreatePipeline(fmt.Sprintf("soak/ha%d", seq), readme, gitlabfake.PipelineSpec{Jobs: specs})
		if err != nil {
			t.Fatal(err)
		}
		pls = append(pls, pl)
		if !time.Now().Before(nextFault) {
			s.fault(rng)
			nextFault = time.Now().Add(time.Duration(4+rng.IntN(8)) * time.Second)
		}
		pause(time.Duration(1+rng.IntN(3)) * time.Second)
	}
	s.report(tn, dir, pls)
	stopRec()
	<-recorded
	rec.check(t)
}

// report checks every job of pls and logs the numbers.
func (s *haSoak) report(tn *testfleet.Tenant, dir string, pls []gitlabfake.Pipeline) {
	t := s.t
	jobs, lost, twice, bad := 0, 0, 0, 0
	for _, pl := range pls {
		states, err := tn.WaitFinished(s.ctx, pl)
		if err != nil {
			t.Fatal(err)
		}
		for name, id := range pl.Jobs {
			jobs++
			runs, _ := os.ReadFile(filepath.Join(dir, name+".runs"))
			tr := tn.GitLab.Trace(id)
			switch n := bytes.Count(runs, []byte("run")); {
			case states[name] != gitlabfake.StateSuccess:
				lost++
				ji, _ := tn.GitLab.Job(id)
				t.Errorf("%s #%d: %s (%s), want success; trace:\n%s", name, id, states[name], ji.FailureReason, tr)
			case n != 1:
				twice++
				t.Errorf("%s #%d: its script ran %d times, want once", name, id, n)
			case bytes.Count(tr, []byte("Running with vk")) != 1 || !bytes.Contains(tr, []byte("Job succeeded")):
				bad++
				t.Errorf("%s #%d: trace is not one whole run:\n%s", name, id, tr)
			}
		}
		checkTraces(t, s.ctx, tn, pl)
	}
	handed := 0
	for _, r := range tn.GitLab.RequestsTo(gitlabfake.RouteJobRequest) {
		if r.Status == 201 {
			handed++
		}
	}
	if handed != jobs {
		t.Errorf("GitLab handed out %d jobs for %d", handed, jobs)
	}
	var worst, sum time.Duration
	for _, d := range s.failover {
		sum += d
		worst = max(worst, d)
	}
	mean := time.Duration(0)
	if len(s.failover) > 0 {
		mean = sum / time.Duration(len(s.failover))
	}
	t.Logf("HA soak report: jobs %d, lost %d, run twice %d, bad traces %d, faults %v, failovers %d (mean %v, worst %v), fenced writes refused %d",
		jobs, lost, twice, bad, s.faults, len(s.failover), mean.Round(time.Millisecond), worst.Round(time.Millisecond), s.refused)
}
