package testfleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vk-ci/vk/hub"
	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/hub/output"
	"github.com/vk-ci/vk/hub/pki"
	"github.com/vk-ci/vk/hub/regtoken"
	"github.com/vk-ci/vk/hub/store"
)

// Hub is the fleet's hub: a real hub.Server started with hub.Start on its
// state dir. Every node and relay reaches it through its own [Link], so
// the hub can be killed (every link cut and blocked, then the server
// stopped with an already-ended context: no peer sees a close frame) and
// restarted on the same state dir, and the peers find it again at the
// address they enrolled with.
type Hub struct {
	f    *Fleet
	cfg  hub.Config
	arch *archive

	mu    sync.Mutex
	srv   *hub.Server  // nil while killed; guarded by mu
	out   output.Store // the server's output store; guarded by mu
	links []*Link      // every client's link to the hub; guarded by mu
	up    bool         // guarded by mu
	// standby: a second instance (Options.Standby), not leading at start.
	standby bool
	// proc is the hub's child process (Options.HubProcess), nil while
	// none runs; exited is closed once it exited. Guarded by mu.
	proc   *exec.Cmd
	exited chan struct{}
	// fenced adds up the fenced writes its child processes said they
	// refused.
	fenced atomic.Int64
}

func (f *Fleet) startHub(ctx context.Context) (*Hub, error) {
	cfg := hub.DefaultConfig()
	cfg.Addr = f.opts.HubAddr
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	cfg.StateDir = filepath.Join(f.dir, "hub")
	lost := f.opts.JobLostAfter
	if lost == 0 {
		lost = DefaultJobLostAfter
	}
	cfg.Sessions.JobLostAfterSecs = int((lost + time.Second - 1) / time.Second)
	cfg.TickMillis = int(DefaultHubTick / time.Millisecond)
	cfg.ShutdownGraceSecs = 1
	cfg.Approvals.Required = f.opts.Approvals
	if f.reg != nil && f.reg.tokens != nil {
		cfg.Registries = []regtoken.Config{{URL: f.reg.url(), Service: registryService, Issuer: registryIssuer,
			KeyFile: f.reg.tokens.keyFile, CertFile: f.reg.tokens.certFile}}
	}
	if f.opts.Hub != nil {
		f.opts.Hub(&cfg)
	}
	h := &Hub{f: f, cfg: cfg, arch: newArchive()}
	if err := h.start(ctx); err != nil {
		return nil, err
	}
	// Restarts bind the same port, as a restarted vk-hub would.
	if h.srv != nil {
		h.cfg.Addr = h.srv.Addr()
	}
	if _, err := os.Stat(admin.SocketPath(cfg.StateDir)); err != nil {
		return h, fmt.Errorf("%w: hub.Start serves no admin socket (%s), so tokens cannot be created", ErrNotWired, admin.SocketPath(cfg.StateDir))
	}
	return h, nil
}

// startStandby starts the second instance (Options.Standby) on a copy of
// the first's pki.
func (f *Fleet) startStandby(ctx context.Context) (*Hub, error) {
	cfg := f.hub.cfg
	cfg.Addr = "127.0.0.1:0"
	cfg.StateDir = filepath.Join(f.dir, "hub-standby")
	f.opts.Standby(&cfg)
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, err
	}
	if err := os.CopyFS(filepath.Join(cfg.StateDir, "pki"), os.DirFS(filepath.Join(f.hub.cfg.StateDir, "pki"))); err != nil {
		return nil, fmt.Errorf("testfleet: standby pki: %w", err)
	}
	h := &Hub{f: f, cfg: cfg, arch: f.hub.arch, standby: true}
	if err := h.start(ctx); err != nil {
		return nil, err
	}
	if srv := h.Server(); srv != nil {
		h.cfg.Addr = srv.Addr()
	}
	return h, nil
}

// NewLink makes a link to this hub instance for a client the test runs
// itself; the hub's kills apply to it.
func (h *Hub) NewLink() (*Link, error) { return h.newLink() }

func (h *Hub) start(ctx context.Context) error {
	if h.f.opts.HubBinary != "" || h.f.opts.HubProcess != nil && !h.standby {
		return h.startChild(ctx)
	}
	log := h.f.log.With("component", "hub")
	var opt hub.Options
	if h.cfg.Store.Kind == hub.StorePostgres {
		// Output in the database, shared by every instance (docs/ha.md).
		opt.WrapOutput = func(o output.Store) output.Store { return keepingStore{Store: o, a: h.arch} }
	} else {
		out, err := outputOver(h.cfg.StateDir, h.arch, log)
		if err != nil {
			return fmt.Errorf("testfleet: hub output: %w", err)
		}
		opt.Output = out
	}
	if !h.standby {
		opt.BeforeStart = h.f.opts.HubBeforeStart
	}
	srv, err := hub.Start(ctx, h.cfg, log, opt)
	if err != nil {
		if opt.Output != nil {
			opt.Output.Close()
		}
		return fmt.Errorf("testfleet: hub: %w", err)
	}
	if h.cfg.Store.Lease && !h.standby {
		// The fleet's first hub leads before anyone enrols.
		select {
		case <-srv.Leading():
		case <-ctx.Done():
			srv.Shutdown(context.Background())
			return fmt.Errorf("testfleet: hub never took the leader lease: %w", ctx.Err())
		}
	}
	out := srv.OutputStore()
	h.mu.Lock()
	h.srv, h.out, h.up = srv, out, true
	for _, l := range h.links {
		l.SetTarget(srv.Addr())
	}
	h.mu.Unlock()
	return nil
}

// Server returns the running server, nil while killed.
func (h *Hub) Server() *hub.Server {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.srv
}

// Config returns the hub's configuration.
func (h *Hub) Config() hub.Config { return h.cfg }

// Addr returns the hub's own listen address (not a link's).
func (h *Hub) Addr() string { return h.cfg.Addr }

// StateDir returns the hub's state directory.
func (h *Hub) StateDir() string { return h.cfg.StateDir }

// CAPEM returns the hub's CA certificate (PEM), as `vk-hub` keeps it in
// <state_dir>/pki.
func (h *Hub) CAPEM() []byte {
	if s := h.Server(); s != nil {
		return s.CAPEM()
	}
	b, _ := os.ReadFile(filepath.Join(h.cfg.StateDir, "pki", pki.CACertFile)) // a child process's
	return b
}

// Admin returns a client of the hub's admin socket (what `vk-hub token
// create`, `nodes list`, `projects approve` … use).
func (h *Hub) Admin() *admin.Client { return h.admin() }

func (h *Hub) admin() *admin.Client { return admin.Dial(admin.SocketPath(h.cfg.StateDir)) }

// newLink makes a link to the hub for one client; the hub's kills and
// restarts apply to it.
func (h *Hub) newLink() (*Link, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	target := h.cfg.Addr
	if h.srv != nil {
		target = h.srv.Addr()
	}
	l, err := NewLink(target)
	if err != nil {
		return nil, err
	}
	if !h.up {
		l.Block()
	}
	h.links = append(h.links, l)
	return l, nil
}

// Kill stops the hub without a graceful shutdown: every client link is
// cut and blocked first (peers see reset connections, no close frame, no
// answer to requests in flight), then the server is stopped with an
// ended context, which closes its store and output as a crash would leave
// them on disk.
func (h *Hub) Kill() error {
	if h.Process() != nil {
		return h.killChild()
	}
	h.mu.Lock()
	srv := h.srv
	h.srv, h.up = nil, false
	for _, l := range h.links {
		l.Block()
	}
	h.mu.Unlock()
	if srv == nil {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := srv.Shutdown(ctx)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// Restart starts a killed hub again on the same state dir and address and
// lets the clients through.
func (h *Hub) Restart(ctx context.Context) error {
	if h.Server() != nil || h.running() {
		return nil
	}
	if err := h.start(ctx); err != nil {
		return err
	}
	h.mu.Lock()
	for _, l := range h.links {
		l.Heal()
	}
	h.mu.Unlock()
	return nil
}

// RestartAsStandby starts a killed instance of an HA fleet again as a
// standby: another instance leads now, so it contends for the lease
// instead of waiting to lead (as its supervisor restarting a deposed
// leader would).
func (h *Hub) RestartAsStandby(ctx context.Context) error {
	h.mu.Lock()
	h.standby = true
	h.mu.Unlock()
	return h.Restart(ctx)
}

// CutSessions cuts every client's connections to the hub once; they
// reconnect at once (a network blip).
func (h *Hub) CutSessions() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range h.links {
		l.Cut()
	}
}

func (h *Hub) stopGraceful(ctx context.Context) error {
	cerr := h.stopChild(ctx)
	h.mu.Lock()
	srv := h.srv
	h.srv, h.up = nil, false
	links := h.links
	h.links = nil
	h.mu.Unlock()
	var err error
	if srv != nil {
		err = srv.Shutdown(ctx)
	}
	for _, l := range links {
		l.Close()
	}
	return errors.Join(cerr, err)
}

func (h *Hub) outputStore() output.Store {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.srv == nil {
		return nil
	}
	return h.out
}

// Jobs returns every job record of the hub's store, settled ones
// included, ordered by ID.
func (h *Hub) Jobs(ctx context.Context) ([]store.Job, error) {
	if h.f.db != nil {
		return h.f.db.ListJobs(ctx, false)
	}
	srv := h.Server()
	if srv == nil && h.f.opts.HubProcess != nil && h != h.f.standby && h.f.standby != nil {
		srv = h.f.standby.Server() // a child process's: the same database
	}
	if srv == nil {
		return nil, errors.New("testfleet: hub is down")
	}
	return srv.Store().ListJobs(ctx, false)
}

// Nodes returns the hub's view of the nodes (`vk-hub nodes list`).
func (h *Hub) Nodes(ctx context.Context) ([]admin.Node, error) { return h.admin().Nodes(ctx) }

// pollEvery is how often the harness re-reads the hub's admin view while
// waiting on it: the admin socket offers no long poll.
const pollEvery = 20 * time.Millisecond

// waitNode waits until the hub lists node id as connected and ready.
func (h *Hub) waitNode(ctx context.Context, id string) error {
	return h.waitNodeState(ctx, id, func(n admin.Node) bool { return n.State == "ready" })
}

// waitNodeState waits until the hub's view of node id satisfies ok.
func (h *Hub) waitNodeState(ctx context.Context, id string, ok func(admin.Node) bool) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	var last admin.Node
	for {
		ns, err := h.admin().Nodes(ctx)
		if err == nil {
			for _, n := range ns {
				if n.ID == id {
					last = n
					if ok(n) {
						return nil
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testfleet: node %s not in the awaited state (last seen %q): %w", id, last.State, ctx.Err())
		case <-t.C:
		}
	}
}

// waitApproval waits until `vk-hub projects list` shows (instance,
// project) in state.
func (h *Hub) waitApproval(ctx context.Context, instance string, project int64, state store.ApprovalState) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		as, err := h.admin().Projects(ctx)
		if err == nil {
			for _, a := range as {
				if a.Instance == instance && a.Project == project && a.State == state {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testfleet: %s project %d never %s on the hub: %w", instance, project, state, ctx.Err())
		case <-t.C:
		}
	}
}
