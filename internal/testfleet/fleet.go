package testfleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/vk-ci/vk/hub"
	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/hub/store/pgstore"
	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/node"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/relay"
	"github.com/vk-ci/vk/relay/loop"
)

// Errors.
var (
	// ErrNotWired: a component's Run/Start function is not available in
	// this build yet; the message names it. Tests that need it skip.
	ErrNotWired = errors.New("testfleet: component not wired yet")
	// ErrUnknown: no tenant or node by that name.
	ErrUnknown = errors.New("testfleet: unknown tenant or node")
)

// Defaults of [Options].
const (
	// DefaultJobLostAfter is the hub's job_lost_after in fleets: short,
	// so node-loss tests end in seconds (production default 5 min).
	DefaultJobLostAfter = 3 * time.Second
	// DefaultHubTick is the hub's scheduling tick in fleets.
	DefaultHubTick = 50 * time.Millisecond
)

// Options configure a [Fleet]. The zero value is one node, one tenant.
type Options struct {
	// Dir holds every component's state (hub/, nodes/<name>/,
	// relays/<tenant>/, gitlab/<tenant>/, registry/); "" means a new
	// temporary directory that Close removes.
	Dir string
	// Nodes describes the nodes; nil means one [NodeSpec] zero value.
	Nodes []NodeSpec
	// Tenants describes the tenants; nil means one tenant "default".
	// Each tenant gets its own fake GitLab and its own relay, and the
	// hub's capacity policy gives that relay's runners to the tenant.
	Tenants []TenantSpec
	// Caches starts a real docker-registry (RegistryBinary) for the nodes'
	// caches; without it caches are skipped with a warning in the trace.
	Caches bool
	// RegistryTokens runs that registry under token authentication
	// (auth.token) trusting a signing key the fleet generates, and gives
	// the hub that key in [[registries]]: every job placed on a node
	// reporting the registry starts with a token minted for its cache
	// repository (XFER-13). Only those tokens open the registry, so set
	// the nodes' [registry] guest_credential = "job" (Options.Node) and
	// run no container node (they pull images with no token). Needs
	// Caches.
	RegistryTokens bool
	// HubAddr is the hub's listen address; "" means 127.0.0.1:0. Nodes and
	// relays always reach it through a [Link].
	HubAddr string
	// JobLostAfter is the hub's sessions.job_lost_after_secs (rounded up
	// to whole seconds); 0 means DefaultJobLostAfter.
	JobLostAfter time.Duration
	// Policy is the capacity policy's base: the fleet adds one tenant per
	// TenantSpec (weight, cap, its relay). Zero BackoffMaxSecs means 2 s
	// (the spec's 60 s would leave a test's pipeline idle between stages).
	Policy admin.Policy
	// Approvals turns on the hub's approvals (approvals.required) and has
	// the operator approve each tenant's GitLab server, not its projects
	// (`vk-hub projects approve <instance> server`).
	Approvals bool
	// Standby, when set, starts a second hub instance (docs/ha.md) after
	// the first, from the first's configuration adjusted by it (the first
	// must run under store.lease on PostgreSQL; Standby names the
	// instance). Both present one CA and certificate (the first's pki is
	// copied), and every node also holds a session to it ([node] hubs)
	// through its own link.
	Standby func(*hub.Config)
	// HubBeforeStart is the first hub's hub.Options.BeforeStart: called
	// on its driver's goroutine before a start goes to a node (to lose
	// the leader between a job's 201 and the node's accept). It must not
	// wait for the hub.
	HubBeforeStart func(job string)
	// HubProcess, when set, runs the first hub as a child process, so it
	// can be SIGKILLed as a machine is lost ([Hub.Kill]): it returns the
	// command re-executing a binary that calls [RunHubChildIfAsked] first
	// (the fleet adds the environment and pipes). The hub's store must be
	// PostgreSQL under the lease, with a [Options.Standby] (through which
	// [Hub.Jobs] and output reads go while the child runs). The child has
	// no BeforeStart hook and no output archive.
	HubProcess func() *exec.Cmd
	// HubBinary, when set, is the path of a vk-hub binary: every hub
	// instance (the first and Options.Standby) then runs as a child
	// process of it (`vk-hub serve --config <state_dir>/hub.toml`), on a
	// loopback port picked once and kept across restarts, so a kill is a
	// real SIGKILL of the real binary (hubbin.go). The store must be
	// PostgreSQL under the lease with a Standby. The fleet reads records
	// and output from the database itself (through the Standby's DSN),
	// and keeps every output chunk the hubs commit in a table of its own
	// (a trigger it adds), which [Tenant.HubOutput] reads.
	HubBinary string
	// RelayHub, when set, wraps each relay's client of the hub API (built
	// from its enrolment as vk-gitlab builds it) before the relay uses
	// it, on every start: to record the operations it issues.
	RelayHub func(tenant string, h loop.Hub) loop.Hub
	// Relay adjusts each relay's configuration last (r is the relay
	// being added: its HubURL is known, its process not started).
	Relay func(f *Fleet, r *Relay, c *relay.Config)
	// Hub and Node adjust the generated configurations last.
	Hub  func(*hub.Config)
	Node func(i int, c *node.Config)
	// Log receives every component's log; nil discards.
	Log *slog.Logger
}

// NodeSpec describes one node. Zero fields take the defaults noted.
type NodeSpec struct {
	// Name is the node's name; "" means node-<n> (1-based).
	Name string
	// CPUs and Mem are what it offers; 0 means 4 CPUs and 4 GiB.
	CPUs int
	Mem  client.Size
	// MaxConcurrency caps its reservations plus jobs; 0 means no cap of
	// its own.
	MaxConcurrency int
	// Labels are reported in its inventory.
	Labels []string
	// Executor is the node's [executor] backend: "" or "process" runs
	// every job under bash on the host (cgroups on, as today); "auto"
	// runs a job that names an image in a container (node/exec/oci, real
	// runc) and an imageless one on the host; "oci" runs every job in a
	// container. With "auto" or "oci" the fleet starts its registry
	// ([Fleet.RegistryHost]; the one Options.Caches starts) if it is not
	// running, and the node pulls from it over plain HTTP: tests push
	// their images there. Caches stay off unless Options.Caches. On a
	// host without runc, "auto" fails a job that names an image
	// (configuration, the trace says what to install) and runs imageless
	// ones on the host, and "oci" fails Start. Nodes allow root jobs
	// (allow_root_jobs): the fleet runs as root.
	Executor string
	// Binary, when set, is the path of a vk binary: the node then runs
	// as its child process, `vk node run --config <Dir>/node.toml`
	// (nodeproc.go), and [Node.Kill] is a real SIGKILL. [Node.Agent] is
	// nil for such a node.
	Binary string
}

// TenantSpec describes one tenant: its GitLab, its relay with one runner,
// and its share of the fleet.
type TenantSpec struct {
	// Name is the tenant's name in the capacity policy; "" means
	// "default" (only valid alone).
	Name string
	// Weight is its fair-share weight (ARB-09); 0 means 1.
	Weight int
	// Cap bounds what it holds (ARB-11); 0 means none.
	Cap int
	// Envelope is what each of its jobs reserves; zero means 1 CPU,
	// 512 MiB, 1 GiB disk.
	Envelope client.Envelope
	// RequestConcurrency is the runner's request loops; 0 means 4.
	RequestConcurrency int
	// Concurrent bounds the relay's jobs; 0 means 16.
	Concurrent int
	// PlaceWithinSecs is the place_within_secs the relay submits, in
	// seconds (relay.Options.PlaceWithinSecs, a test-only knob); 0 means
	// production's 300 (ARB-38).
	PlaceWithinSecs int
	// GitLab are the fake GitLab's options (Addr and Logger are set by the
	// fleet).
	GitLab gitlabfake.Options
}

// Fleet is a hub, its nodes and one relay per tenant, each a real
// component started in-process from its package's Start/Run function, over
// real TLS on loopback, with a fake GitLab per tenant. Create it with
// [Start]; stop it with [Fleet.Close].
type Fleet struct {
	opts Options
	dir  string
	tmp  bool
	log  *slog.Logger
	ctx  context.Context
	stop context.CancelFunc

	reg     *registry
	hub     *Hub
	standby *Hub // nil without Options.Standby
	// db reads the hubs' database, with Options.HubBinary (nil otherwise).
	db *pgstore.Store

	mu      sync.Mutex
	nodes   []*Node
	tenants []*Tenant
}

// Tenant is one tenant's GitLab and relay.
type Tenant struct {
	// Spec is the tenant as configured (defaults filled in).
	Spec TenantSpec
	// GitLab is the tenant's fake GitLab.
	GitLab *gitlabfake.Server
	// Relay is the tenant's relay.
	Relay *Relay

	watch *watcher
	f     *Fleet

	mu       sync.Mutex
	projects map[string]gitlabfake.Project // created projects by path; guarded by mu
}

// Project returns a project CreatePipeline created, by path.
func (t *Tenant) Project(path string) (gitlabfake.Project, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.projects[path]
	return p, ok
}

// Start starts the fleet: registry (with Options.Caches), the fake GitLabs,
// the hub, then enrols every node and relay the way an operator does
// (`vk-hub token create` on the hub's admin socket, then join over TLS),
// starts them, and sets the capacity policy naming each tenant's relay.
// It returns once the hub lists every node as ready. On
// error everything started is stopped.
func Start(ctx context.Context, opts Options) (_ *Fleet, err error) {
	f := &Fleet{opts: opts, log: opts.Log}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	if opts.Dir == "" {
		d, err := os.MkdirTemp("", "vk-fleet-")
		if err != nil {
			return nil, err
		}
		f.dir, f.tmp = d, true
	} else {
		f.dir = opts.Dir
	}
	f.ctx, f.stop = context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	if opts.Caches {
		if f.reg, err = startRegistry(ctx, filepath.Join(f.dir, "registry"), opts.RegistryTokens); err != nil {
			return nil, err
		}
	}
	specs := opts.Tenants
	if len(specs) == 0 {
		specs = []TenantSpec{{}}
	}
	for _, ts := range specs {
		ts = ts.withDefaults()
		gopts := ts.GitLab
		gopts.Addr = ""
		gopts.DataDir = filepath.Join(f.dir, "gitlab", ts.Name)
		if gopts.Logger == nil {
			gopts.Logger = f.log.With("component", "gitlab", "tenant", ts.Name)
		}
		srv := gitlabfake.New(gopts)
		if err := srv.Start(); err != nil {
			return nil, fmt.Errorf("testfleet: gitlab %s: %w", ts.Name, err)
		}
		t := &Tenant{Spec: ts, GitLab: srv, f: f}
		t.watch = newWatcher(f.ctx, srv)
		f.tenants = append(f.tenants, t)
	}
	if f.hub, err = f.startHub(ctx); err != nil {
		return nil, err
	}
	if opts.Standby != nil {
		if f.standby, err = f.startStandby(ctx); err != nil {
			return nil, err
		}
	}
	if opts.HubBinary != "" {
		if err := f.openDB(ctx); err != nil {
			return nil, err
		}
	}
	nspecs := opts.Nodes
	if len(nspecs) == 0 {
		nspecs = []NodeSpec{{}}
	}
	for i, ns := range nspecs {
		n, err := f.addNode(ctx, i, ns)
		if err != nil {
			return nil, err
		}
		f.nodes = append(f.nodes, n)
	}
	for _, t := range f.tenants {
		if t.Relay, err = f.addRelay(ctx, t); err != nil {
			return nil, err
		}
	}
	if err := f.applyPolicy(ctx); err != nil {
		return nil, err
	}
	if opts.Approvals {
		for _, t := range f.tenants {
			// As an operator would: wait for the server to show up as
			// pending (`vk-hub projects list`), then approve it.
			if err := f.hub.waitApproval(ctx, t.Relay.Instance(), 0, store.ApprovalPending); err != nil {
				return nil, err
			}
			if err := f.hub.admin().SetApproval(ctx, t.Relay.Instance(), 0, store.ApprovalApproved); err != nil {
				return nil, fmt.Errorf("testfleet: projects approve %s server: %w", t.Relay.Instance(), err)
			}
		}
	}
	for _, n := range f.nodes {
		if err := f.hub.waitNode(ctx, n.ID); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func (ts TenantSpec) withDefaults() TenantSpec {
	if ts.Name == "" {
		ts.Name = "default"
	}
	if ts.Weight == 0 {
		ts.Weight = 1
	}
	if ts.Envelope == (client.Envelope{}) {
		ts.Envelope = client.Envelope{CPUs: 1, Mem: 512 << 20, Disk: 1 << 30}
	}
	if ts.RequestConcurrency == 0 {
		ts.RequestConcurrency = 4
	}
	if ts.Concurrent == 0 {
		ts.Concurrent = 16
	}
	return ts
}

// Dir returns the fleet's state directory.
func (f *Fleet) Dir() string { return f.dir }

// Hub returns the hub (the first instance).
func (f *Fleet) Hub() *Hub { return f.hub }

// Standby returns the second hub instance, nil without Options.Standby.
func (f *Fleet) Standby() *Hub { return f.standby }

// liveHub is the first instance, or the standby while the first is
// killed: the one whose store and output the harness reads.
func (f *Fleet) liveHub() *Hub {
	if f.standby != nil && f.hub.Server() == nil {
		return f.standby
	}
	return f.hub
}

// Nodes returns the nodes in the order of Options.Nodes.
func (f *Fleet) Nodes() []*Node {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*Node(nil), f.nodes...)
}

// Node returns the node named name, or nil.
func (f *Fleet) Node(name string) *Node {
	for _, n := range f.Nodes() {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// NodeName maps a hub node ID (or a name) to the node's name; unknown IDs
// come back unchanged.
func (f *Fleet) NodeName(id string) string {
	for _, n := range f.Nodes() {
		if n.ID == id || n.Name == id {
			return n.Name
		}
	}
	return id
}

// Tenants returns the tenants in the order of Options.Tenants.
func (f *Fleet) Tenants() []*Tenant { return append([]*Tenant(nil), f.tenants...) }

// Tenant returns the tenant named name, or nil.
func (f *Fleet) Tenant(name string) *Tenant {
	for _, t := range f.tenants {
		if t.Spec.Name == name {
			return t
		}
	}
	return nil
}

// RegistryURL is the fleet's registry as an http URL: the caches' and
// the container nodes' images' ("" when neither Options.Caches nor a
// container node ([NodeSpec.Executor]) started it).
func (f *Fleet) RegistryURL() string {
	if f.reg == nil {
		return ""
	}
	return f.reg.url()
}

// Close stops every component (relays, nodes, hub, GitLabs, registry) and
// removes a temporary Dir. Components already killed stay stopped.
func (f *Fleet) Close() error {
	var errs []error
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	began := time.Now()
	for _, t := range f.tenants {
		if t.Relay != nil {
			errs = append(errs, t.Relay.stopGraceful(sctx))
		}
	}
	f.log.Debug("fleet close: relays stopped", "after", time.Since(began))
	// Nodes get a short drain: whatever still runs is interrupted.
	nctx, ncancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer ncancel()
	for _, n := range f.Nodes() {
		errs = append(errs, n.stopGraceful(nctx))
	}
	f.log.Debug("fleet close: nodes stopped", "after", time.Since(began))
	if f.standby != nil {
		errs = append(errs, f.standby.stopGraceful(sctx))
	}
	if f.hub != nil {
		errs = append(errs, f.hub.stopGraceful(sctx))
	}
	f.log.Debug("fleet close: hub stopped", "after", time.Since(began))
	if f.db != nil {
		f.db.Close()
	}
	for _, t := range f.tenants {
		t.GitLab.Close()
		if t.watch != nil {
			f.stop()
			<-t.watch.done
		}
	}
	if f.stop != nil {
		f.stop()
	}
	if f.reg != nil {
		f.reg.stop()
	}
	if f.tmp {
		errs = append(errs, os.RemoveAll(f.dir))
	}
	return errors.Join(errs...)
}

// CreatePipeline creates a project (once per path) and a pipeline in
// tenant's GitLab and starts watching its jobs' states.
func (t *Tenant) CreatePipeline(project string, files map[string]string, spec gitlabfake.PipelineSpec) (gitlabfake.Pipeline, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.projects[project]; !ok {
		p, err := t.GitLab.CreateProject(project, files, gitlabfake.ProjectOptions{})
		if err != nil {
			return gitlabfake.Pipeline{}, err
		}
		if t.projects == nil {
			t.projects = map[string]gitlabfake.Project{}
		}
		t.projects[project] = p
	}
	pl, err := t.GitLab.CreatePipeline(project, spec)
	if err != nil {
		return pl, err
	}
	ids := make([]int64, 0, len(pl.Jobs))
	for _, id := range pl.Jobs {
		ids = append(ids, id)
	}
	t.watch.add(ids...)
	return pl, nil
}

// Transitions returns every state change of the tenant's watched jobs so
// far, oldest first.
func (t *Tenant) Transitions() []Transition { return t.watch.transitions() }

// FirstAt returns when job first entered state (zero if it never did).
func (t *Tenant) FirstAt(job int64, state gitlabfake.JobState) time.Time {
	return t.watch.firstAt(job, state)
}

// WaitFinished waits until every job of pl has a final GitLab state, and
// returns the states by job name.
func (t *Tenant) WaitFinished(ctx context.Context, pl gitlabfake.Pipeline) (map[string]gitlabfake.JobState, error) {
	out := make(map[string]gitlabfake.JobState, len(pl.Jobs))
	names := make([]string, 0, len(pl.Jobs))
	for n := range pl.Jobs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		st, err := t.GitLab.WaitJobState(ctx, pl.Jobs[n], gitlabfake.StateSuccess, gitlabfake.StateFailed,
			gitlabfake.StateCanceled, gitlabfake.StateSkipped)
		if err != nil {
			return out, fmt.Errorf("testfleet: %s job %s (#%d) still %s: %w", t.Spec.Name, n, pl.Jobs[n], t.GitLab.JobState(pl.Jobs[n]), err)
		}
		out[n] = st
	}
	return out, nil
}

// HubJob returns the hub's record of the tenant's GitLab job id (the
// newest, should GitLab's retry make more), reading the hub's store.
func (t *Tenant) HubJob(ctx context.Context, gitlabID int64) (store.Job, error) {
	jobs, err := t.f.liveHub().Jobs(ctx)
	if err != nil {
		return store.Job{}, err
	}
	relayID := ""
	if t.Relay != nil {
		relayID = t.Relay.ID
	}
	var found *store.Job
	for i := range jobs {
		j := &jobs[i]
		if j.GitLabJobID == gitlabID && (relayID == "" || j.Principal == relayID) {
			found = j
		}
	}
	if found == nil {
		return store.Job{}, fmt.Errorf("%w: no hub job for %s GitLab job %d", store.ErrNotFound, t.Spec.Name, gitlabID)
	}
	return *found, nil
}

// HubOutput returns the output the hub stored for the tenant's GitLab job
// id: what the node produced, as acked. Once the job is settled the hub
// has dropped it (API-41) and this returns the copy the fleet kept at the
// drop. ok is false when the hub has no output for the job.
func (t *Tenant) HubOutput(ctx context.Context, gitlabID int64) (out []byte, ok bool, err error) {
	j, err := t.HubJob(ctx, gitlabID)
	if err != nil {
		return nil, false, err
	}
	if t.f.db != nil {
		return t.f.archived(ctx, j.ID)
	}
	if b, ok := t.f.hub.arch.get(j.ID); ok {
		return b, true, nil
	}
	st := t.f.liveHub().outputStore()
	if st == nil {
		return nil, false, fmt.Errorf("testfleet: hub is down")
	}
	b, err := readAll(ctx, st, j.ID)
	if err != nil {
		// The job may have settled while it was read: its output was
		// archived, then dropped, under the read.
		if b, ok := t.f.hub.arch.get(j.ID); ok {
			return b, true, nil
		}
		return nil, false, err
	}
	return b, true, nil
}

// applyPolicy gives each tenant's relay to the tenant with its weight and
// cap, through the hub's admin socket (`vk-hub capacity-policy set`).
func (f *Fleet) applyPolicy(ctx context.Context) error {
	p := f.opts.Policy
	if p.BackoffMaxSecs == 0 {
		p.BackoffInitialSecs, p.BackoffMaxSecs = 1, 2
	}
	p.Tenants = map[string]admin.Tenant{}
	for name, t := range f.opts.Policy.Tenants {
		p.Tenants[name] = t
	}
	for _, t := range f.tenants {
		if t.Relay == nil || t.Relay.ID == "" {
			continue
		}
		p.Tenants[t.Spec.Name] = admin.Tenant{Weight: t.Spec.Weight, Cap: t.Spec.Cap, Relays: []string{t.Relay.ID}}
	}
	if len(p.Tenants) == 0 {
		return nil
	}
	b, err := admin.EncodePolicy(p)
	if err != nil {
		return err
	}
	if err := f.hub.admin().SetPolicy(ctx, b); err != nil {
		return fmt.Errorf("testfleet: capacity-policy set: %w", err)
	}
	return nil
}
