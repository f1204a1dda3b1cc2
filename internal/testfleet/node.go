package testfleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/hubclient"
	"github.com/vk-ci/vk/node"
)

// Node is one of the fleet's nodes: a real node.Agent (node.Start) on its
// state dir, reaching the hub through its own [Link].
//
//	running ──Partition──▶ partitioned ──Heal──▶ running
//	running ──Kill──▶ killed ──Restart──▶ running
type Node struct {
	// Name is the node's name; ID the ID the hub enrolled it under.
	Name, ID string
	// Dir is its state dir (identity, journal, spools, builds).
	Dir string

	f    *Fleet
	cfg  node.Config
	link *Link

	mu    sync.Mutex
	agent *node.Agent // nil while killed; guarded by mu
}

func (f *Fleet) addNode(ctx context.Context, i int, ns NodeSpec) (*Node, error) {
	if ns.Name == "" {
		ns.Name = fmt.Sprintf("node-%d", i+1)
	}
	if ns.CPUs == 0 {
		ns.CPUs = 4
	}
	if ns.Mem == 0 {
		ns.Mem = 4 << 30
	}
	n := &Node{Name: ns.Name, Dir: filepath.Join(f.dir, "nodes", ns.Name), f: f}
	l, err := f.hub.newLink()
	if err != nil {
		return nil, err
	}
	n.link = l
	// `vk-hub token create --kind node`, then `vk node join <hub> --token … --ca …`
	tok, err := f.hub.token(ctx, hubclient.KindNode)
	if err != nil {
		return nil, err
	}
	res, err := node.Join(ctx, n.Dir, node.JoinOptions{HubURL: "https://" + l.Addr(), Token: tok, CAPEM: f.hub.CAPEM(), Name: ns.Name})
	if err != nil {
		return nil, fmt.Errorf("testfleet: node %s join: %w", ns.Name, err)
	}
	n.ID = res.ID
	// `vk-hub nodes pools <id> ci`
	if err := f.hub.admin().SetPools(ctx, n.ID, []string{Pool}); err != nil {
		return nil, fmt.Errorf("testfleet: nodes pools %s: %w", n.ID, err)
	}
	cfg := node.DefaultConfig()
	cfg.Node.Name = ns.Name
	cfg.Node.StateDir = n.Dir
	cfg.Node.Runner = node.RunnerNone
	cfg.Node.Labels = ns.Labels
	cfg.Node.Pools = []string{Pool}
	cfg.Node.ShutdownTimeoutSecs = 5
	cfg.Resources = node.ResourcesConfig{CPUs: ns.CPUs, Mem: ns.Mem, Disk: 20 << 30}
	cfg.Executor.Schedule.MaxConcurrency = ns.MaxConcurrency
	// A cgroup parent of its own: an agent owns its parent and kills what
	// it finds there at start (node doc, "Crash leftovers"), so nodes
	// sharing a host (this fleet, or two fleets of parallel tests) must
	// not share one.
	cfg.Executor.CgroupParent = "vk-" + n.ID
	if u := f.RegistryURL(); u != "" {
		cfg.Registry.URL = u
		cfg.Registry.PlainHTTP = true
		cfg.Registry.RepositoryPrefix = "vk-cache"
	}
	if f.opts.Node != nil {
		f.opts.Node(i, &cfg)
	}
	n.cfg = cfg
	if err := n.start(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

func (n *Node) start(ctx context.Context) error {
	a, err := node.Start(ctx, n.cfg, n.f.log.With("component", "node", "node", n.Name), node.Options{})
	if err != nil {
		return fmt.Errorf("testfleet: node %s: %w", n.Name, err)
	}
	n.mu.Lock()
	n.agent = a
	n.mu.Unlock()
	return nil
}

// Agent returns the running agent, nil while killed.
func (n *Node) Agent() *node.Agent {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.agent
}

// Config returns the node's configuration.
func (n *Node) Config() node.Config { return n.cfg }

// Partition makes the node unreachable: its connections to the hub are
// reset and new ones dropped until [Node.Heal]. The agent and its jobs
// keep running and spooling output (FAIL-18); past job_lost_after the hub
// ends its jobs lost (FAIL-16).
func (n *Node) Partition() { n.link.Block() }

// Heal ends a partition; the node reconnects with its usual backoff.
func (n *Node) Heal() { n.link.Heal() }

// CutSession resets the node's session once (a network blip); it
// reconnects at once and resumes.
func (n *Node) CutSession() { n.link.Cut() }

// Kill stops the node without letting its jobs finish: it is partitioned
// first (so nothing more reaches the hub), then the agent is shut down
// with an ended context, which interrupts its jobs at once (FAIL-08) and
// leaves unrecorded results in its journal for the next start. Kill
// returns once the agent has stopped.
func (n *Node) Kill() error {
	n.link.Block()
	n.mu.Lock()
	a := n.agent
	n.agent = nil
	n.mu.Unlock()
	if a == nil {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	a.Shutdown(ctx)
	<-a.Done()
	return nil
}

// Restart starts a killed node again on its state dir and lets it reach
// the hub.
func (n *Node) Restart(ctx context.Context) error {
	if n.Agent() != nil {
		n.link.Heal()
		return nil
	}
	if err := n.start(ctx); err != nil {
		return err
	}
	n.link.Heal()
	return nil
}

// WaitReady waits until the hub lists the node as ready (connected).
func (n *Node) WaitReady(ctx context.Context) error { return n.f.hub.waitNode(ctx, n.ID) }

// WaitHubState waits until the hub's view of the node satisfies ok (for
// example a state of "unreachable").
func (n *Node) WaitHubState(ctx context.Context, ok func(admin.Node) bool) error {
	return n.f.hub.waitNodeState(ctx, n.ID, ok)
}

func (n *Node) stopGraceful(ctx context.Context) error {
	n.mu.Lock()
	a := n.agent
	n.agent = nil
	n.mu.Unlock()
	var err error
	if a != nil {
		err = a.Shutdown(ctx)
		if err == node.ErrStopped {
			err = nil
		}
	}
	n.link.Close()
	removeCgroupParents(n.cfg.Executor.CgroupParent)
	return err
}

// cgroupRoot is where the v1 controllers (and the unified hierarchy) are
// mounted.
const cgroupRoot = "/sys/fs/cgroup"

// removeCgroupParents removes the node's (now empty) cgroup parents in
// every hierarchy, for the process and the oci backends: stopped agents
// remove their jobs' cgroups, not the parent.
func removeCgroupParents(parent string) {
	if parent == "" {
		return
	}
	ctrls, err := os.ReadDir(cgroupRoot)
	if err != nil {
		return
	}
	for _, c := range ctrls {
		for _, p := range []string{parent, parent + "-oci"} {
			os.Remove(filepath.Join(cgroupRoot, c.Name(), p)) // only succeeds when empty
		}
	}
}
