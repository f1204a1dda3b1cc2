// Package realhub starts the real hub (hub.Start) and a real node
// (node.Start, process executor) in-process for the relay's tests, so the
// relay is tested against the programs it talks to in production; the only
// stand-in in those tests is GitLab (internal/gitlabfake).
//
// Enrolment goes the way an operator does it: a one-time token from the
// hub's admin socket (`vk-hub token create --kind node|gitlab`), then a
// join over TLS 1.3 pinning the hub's CA (node.Join, hubclient.JoinAndSave);
// the node is put in [Pool] over the admin socket (`vk-hub nodes pools`).
//
// It is the relay's slice of the fleet harness: internal/testfleet starts
// a whole fleet, relays included, so it imports the relay and the relay's
// own tests cannot import it (an import cycle); realhub starts the hub and
// a node only, enrolled and configured as testfleet's are (internal/testnode). It imports the hub and the node, so it lives outside relay/
// (relay/deps_test.go forbids both in every package there), and only tests
// may import it (deps_test.go here).
//
// Choices for tests (not operator defaults):
//   - auth.skew_secs is 10 days: the relay's tests run on a fake clock that
//     an auto-advancer moves ahead of real time (minutes of back-off pass in
//     milliseconds), while the hub runs on real time.
//   - tick 50 ms, capacity policy probe_limit 64 and back-off 1–2 s, so
//     tickets are offered at once; job_lost_after 5 s.
//   - the node states 2 CPUs (Options.NodeCPUs), 4 GiB and 20 GiB disk
//     instead of detecting the host's; runner = "none"; pools [Pool]; its
//     own cgroup parent, removed when it stops.
package realhub

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub"
	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/hubclient"
	"github.com/vk-ci/vk/internal/cgrouptest"
	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/internal/testnode"
	"github.com/vk-ci/vk/node"
)

// AutoClock is the relay's clock in these tests: a fake clock starting at
// the real time (the real hub checks request signatures against its real
// clock, within the wide skew above) that a driver goroutine advances by
// 250 ms whenever a timer is armed, so minutes of intervals and back-off
// pass in milliseconds. Tests never wait on it; they wait on GitLab's, the
// hub's or the state files' state. The driver stops at t's cleanup.
func AutoClock(t testing.TB) *clock.Fake {
	clk := clock.NewFake(time.Now().UTC().Truncate(time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if clk.Pending() > 0 {
					clk.Advance(250 * time.Millisecond)
				}
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return clk
}

// Pool is the node pool the started node serves; relay runners in these
// tests place their jobs in it.
const Pool = "linux"

// Options configure Start. The zero value starts a hub without approvals
// and one node.
type Options struct {
	// Approvals sets the hub's approvals.required.
	Approvals bool
	// NoNode starts no node: reservations find no capacity.
	NoNode bool
	// NodeCPUs is the node's stated CPUs; 0 means 2.
	NodeCPUs int
	// Hub, when set, edits the hub's configuration before Start.
	Hub func(*hub.Config)
}

// Hub is a running real hub with its node. Everything is stopped at the
// test's end.
type Hub struct {
	t    testing.TB
	dir  string
	cpus int
	cfg  hub.Config
	srv  *hub.Server
	// NodeID is the enrolled node's principal ID ("" with NoNode).
	NodeID string
	// Agent is the running node (nil with NoNode).
	Agent *node.Agent
}

// Start starts the hub and, unless o.NoNode, enrols and starts a node and
// waits until the hub sees it connected.
func Start(t testing.TB, o Options) *Hub {
	t.Helper()
	h := &Hub{t: t, dir: t.TempDir(), cpus: o.NodeCPUs}
	if h.cpus == 0 {
		h.cpus = 2
	}
	cfg := hub.DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.StateDir = filepath.Join(h.dir, "hub")
	cfg.TickMillis = 50
	cfg.ShutdownGraceSecs = 1
	cfg.Auth.SkewSecs = 10 * 24 * 3600
	cfg.Sessions.JobLostAfterSecs = 5
	cfg.Approvals.Required = o.Approvals
	cfg.CapacityPolicy = &hub.PolicyConfig{ProbeLimit: 64, BackoffInitialSecs: 1, BackoffMaxSecs: 2}
	if o.Hub != nil {
		o.Hub(&cfg)
	}
	h.cfg = cfg
	srv, err := hub.Start(context.Background(), cfg, testlog.New(t).With("component", "hub"), hub.Options{})
	if err != nil {
		t.Fatalf("realhub: hub.Start: %v", err)
	}
	h.srv = srv
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	if !o.NoNode {
		h.StartNode()
	}
	return h
}

// StartNode enrols and starts the node (once; Start does it unless
// Options.NoNode) and waits until the hub sees it ready.
func (h *Hub) StartNode() {
	t := h.t
	t.Helper()
	ctx := t.Context()
	dir := filepath.Join(h.dir, "node")
	id, err := testnode.Enrol(ctx, h.Admin(), h.URL(), h.CAPEM(), dir, "node-1", []string{Pool})
	if err != nil {
		t.Fatalf("realhub: %v", err)
	}
	h.NodeID = id
	h.runNode()
}

// RestartNode starts the node again, with its enrolment and state, after
// a test stopped it (Agent.Shutdown), and waits until the hub sees it
// ready.
func (h *Hub) RestartNode() {
	h.t.Helper()
	h.runNode()
}

// StopNode shuts the node down and waits until the hub no longer sees it
// ready: a request sent afterwards, on however fast a connection, reaches
// a hub that knows the node is gone.
func (h *Hub) StopNode() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h.Agent.Shutdown(ctx)
	h.WaitFor("the hub to see node "+h.NodeID+" gone", func() bool {
		ns, err := h.Admin().Nodes(ctx)
		if err != nil {
			return false
		}
		for _, n := range ns {
			if n.ID == h.NodeID && n.State == "ready" {
				return false
			}
		}
		return true
	})
}

// runNode starts the enrolled node and waits until the hub sees it ready.
func (h *Hub) runNode() {
	t := h.t
	t.Helper()
	ctx := t.Context()
	id := h.NodeID
	dir := filepath.Join(h.dir, "node")
	cfg := testnode.Config(dir, "node-1", id, []string{Pool}, node.ResourcesConfig{CPUs: h.cpus, Mem: 4 << 30, Disk: 20 << 30})
	a, err := node.Start(context.Background(), cfg, testlog.New(t).With("component", "node"), node.Options{})
	if err != nil {
		t.Fatalf("realhub: node.Start: %v", err)
	}
	h.Agent = a
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		a.Shutdown(ctx)
		// A stopped agent removes its jobs' cgroups, not its (now
		// empty) parents, one in every cgroup v1 hierarchy.
		cgrouptest.RemoveParents(cfg.Executor.CgroupParent)
	})
	h.WaitFor("node "+id+" connected", func() bool {
		ns, err := h.Admin().Nodes(ctx)
		if err != nil {
			return false
		}
		for _, n := range ns {
			if n.ID == id && n.State == "ready" {
				return true
			}
		}
		return false
	})
}

// Server is the running hub.
func (h *Hub) Server() *hub.Server { return h.srv }

// URL is the hub's base URL (https://127.0.0.1:port).
func (h *Hub) URL() string { return h.srv.URL() }

// CAPEM is the hub's CA certificate to pin.
func (h *Hub) CAPEM() []byte { return h.srv.CAPEM() }

// Admin is a client of the hub's admin socket.
func (h *Hub) Admin() *admin.Client { return admin.Dial(admin.SocketPath(h.cfg.StateDir)) }

// AdminSocket is the hub's admin socket, for running vk-hub's operator
// commands (admin.Commands) against it.
func (h *Hub) AdminSocket() string { return admin.SocketPath(h.cfg.StateDir) }

// JoinRelay enrols a relay (kind gitlab) with a fresh one-time token and
// saves its enrolment in stateDir, as `vk-gitlab join` does; it returns the
// enrolment (ID, key, CA, hub URL).
func (h *Hub) JoinRelay(stateDir, name string) hubclient.Enrolment {
	t := h.t
	t.Helper()
	tok, err := h.Admin().CreateToken(t.Context(), hubclient.KindGitLab, 0)
	if err != nil {
		t.Fatalf("realhub: token create --kind gitlab: %v", err)
	}
	e, _, err := hubclient.JoinAndSave(t.Context(), stateDir, hubclient.JoinOptions{HubURL: h.URL(), Token: tok.Token,
		CAPEM: h.CAPEM(), Name: name, Kind: hubclient.KindGitLab})
	if err != nil {
		t.Fatalf("realhub: relay join: %v", err)
	}
	return e
}

// WaitFor polls cond every 20 ms until it holds, failing the test after
// 60 s. The hub's store and admin socket have no watch, so this polls; it
// never stands in for synchronisation inside one process.
func (h *Hub) WaitFor(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("realhub: timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
