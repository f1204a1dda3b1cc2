// Package cgroupv1 is the node's handling of per-job cgroups on hosts with
// cgroup v1 controller hierarchies mounted under one root
// (<root>/<controller>, /sys/fs/cgroup on most hosts). Both executor
// backends (node/exec/process, node/exec/oci) and the node's sweep of
// cgroups a previous run left use it: a job's cgroup carries its envelope
// as limits (NODE-09, NODE-17) and is where its usage is read from.
//
// A [Group] is a plain value naming one cgroup — the same relative path in
// every controller hierarchy — not a handle: every method reads or writes
// the cgroup filesystem, so a Group can be used for a cgroup this process
// did not create and is safe to copy and to use concurrently.
//
// What stays in the backends: how a job's cgroup is named (parent and job
// ID), whether the shared parent is removed, and how a container runtime is
// handed the path. [Group.Create] makes missing parents, and makes one
// again when an rmdir of the emptied parent (the last job under it
// leaving, a test's cleanup) removes it between its mkdirs; a caller that
// removes parents and wants no such retry serialises that against Create.
//
// # Choices
//
//   - [Group.Create] refuses an existing directory: a job never shares
//     another job's cgroup, and a failed Create removes only what it made.
//   - A controller that is not mounted under the root is skipped, and its
//     limit with it; [Group.Create] reports which directories it made so a caller
//     that insists on a limit can check. [Available] requires memory.
//   - Memory: memory.limit_in_bytes, and memory.memsw.limit_in_bytes to the
//     same value where swap accounting exists so swap is no way around the
//     limit; memory.swappiness 0 is best effort. CPUs become a CFS quota of
//     CPUs×100 ms per 100 ms period. Processes: pids.max.
//   - OOM kills are summed over the group and its direct child cgroups: v1
//     counts a kill in the victim's own cgroup, not in the ancestor whose
//     limit was hit (a container runtime makes the children).
//   - Process lists leave out non-positive PIDs (a process outside our PID
//     namespace), so a kill never becomes kill(0, …) of our own group.
//   - Waiting for killed processes to leave a cgroup polls cgroup.procs
//     every 10 ms in real time up to a caller-given bound: these are
//     external processes, and v1 reports an emptied cgroup only to a
//     release agent.
//
// # Why not github.com/containerd/cgroups/v3
//
// Its cgroup1 package (v3.1.3, checked 2026-12-01) was weighed as a
// replacement and not taken: it creates every subsystem's directory with
// MkdirAll, so it cannot refuse a cgroup that already exists nor say which
// directories it made; it finds hierarchies from /proc/self/mountinfo,
// where this package's tests use a temporary root; the OOM sum over child
// cgroups, the PID filtering and the bounded kill-and-wait would still be
// ours on top; and it brings cilium/ebpf, go-systemd, godbus and the
// runtime-spec types for limits we write as a handful of files.
package cgroupv1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrSurvivors is returned (wrapped, with the cgroup and the PIDs) by
// [Group.Kill], [KillTree] and [RemoveTree] when processes were still in
// the cgroup after SIGKILL when the wait ended or the context was done.
var ErrSurvivors = errors.New("cgroupv1: processes survived SIGKILL")

// CFSPeriod is the cpu.cfs_period_us [Group.Create] writes; the quota is
// CPUs times this.
const CFSPeriod = 100 * time.Millisecond

// DefaultRoot is where hosts mount the cgroup v1 hierarchies.
const DefaultRoot = "/sys/fs/cgroup"

// pollInterval is how often a wait for killed processes re-reads
// cgroup.procs.
const pollInterval = 10 * time.Millisecond

// controllers are the controllers a Group is created in, where mounted.
var controllers = []string{"memory", "cpu", "cpuacct", "pids"}

// procsOrder is the order controllers are tried in for cgroup.procs: pids
// first (it exists for exactly this), then memory.
var procsOrder = []string{"pids", "memory", "cpuacct", "cpu"}

// Available reports whether root holds a cgroup v1 memory controller
// hierarchy this process can write to: <root>/memory/memory.limit_in_bytes
// exists and the effective user is root.
func Available(root string) bool {
	if _, err := os.Stat(filepath.Join(root, "memory", "memory.limit_in_bytes")); err != nil {
		return false
	}
	return os.Geteuid() == 0
}

// Limits is the envelope [Group.Create] writes. A zero field means no
// limit on that resource.
type Limits struct {
	// MemBytes caps memory (and memory+swap where accounted), in bytes.
	MemBytes int64
	// CPUs caps CPU time to this many CPUs' worth per [CFSPeriod].
	CPUs int
	// PidsMax caps the number of processes and threads.
	PidsMax int
}

// Group names one cgroup: the directory Path in every controller hierarchy
// mounted under Root. The zero value names nothing and is not usable.
type Group struct {
	// Root is where the v1 hierarchies are mounted, e.g. /sys/fs/cgroup.
	Root string
	// Path is the cgroup's path relative to each hierarchy, slash
	// separated, without a leading slash, e.g. "vk/job-1".
	Path string
}

// Dir returns the group's directory in the hierarchy of ctrl, whether or
// not it exists.
func (g Group) Dir(ctrl string) string {
	return filepath.Join(g.Root, ctrl, filepath.FromSlash(g.Path))
}

// mounted reports whether the hierarchy of ctrl exists under Root.
func (g Group) mounted(ctrl string) bool {
	_, err := os.Stat(filepath.Join(g.Root, ctrl))
	return err == nil
}

// Create makes the group's directory in the memory, cpu, cpuacct and pids
// hierarchies that are mounted (making missing parents) and writes lim. It
// returns the directories it made, by controller. The group's directory
// must not exist yet in any of them. On error it removes what it made and
// returns nil.
func (g Group) Create(lim Limits) (map[string]string, error) {
	made := map[string]string{}
	undo := func(err error) (map[string]string, error) {
		for _, d := range made {
			_ = syscall.Rmdir(d)
		}
		return nil, err
	}
	for _, ctrl := range controllers {
		if !g.mounted(ctrl) {
			continue
		}
		d := g.Dir(ctrl)
		if err := mkdirGroup(d); err != nil {
			return undo(fmt.Errorf("cgroupv1: %s: %w", ctrl, err))
		}
		made[ctrl] = d
	}
	var errs []error
	if d, ok := made["memory"]; ok && lim.MemBytes > 0 {
		v := strconv.FormatInt(lim.MemBytes, 10)
		errs = append(errs, writeFile(d, "memory.limit_in_bytes", v))
		// Absent when the kernel does not account swap.
		if _, err := os.Stat(filepath.Join(d, "memory.memsw.limit_in_bytes")); err == nil {
			errs = append(errs, writeFile(d, "memory.memsw.limit_in_bytes", v))
		}
		_ = writeFile(d, "memory.swappiness", "0")
	}
	if d, ok := made["cpu"]; ok && lim.CPUs > 0 {
		period := CFSPeriod.Microseconds()
		errs = append(errs,
			writeFile(d, "cpu.cfs_period_us", strconv.FormatInt(period, 10)),
			writeFile(d, "cpu.cfs_quota_us", strconv.FormatInt(int64(lim.CPUs)*period, 10)))
	}
	if d, ok := made["pids"]; ok && lim.PidsMax > 0 {
		errs = append(errs, writeFile(d, "pids.max", strconv.Itoa(lim.PidsMax)))
	}
	if err := errors.Join(errs...); err != nil {
		return undo(err)
	}
	return made, nil
}

// mkdirAttempts bounds how often mkdirGroup re-makes a parent that was
// removed under it.
const mkdirAttempts = 10

// mkdirGroup makes the cgroup directory d and any missing parents. d
// itself must not exist (Mkdir, not MkdirAll: a job never shares another's
// cgroup). A parent removed between the two mkdirs — the last job under a
// shared parent removing it — is made again, a bounded number of times.
func mkdirGroup(d string) error {
	for attempt := 1; ; attempt++ {
		if err := os.MkdirAll(filepath.Dir(d), 0o755); err != nil {
			return err
		}
		err := os.Mkdir(d, 0o755)
		if err == nil || !errors.Is(err, fs.ErrNotExist) || attempt == mkdirAttempts {
			return err
		}
	}
}

func writeFile(dir, name, value string) error {
	if err := os.WriteFile(filepath.Join(dir, name), []byte(value), 0o644); err != nil {
		return fmt.Errorf("cgroupv1: %w", err)
	}
	return nil
}

// Add moves pid (all its threads) into the group in every hierarchy
// [Group.Create] makes it in. The group must exist.
func (g Group) Add(pid int) error {
	var errs []error
	for _, ctrl := range controllers {
		if g.mounted(ctrl) {
			errs = append(errs, writeFile(g.Dir(ctrl), "cgroup.procs", strconv.Itoa(pid)))
		}
	}
	return errors.Join(errs...)
}

// ReadInt reads the integer in file of the group's ctrl directory
// (cpuacct.usage, memory.max_usage_in_bytes, …); false when the file is
// missing or not one integer.
func (g Group) ReadInt(ctrl, file string) (int64, bool) {
	b, err := os.ReadFile(filepath.Join(g.Dir(ctrl), file))
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}

// CPU returns the CPU time (user plus system) of every process that ran in
// the group and its children: cpuacct.usage. False when unknown.
func (g Group) CPU() (time.Duration, bool) {
	n, ok := g.ReadInt("cpuacct", "cpuacct.usage")
	return time.Duration(n), ok
}

// PeakMemBytes returns the group's memory high-water mark in bytes, its
// children included: memory.max_usage_in_bytes. False when unknown.
func (g Group) PeakMemBytes() (int64, bool) {
	return g.ReadInt("memory", "memory.max_usage_in_bytes")
}

// OOMKills returns how many processes the kernel's OOM killer killed in
// the group and its direct child cgroups: the oom_kill counters of their
// memory.oom_control (kernels ≥ 4.13). False when no counter was found;
// the count is then 0.
func (g Group) OOMKills() (int64, bool) {
	d := g.Dir("memory")
	dirs := []string{d}
	if subs, err := os.ReadDir(d); err == nil {
		for _, s := range subs {
			if s.IsDir() {
				dirs = append(dirs, filepath.Join(d, s.Name()))
			}
		}
	}
	var total int64
	known := false
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, "memory.oom_control"))
		if err != nil {
			continue
		}
		if n, ok := oomKill(b); ok {
			total += n
			known = true
		}
	}
	return total, known
}

// oomKill parses the oom_kill line of memory.oom_control content.
func oomKill(b []byte) (int64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), " "); ok && k == "oom_kill" {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// Procs lists the PIDs (host PID namespace) of the processes in the
// group's child cgroup sub ("" the group itself), not in its descendants,
// from the first of the pids, memory, cpuacct and cpu hierarchies that
// has it. Nil when none has it.
func (g Group) Procs(sub string) []int {
	for _, ctrl := range procsOrder {
		if pids, ok := readProcs(filepath.Join(g.Dir(ctrl), filepath.FromSlash(sub))); ok {
			return pids
		}
	}
	return nil
}

// readProcs reads dir/cgroup.procs; false when it cannot be read.
func readProcs(dir string) ([]int, bool) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, false
	}
	var out []int
	for f := range strings.FieldsSeq(string(b)) {
		if n, err := strconv.Atoi(f); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	return out, true
}

// Kill SIGKILLs every process in the group and its descendant cgroups, again
// until they are gone, for at most wait or until ctx is done; it reads the
// first of the pids, memory, cpuacct and cpu hierarchies the group has.
// Processes left then are reported with [ErrSurvivors]. It does not remove
// the group.
func (g Group) Kill(ctx context.Context, wait time.Duration) error {
	for _, ctrl := range procsOrder {
		if d := g.Dir(ctrl); isDir(d) {
			return KillTree(ctx, d, wait)
		}
	}
	return nil
}

// Remove removes the group's directory, and its child cgroups deepest
// first, in every hierarchy under Root (a container runtime makes cgroups
// in all of them); a hierarchy without it is skipped. It kills nothing: a
// cgroup still holding processes is left and reported (EBUSY).
func (g Group) Remove() error {
	ents, err := os.ReadDir(g.Root)
	if err != nil {
		return fmt.Errorf("cgroupv1: %w", err)
	}
	var errs []error
	for _, e := range ents {
		base := filepath.Join(g.Root, e.Name())
		// Lstat: symlinks such as cpu,cpuacct → cpu name a hierarchy
		// already visited.
		if fi, err := os.Lstat(base); err != nil || !fi.IsDir() {
			continue
		}
		errs = append(errs, removeTree(filepath.Join(base, filepath.FromSlash(g.Path))))
	}
	return errors.Join(errs...)
}

// RemoveEmpty removes the group's directory in every hierarchy under Root
// where it has neither child cgroups nor processes, and leaves it where it
// has: for a parent shared by jobs, which the last to leave removes.
func (g Group) RemoveEmpty() {
	ents, err := os.ReadDir(g.Root)
	if err != nil {
		return
	}
	for _, e := range ents {
		_ = syscall.Rmdir(filepath.Join(g.Root, e.Name(), filepath.FromSlash(g.Path)))
	}
}

// KillTree SIGKILLs every process in the cgroup directory dir (any
// hierarchy) and its descendant cgroups, again until they are gone, for
// at most wait or until ctx is done; processes left then are reported
// with [ErrSurvivors]. Every process is signalled at least once and the
// cgroups are re-read at least once after. A missing dir is no error.
func KillTree(ctx context.Context, dir string, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	var tick *time.Ticker
	expired := false
	for {
		pids := treeProcs(dir)
		if len(pids) == 0 {
			return nil
		}
		if expired {
			return fmt.Errorf("%w: %s: %v", ErrSurvivors, dir, pids)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if tick == nil {
			tick = time.NewTicker(pollInterval)
			defer tick.Stop()
		}
		// External processes dying: polled, with a deadline.
		select {
		case <-ctx.Done():
			expired = true
		case <-tick.C:
			expired = !time.Now().Before(deadline)
		}
	}
}

// RemoveTree kills the processes in the cgroup directory dir and its
// descendants as [KillTree] does and removes the cgroups, deepest first.
// A missing dir is no error. The errors of both steps are joined; a
// cgroup whose processes survived is left in place.
func RemoveTree(ctx context.Context, dir string, wait time.Duration) error {
	kerr := KillTree(ctx, dir, wait)
	return errors.Join(kerr, removeTree(dir))
}

// treeProcs lists the processes in dir and every cgroup below it.
func treeProcs(dir string) []int {
	var out []int
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // gone meanwhile, or unreadable: nothing to list
		}
		if d.IsDir() {
			pids, _ := readProcs(p)
			out = append(out, pids...)
		}
		return nil
	})
	return out
}

// removeTree rmdirs the cgroup dir and its descendant cgroups, deepest
// first. A missing dir is no error.
func removeTree(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("cgroupv1: %w", err)
	}
	var errs []error
	for _, e := range ents {
		if e.IsDir() {
			errs = append(errs, removeTree(filepath.Join(dir, e.Name())))
		}
	}
	if err := syscall.Rmdir(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("cgroupv1: rmdir %s: %w", dir, err))
	}
	return errors.Join(errs...)
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
