package testfleet

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	osexec "os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/internal/cgrouptest"
	"github.com/vk-ci/vk/internal/testnode"
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
	spec NodeSpec
	cfg  node.Config
	link *Link

	mu    sync.Mutex
	agent *node.Agent // nil while killed or with spec.Binary; guarded by mu
	// proc is the child process with spec.Binary (nodeproc.go), nil
	// while killed; exited is closed when it has been reaped. Guarded by
	// mu.
	proc   *osexec.Cmd
	exited chan struct{}
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
	if ns.Executor == "" {
		ns.Executor = node.BackendProcess
	}
	containers := ns.Executor != node.BackendProcess
	if containers && f.reg == nil {
		// The images' registry: the one Options.Caches starts, started
		// here on the first container node (Start runs addNode in order,
		// never concurrently; Close stops it).
		reg, err := startRegistry(ctx, filepath.Join(f.dir, "registry"), false)
		if err != nil {
			return nil, fmt.Errorf("testfleet: node %s (executor %s): %w", ns.Name, ns.Executor, err)
		}
		f.reg = reg
	}
	n := &Node{Name: ns.Name, Dir: filepath.Join(f.dir, "nodes", ns.Name), f: f, spec: ns}
	l, err := f.hub.newLink()
	if err != nil {
		return nil, err
	}
	n.link = l
	// Through the node's own link to the hub, in pool [Pool].
	id, err := testnode.Enrol(ctx, f.hub.admin(), "https://"+l.Addr(), f.hub.CAPEM(), n.Dir, ns.Name, []string{Pool})
	if err != nil {
		return nil, fmt.Errorf("testfleet: %w", err)
	}
	n.ID = id
	// Its own cgroup parent, vk-<id>: two fleets of parallel tests share
	// the host.
	cfg := testnode.Config(n.Dir, ns.Name, n.ID, []string{Pool}, node.ResourcesConfig{CPUs: ns.CPUs, Mem: ns.Mem, Disk: 20 << 30})
	cfg.Node.Labels = ns.Labels
	cfg.Executor.Schedule.MaxConcurrency = ns.MaxConcurrency
	cfg.Executor.Backend = ns.Executor
	if containers {
		// Imageless jobs run in the process backend, confined in
		// cgroups under <CgroupParent> (the node's default, kept
		// explicit); the oci backend always confines a job and its
		// services in one cgroup of the envelope under
		// <CgroupParent>-oci.
		cfg.Executor.Cgroups = true
		cfg.Executor.Images.PlainHTTP = append(cfg.Executor.Images.PlainHTTP, f.reg.addr)
	}
	if f.opts.Caches && f.reg != nil {
		cfg.Registry.URL = f.reg.url()
		cfg.Registry.PlainHTTP = true
		cfg.Registry.RepositoryPrefix = "vk-cache"
	}
	if f.standby != nil {
		sl, err := f.standby.newLink()
		if err != nil {
			return nil, err
		}
		cfg.Node.Hubs = append(cfg.Node.Hubs, "https://"+sl.Addr())
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
	if n.spec.Binary != "" {
		return n.startChild(ctx)
	}
	a, err := node.Start(ctx, n.cfg, n.f.log.With("component", "node", "node", n.Name), node.Options{})
	if err != nil {
		return fmt.Errorf("testfleet: node %s: %w", n.Name, err)
	}
	n.mu.Lock()
	n.agent = a
	n.mu.Unlock()
	return nil
}

// Agent returns the running agent, nil while killed or when the node
// runs as a child process ([NodeSpec.Binary]; see [Node.Process]).
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
// returns once the agent has stopped; the interrupted jobs' cleanup has
// then removed their containers, overlays and cgroups, so
// [Node.Leftovers] is empty.
//
// A node of [NodeSpec.Binary] is SIGKILLed instead (after the same
// partition), and Kill returns once the process is reaped: its jobs get
// no cleanup, and what they leave is the next start's sweep's.
func (n *Node) Kill() error {
	n.link.Block()
	if n.spec.Binary != "" {
		return n.killChild()
	}
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
	if n.Agent() != nil || n.Process() != nil {
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

// HubView is the hub's view of the node now (`vk-hub nodes list`); false
// when the hub is down or does not know the node.
func (n *Node) HubView(ctx context.Context) (admin.Node, bool) {
	ns, err := n.f.hub.admin().Nodes(ctx)
	if err != nil {
		return admin.Node{}, false
	}
	for _, v := range ns {
		if v.ID == n.ID {
			return v, true
		}
	}
	return admin.Node{}, false
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
	if n.spec.Binary != "" {
		err = n.stopChild(ctx)
	}
	n.link.Close()
	if left := n.sweep(); len(left) > 0 {
		// A stopped agent has cleaned up after every job it ran
		// (stage runner cleanup, or the next start's leftover sweep):
		// anything here is a leak, removed now and reported.
		n.f.log.Warn("node left containers, mounts or cgroups behind", "node", n.Name, "leftovers", left)
		err = errors.Join(err, fmt.Errorf("%w: node %s: %s", ErrLeftovers, n.Name, strings.Join(left, "; ")))
	}
	cgrouptest.RemoveParents(n.cfg.Executor.CgroupParent)
	return err
}

// ErrLeftovers is returned by [Fleet.Close] when a stopped node left
// containers, mounts or job cgroups behind (they are removed).
var ErrLeftovers = errors.New("testfleet: node left job resources behind")

// ociRoot is the oci backend's directory: <state_dir>/oci, with runc's
// state in .runc and one directory per running job (node/exec/oci).
func (n *Node) ociRoot() string { return filepath.Join(n.Dir, "oci") }

// runcRoot is the node's private runc state directory.
func (n *Node) runcRoot() string { return filepath.Join(n.ociRoot(), ".runc") }

// Leftovers lists what the node's jobs hold on the host right now, one
// "kind what" string each, sorted by kind:
//
//   - "container <id>": a container in the node's runc root (`runc
//     --root <Dir>/oci/.runc list`): a job's or a service's;
//   - "mount <path>": a mount under the node's Dir (a job's overlay
//     rootfs, its /builds bind…);
//   - "jobdir <path>": a job directory under <Dir>/oci;
//   - "cgroup <path>": a job cgroup under the node's cgroup parents
//     (<CgroupParent> of the process backend, <CgroupParent>-oci of the
//     oci backend) in any hierarchy.
//
// With no job running it must be empty: each job's cleanup removes its
// containers, overlays and cgroups before the node sends its result. The
// image cache (<Dir>/images) is not a leftover. Works on a killed or
// stopped node too.
func (n *Node) Leftovers() []string {
	var out []string
	for _, id := range n.containers() {
		out = append(out, "container "+id)
	}
	for _, mp := range mountsUnder(n.Dir) {
		out = append(out, "mount "+mp)
	}
	if ents, err := os.ReadDir(n.ociRoot()); err == nil {
		for _, e := range ents {
			if e.Name() != ".runc" {
				out = append(out, "jobdir "+filepath.Join(n.ociRoot(), e.Name()))
			}
		}
	}
	for _, cg := range jobCgroups(n.cfg.Executor.CgroupParent) {
		out = append(out, "cgroup "+cg)
	}
	return out
}

// runcBin is the runc the node uses, "" when none is installed.
func (n *Node) runcBin() string {
	r := n.cfg.Executor.Runc
	if r == "" {
		r = "runc"
	}
	p, err := osexec.LookPath(r)
	if err != nil {
		return ""
	}
	return p
}

// containers lists the containers in the node's runc root.
func (n *Node) containers() []string {
	bin := n.runcBin()
	if bin == "" {
		return nil
	}
	if _, err := os.Stat(n.runcRoot()); err != nil {
		return nil
	}
	out, err := osexec.Command(bin, "--root", n.runcRoot(), "list", "-q").Output()
	if err != nil {
		return []string{fmt.Sprintf("(runc list: %v)", err)}
	}
	return strings.Fields(string(out))
}

// sweep removes whatever [Node.Leftovers] lists, the way the agent's own
// start-up sweep does (node doc, "Crash leftovers"): containers
// force-deleted, mounts lazily unmounted deepest first, job directories
// removed, job cgroups' processes killed and the cgroups removed. It
// returns what it found.
func (n *Node) sweep() []string {
	left := n.Leftovers()
	if len(left) == 0 {
		return nil
	}
	if bin := n.runcBin(); bin != "" {
		for _, id := range n.containers() {
			osexec.Command(bin, "--root", n.runcRoot(), "delete", "--force", id).Run()
		}
	}
	for _, mp := range mountsUnder(n.Dir) {
		unix.Unmount(mp, unix.MNT_DETACH)
	}
	if ents, err := os.ReadDir(n.ociRoot()); err == nil {
		for _, e := range ents {
			if e.Name() != ".runc" {
				os.RemoveAll(filepath.Join(n.ociRoot(), e.Name()))
			}
		}
	}
	for _, cg := range jobCgroups(n.cfg.Executor.CgroupParent) {
		removeCgroup(cg)
	}
	return left
}

// mountsUnder returns the mount points at or under dir, deepest first.
func mountsUnder(dir string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	dir = filepath.Clean(dir)
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeOctal(f[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return strings.Count(out[i], "/") > strings.Count(out[j], "/") })
	return out
}

// unescapeOctal undoes mountinfo's \ooo escapes (\040 for a space).
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// jobCgroups lists every cgroup below the node's two parents (parent and
// parent-oci) in every hierarchy, deepest first.
func jobCgroups(parent string) []string {
	if parent == "" {
		return nil
	}
	ctrls, err := os.ReadDir(cgroupRoot)
	if err != nil {
		return nil
	}
	var out []string
	for _, c := range ctrls {
		for _, p := range []string{parent, parent + "-oci"} {
			top := filepath.Join(cgroupRoot, c.Name(), p)
			filepath.WalkDir(top, func(path string, d fs.DirEntry, err error) error {
				if err != nil || !d.IsDir() {
					return nil
				}
				if path != top {
					out = append(out, path)
				}
				return nil
			})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return strings.Count(out[i], "/") > strings.Count(out[j], "/") })
	return out
}

// removeCgroup kills the processes of cgroup dir and removes it, waiting
// up to 5 s for them to die (external processes: polled with a deadline).
func removeCgroup(dir string) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil {
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		if err := os.Remove(dir); err == nil || errors.Is(err, fs.ErrNotExist) || time.Now().After(deadline) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cgroupRoot is where the v1 controllers (and the unified hierarchy) are
// mounted.
const cgroupRoot = "/sys/fs/cgroup"
