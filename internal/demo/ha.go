package demo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/vk-ci/vk/hub"
	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/pglaunch"
	"github.com/vk-ci/vk/internal/testfleet"
)

// ErrNoPostgres is returned by [Run] with [Options.HA] when PostgreSQL's
// server binaries are not installed.
var ErrNoPostgres = errors.New("demo: --ha needs PostgreSQL's server binaries (apt-get install -y postgresql)")

// haKillAfter is how many jobs have ended in GitLab, with at least one
// running on a node, when --ha SIGKILLs the leader: the middle of the
// pipeline.
const haKillAfter = 6

// RunChildIfAsked runs the demo's leading hub and exits when this
// process was started as that hub by `vk demo --ha` (which re-executes
// its own binary); otherwise it returns at once. Call it first thing in
// main.
func RunChildIfAsked() { testfleet.RunHubChildIfAsked() }

// haRun is --ha's part of a run: a private PostgreSQL, two hub
// instances on it under the leader lease (the leader, hub-a, a child
// process; the standby, hub-b, in this process), and the leader's
// SIGKILL in the middle of the pipeline.
type haRun struct {
	pg     *pglaunch.Cluster
	stopPG func()
	pgDir  string

	killed   time.Time // when hub-a was SIGKILLed; zero before
	pid      int
	running  int                // jobs running on nodes at the kill
	leading  chan time.Duration // the failover time, once hub-b leads
	failover time.Duration      // set once read from leading
	epoch    uint64
}

// startHA starts the private PostgreSQL (in a new temporary directory,
// removed by stop).
func (r *demoRun) startHA() error {
	if r.o.Containers || r.o.MicroVM {
		return errors.New("demo: --ha runs the sample on the host; it does not combine with --containers or --microvm")
	}
	if pglaunch.BinDir() == "" {
		return ErrNoPostgres
	}
	dir, err := os.MkdirTemp("", "vk-demo-pg-")
	if err != nil {
		return err
	}
	pg, stop, err := pglaunch.Launch(dir, r.o.Log.With("component", "postgres"))
	if err != nil {
		os.RemoveAll(dir)
		return fmt.Errorf("demo: starting PostgreSQL: %w", err)
	}
	r.ha = &haRun{pg: pg, stopPG: stop, pgDir: dir, leading: make(chan time.Duration, 1)}
	return nil
}

// stop stops PostgreSQL and removes its data.
func (h *haRun) stop() {
	h.stopPG()
	os.RemoveAll(h.pgDir)
}

// fleet makes fo two hub instances on the database under the lease (the
// default 5 s TTL), the first a child process of this binary.
func (h *haRun) fleet(fo *testfleet.Options) {
	dsn := h.pg.DSN("postgres")
	fo.Hub = func(c *hub.Config) {
		c.Store = hub.StoreConfig{Kind: hub.StorePostgres, DSN: dsn, Lease: true, Instance: "hub-a"}
	}
	fo.Standby = func(c *hub.Config) { c.Store.Instance = "hub-b" }
	fo.HubProcess = func() *exec.Cmd {
		exe, err := os.Executable()
		if err != nil {
			exe = os.Args[0]
		}
		return exec.Command(exe)
	}
}

// print names the instances and the database.
func (h *haRun) print(r *demoRun, f *testfleet.Fleet) {
	r.p("  standby https://%s  hub-b, in this process, holding every node's session too", f.Standby().Addr())
	if p := f.Hub().Process(); p != nil {
		r.p("  leader  hub-a is process %d; both on a private PostgreSQL at %s (lease TTL 5 s)", p.Pid, h.pg.Addr())
	}
	r.p("  the leader is SIGKILLed once %d jobs have ended", haKillAfter)
}

// onSnap SIGKILLs the leader in the middle of the pipeline, points the
// relays at the standby (as a name resolving to every instance would)
// and says when the standby leads.
func (h *haRun) onSnap(ctx context.Context, r *demoRun, f *testfleet.Fleet, s Snapshot) {
	if h.killed.IsZero() {
		ended, running := 0, 0
		for _, j := range s.Jobs {
			if j.Done() {
				ended++
			}
			if j.HubState == "running" {
				running++
			}
		}
		if ended < haKillAfter || running == 0 {
			return
		}
		h.kill(ctx, r, f, running)
		return
	}
	if h.failover == 0 {
		select {
		case d := <-h.leading:
			h.failover, h.epoch = d, f.Standby().Server().Epoch()
			r.p("  ▶ hub-b leads (epoch %d) %.1f s after the SIGKILL; the nodes resend their held on the sessions they had, the relays follow",
				h.epoch, d.Seconds())
		default:
		}
	}
}

func (h *haRun) kill(ctx context.Context, r *demoRun, f *testfleet.Fleet, running int) {
	if p := f.Hub().Process(); p != nil {
		h.pid = p.Pid
	}
	h.killed, h.running = time.Now(), running
	if err := f.Hub().Kill(); err != nil {
		r.p("  ▶ killing hub-a: %v", err)
	}
	r.p("  ▶ SIGKILL to hub-a (process %d, the leader) with %d jobs running", h.pid, running)
	for _, t := range f.Tenants() {
		l := t.Relay.HubLink()
		l.SetTarget(f.Standby().Addr())
		l.Heal()
	}
	standby := f.Standby().Server()
	go func() {
		select {
		case <-standby.Leading():
			h.leading <- time.Since(h.killed)
		case <-ctx.Done():
		}
	}()
}

// summary is the closing line of an --ha run; an error when the leader
// was never killed, the standby never led, or GitLab handed out a job
// more than once.
func (h *haRun) summary(r *demoRun, loaded []Loaded) error {
	if h.killed.IsZero() {
		return errors.New("demo: --ha: the pipelines ended before the leader was killed")
	}
	if h.failover == 0 {
		select {
		case d := <-h.leading:
			h.failover = d
		default:
			return errors.New("demo: --ha: the standby never took over")
		}
	}
	jobs, handed := 0, 0
	for _, l := range loaded {
		jobs += len(l.Pipeline.Jobs)
		for _, q := range l.Tenant.GitLab.RequestsTo(gitlabfake.RouteJobRequest) {
			if q.Status == 201 {
				handed++
			}
		}
	}
	if handed != jobs {
		return fmt.Errorf("demo: --ha: GitLab handed out %d jobs for %d", handed, jobs)
	}
	r.p("Failover: hub-a (process %d) SIGKILLed at %s with %d jobs running; hub-b led %.1f s later; every job ended as expected, each handed out by GitLab once.",
		h.pid, h.killed.Sub(r.start).Round(100*time.Millisecond), h.running, h.failover.Seconds())
	return nil
}
