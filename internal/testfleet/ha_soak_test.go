package testfleet_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub"
	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/need"
	"github.com/vk-ci/vk/internal/pgtest"
	"github.com/vk-ci/vk/internal/testfleet"
	"github.com/vk-ci/vk/internal/testfleet/fleettest"
	"github.com/vk-ci/vk/relay/loop"
)

// buildHub builds the real vk-hub binary into the test's temp dir (the
// Go build cache makes it quick after the first time).
func buildHub(t *testing.T) string {
	t.Helper()
	gotool, err := exec.LookPath("go")
	if err != nil {
		need.Missingf(t, "the go tool is not on PATH: the HA soak builds vk-hub to run it as child processes")
	}
	bin := filepath.Join(t.TempDir(), "vk-hub")
	if out, err := exec.Command(gotool, "build", "-o", bin, "github.com/vk-ci/vk/cmd/vk-hub").CombinedOutput(); err != nil {
		t.Fatalf("go build vk-hub: %v\n%s", err, out)
	}
	return bin
}

// haSoak is one HA soak's fleet and its fault bookkeeping.
type haSoak struct {
	t   *testing.T
	ctx context.Context
	f   *testfleet.Fleet
	pg  *pgtest.Server
	db  *pgtest.Proxy // hub-a's way to the database

	mu       sync.Mutex
	injected map[string]int  // faults by kind; guarded by mu
	failover []time.Duration // guarded by mu
	revived  int             // instances restarted after exiting by themselves; guarded by mu
}

// leads returns h's epoch when it says it leads.
func (s *haSoak) leads(h *testfleet.Hub) (uint64, bool) {
	ctx, cancel := context.WithTimeout(s.ctx, 3*time.Second)
	defer cancel()
	hl, err := h.Health(ctx)
	return hl.Epoch, err == nil && hl.Role == "leader"
}

// leader waits until an instance leads and returns it and the other.
func (s *haSoak) leader() (lead, other *testfleet.Hub, err error) {
	a, b := s.f.Hub(), s.f.Standby()
	for s.ctx.Err() == nil {
		ea, aok := s.leads(a)
		eb, bok := s.leads(b)
		switch {
		case aok && (!bok || ea >= eb):
			return a, b, nil
		case bok:
			return b, a, nil
		}
		pause(100 * time.Millisecond)
	}
	return nil, nil, fmt.Errorf("no instance leads: %w", s.ctx.Err())
}

// waitLeader waits until h leads and points the relays at it (as a name
// resolving to every instance would).
func (s *haSoak) waitLeader(h *testfleet.Hub) error {
	if _, err := h.WaitLeading(s.ctx); err != nil {
		return err
	}
	for _, tn := range s.f.Tenants() {
		l := tn.Relay.HubLink()
		l.SetTarget(h.Addr())
		l.Heal()
	}
	return nil
}

func (s *haSoak) count(fault string, failover time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.injected[fault]++
	if failover > 0 {
		s.failover = append(s.failover, failover)
		s.t.Logf("fault: %s, the other instance led %v later", fault, failover.Round(time.Millisecond))
	} else {
		s.t.Logf("fault: %s", fault)
	}
}

// killLeader SIGKILLs the leader's process (hub-a's database link
// black-holed first, so the database sees no FIN, as when a machine is
// lost), waits for the other to lead, then restarts the killed one as a
// standby (its supervisor would).
func (s *haSoak) killLeader() error {
	lead, other, err := s.leader()
	if err != nil {
		return err
	}
	at := time.Now()
	if lead == s.f.Hub() {
		s.db.Blackhole(true)
	}
	if err := lead.Kill(); err != nil {
		return fmt.Errorf("SIGKILL to the leader: %w", err)
	}
	if err := s.waitLeader(other); err != nil {
		return err
	}
	s.count("leader-kill", time.Since(at))
	s.db.Blackhole(false)
	if err := lead.RestartAsStandby(s.ctx); err != nil {
		return fmt.Errorf("restarting the killed leader: %w", err)
	}
	return s.waitLeader(other) // its restart pointed its links back at it
}

// pauseLeader freezes the leader's process (SIGSTOP) until the other
// leads, then thaws it: a deposed leader that wakes up still believing
// it leads. Its writes must be refused (fenced), it must stop by itself,
// and it is then restarted as a standby.
func (s *haSoak) pauseLeader() error {
	lead, other, err := s.leader()
	if err != nil {
		return err
	}
	at := time.Now()
	if err := lead.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	if err := s.waitLeader(other); err != nil {
		lead.Signal(syscall.SIGCONT)
		return err
	}
	s.count("leader-pause", time.Since(at))
	exited := lead.Exited()
	if err := lead.Signal(syscall.SIGCONT); err != nil {
		return err
	}
	select {
	case <-exited:
	case <-time.After(2 * time.Minute):
		lead.Kill()
		return fmt.Errorf("the deposed leader %s did not stop by itself within 2 minutes of waking", lead.Config().Store.Instance)
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
	if err := lead.RestartAsStandby(s.ctx); err != nil {
		return fmt.Errorf("restarting the deposed leader: %w", err)
	}
	return s.waitLeader(other)
}

// killStandby SIGKILLs the standby's process and starts it again.
func (s *haSoak) killStandby() error {
	lead, other, err := s.leader()
	if err != nil {
		return err
	}
	if err := other.Kill(); err != nil {
		return fmt.Errorf("SIGKILL to the standby: %w", err)
	}
	s.count("standby-kill", 0)
	if err := other.RestartAsStandby(s.ctx); err != nil {
		return fmt.Errorf("restarting the standby: %w", err)
	}
	return s.waitLeader(lead)
}

// revive restarts as a standby, as its supervisor would, an instance
// whose process ended by itself: a leader whose renewals fail for a
// TTL (a database restart or cut that outlasts them) stops leading and
// exits non-zero (docs/ha.md). Without it the next leader kill left no
// instance at all.
func (s *haSoak) revive() error {
	for _, h := range []*testfleet.Hub{s.f.Hub(), s.f.Standby()} {
		exited := h.Exited()
		if exited == nil {
			continue // killed by a fault, which restarts it itself
		}
		select {
		case <-exited:
		default:
			continue
		}
		s.t.Logf("%s exited by itself; restarting it as a standby", h.Config().Store.Instance)
		if err := h.RestartAsStandby(s.ctx); err != nil {
			return fmt.Errorf("restarting %s, which exited by itself: %w", h.Config().Store.Instance, err)
		}
		s.mu.Lock()
		s.revived++
		s.mu.Unlock()
	}
	return nil
}

// dbOutage black-holes hub-a's database link for longer than a lease
// TTL. When hub-a leads, its renewals time out, so it must stop leading
// before its lease can have expired and exit by itself (docs/ha.md),
// while hub-b, which reaches the database directly, takes over; revive
// then restarts hub-a as a standby. When hub-a is the standby it only
// misses the database for a while, and must keep running.
func (s *haSoak) dbOutage() error {
	lead, other, err := s.leader()
	if err != nil {
		return err
	}
	at := time.Now()
	s.db.Blackhole(true)
	defer s.db.Blackhole(false)
	if lead != s.f.Hub() {
		s.count("db-outage", 0)
		pause(dbOutageFor)
		return nil
	}
	exited := lead.Exited()
	if err := s.waitLeader(other); err != nil {
		return err
	}
	s.count("db-outage", time.Since(at))
	select {
	case <-exited:
	case <-time.After(time.Minute):
		return fmt.Errorf("hub-a, its database unreachable for longer than its lease, did not stop by itself within a minute")
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
	s.db.Blackhole(false)
	return s.revive()
}

// dbOutageFor is how long a database outage of the standby lasts: longer
// than the lease's default 5 s TTL.
const dbOutageFor = 7 * time.Second

// fault injects one random fault, after reviving an instance that
// exited by itself since the last.
func (s *haSoak) fault(rng *rand.Rand) error {
	if err := s.revive(); err != nil {
		return err
	}
	switch k := []string{"leader-kill", "leader-kill", "leader-pause", "standby-kill", "db-cut", "pg-restart", "db-outage"}[rng.IntN(7)]; k {
	case "leader-kill":
		return s.killLeader()
	case "leader-pause":
		return s.pauseLeader()
	case "standby-kill":
		return s.killStandby()
	case "db-outage":
		return s.dbOutage()
	case "db-cut":
		s.count(k, 0)
		s.db.Cut()
	case "pg-restart":
		s.count(k, 0)
		s.pg.Restart(s.t)
	}
	return nil
}

// faults injects a random fault every 4–11 s until deadline, on its own
// goroutine so that pipelines keep coming during failovers.
func (s *haSoak) faults(rng *rand.Rand, deadline time.Time) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			next := time.Now().Add(time.Duration(4+rng.IntN(8)) * time.Second)
			if !next.Before(deadline) {
				return
			}
			select {
			case <-time.After(time.Until(next)):
			case <-s.ctx.Done():
				return
			}
			if err := s.fault(rng); err != nil {
				s.t.Errorf("fault: %v", err)
				return
			}
		}
	}()
	return done
}

// TestHASoak runs pipelines for -soak on two vk-hub processes (the real
// binary, built for the run) on one throwaway PostgreSQL under the lease
// (default 5 s TTL), four nodes with a session to each, while injecting
// random faults: the leader SIGKILLed (its database black-holed first
// when it is hub-a) and restarted as a standby, the leader frozen
// (SIGSTOP) until the other leads and then thawed (it must stop by
// itself; its fenced writes are counted), the standby SIGKILLed and
// restarted, hub-a's database connections cut, hub-a's database
// black-holed for longer than a TTL (as leader it must stop and exit by
// itself, and is restarted as a standby), PostgreSQL restarted.
// Then every job must have succeeded, and run once by the nodes'
// journals (two journals, or one twice, recording a run of the same
// GitLab job is a job run twice); GitLab must have handed it out once
// and got one run's trace, byte-identical to the output the hubs stored.
//
// Meanwhile every client-API call the relay makes (reservations,
// tickets, claims, renewals, releases, submissions, job reads, output
// reads, settles) and two readers' job views are recorded; porcupine
// checks that history against apiModel (a checker timeout fails the
// test).
//
// spec: BS-10, BS-11, BS-12, BS-13, BS-16, DECISIONS 16
func TestHASoak(t *testing.T) {
	seed := soakSchedule(t, "HA soak", "HASoak -soak=5m")
	rng := rand.New(rand.NewPCG(seed, 0))
	ev := keepSoakEvidence(t, seed)
	bin := buildHub(t)
	vk := fleettest.BuildVK(t)
	pg := pgtest.Start(t)
	dsn := pg.NewSchema(t)
	_, schema, _ := strings.Cut(dsn, "search_path=")
	db := pgtest.NewProxy(t, pg.Addr())
	rec := newHistoryRecorder()
	nodes := make([]testfleet.NodeSpec, 4)
	for i := range nodes {
		nodes[i] = testfleet.NodeSpec{MaxConcurrency: 5, Binary: vk}
	}
	f := newFleet(t, testfleet.Options{
		Log:          ev.logger(t),
		HubBinary:    bin,
		Nodes:        nodes,
		Tenants:      []testfleet.TenantSpec{{Concurrent: 40, RequestConcurrency: 8}},
		JobLostAfter: 30 * time.Second,
		Hub: func(c *hub.Config) {
			c.Store = hub.StoreConfig{Kind: hub.StorePostgres, DSN: pgtest.DSNAt(db.Addr(), "postgres") + " search_path=" + schema,
				Lease: true, Instance: "hub-a"}
		},
		Standby:  func(c *hub.Config) { c.Store.DSN, c.Store.Instance = dsn, "hub-b" },
		RelayHub: func(_ string, h loop.Hub) loop.Hub { return recordingHub{Hub: h, r: rec} },
	})
	ctx := timeout(t, *soak+10*time.Minute)
	s := &haSoak{t: t, ctx: ctx, f: f, pg: pg, db: db, injected: map[string]int{}}
	tn := f.Tenants()[0]
	rec.attach(t, f, tn)
	hctx, stopRec := context.WithCancel(ctx)
	recorded := make(chan struct{})
	go func() {
		defer close(recorded)
		rec.run(hctx, 2)
	}()
	deadline := time.Now().Add(*soak)
	faultsDone := s.faults(rand.New(rand.NewPCG(seed, 1)), deadline)
	var pls []gitlabfake.Pipeline
	for seq := 0; time.Now().Before(deadline); seq++ {
		var specs []gitlabfake.JobSpec
		for i := range 5 {
			specs = append(specs, gitlabfake.JobSpec{Name: fmt.Sprintf("p%d-j%d", seq, i), Stage: "test",
				Script: []string{fmt.Sprintf(`i=0; while [ $i -lt %d ]; do echo "line $i of $CI_JOB_NAME"; i=$((i+1)); sleep 0.1; done`, 2+rng.IntN(6))}})
		}
		pl, err := tn.CreatePipeline(fmt.Sprintf("soak/ha%d", seq), readme, gitlabfake.PipelineSpec{Jobs: specs})
		if err != nil {
			t.Fatal(err)
		}
		pls = append(pls, pl)
		pause(time.Duration(500+rng.IntN(1000)) * time.Millisecond)
	}
	<-faultsDone
	if lead, _, err := s.leader(); err != nil {
		t.Fatal(err)
	} else if err := s.waitLeader(lead); err != nil {
		t.Fatal(err)
	}
	r := s.report(tn, rec, pls)
	stopRec()
	<-recorded
	r.ops, r.checker = rec.check(t, ev)
	t.Log(r)
}
