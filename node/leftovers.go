package node

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/node/internal/cgroupv1"
)

// cgroupRoot is where the cgroup v1 controllers are mounted (both
// backends' default).
var cgroupRoot = cgroupv1.DefaultRoot

// leftoverKillWait bounds how long a leftover cgroup's processes get to
// die after SIGKILL before its directory is left in place.
const leftoverKillWait = 10 * time.Second

// cleanLeftovers removes what the jobs of a previous agent left when it
// died without cleaning up (killed, host crash): before any job starts,
// nothing under the agent's own executor directories can be in use.
//
//   - oci: every container in the backend's private runc root
//     (<state_dir>/oci/.runc) is deleted with `runc delete --force`, every
//     mount under <state_dir>/oci is unmounted (deepest first, lazily),
//     and the jobs' directories there are removed;
//   - cgroups: every job cgroup under the process backend's parent (when
//     [ExecutorConfig.Cgroups]) and the oci backend's parent (oci, auto)
//     has its processes killed (SIGKILL, children first) and is removed.
//
// The parents are the agent's own: one agent per host, or distinct
// [ExecutorConfig.CgroupParent]s. Without cgroups a process job's
// orphans cannot be found; the process backend's Pdeathsig kills the
// job's shell with the agent. Failures are logged, never fatal: a
// leftover costs room, not correctness.
func (a *Agent) cleanLeftovers() {
	be := a.be
	if a.cfg.Executor.Backend != BackendProcess {
		a.cleanRuncRoot(filepath.Join(be.ociRoot, ".runc"))
		a.unmountUnder(be.ociRoot)
		if ents, err := os.ReadDir(be.ociRoot); err == nil {
			for _, e := range ents {
				if e.Name() == ".runc" {
					continue
				}
				p := filepath.Join(be.ociRoot, e.Name())
				a.log.Info("removing a container job directory left by a previous run", "dir", p)
				if err := os.RemoveAll(p); err != nil {
					a.log.Warn("leftover job directory not removed", "dir", p, logkey.Err, err)
				}
			}
		}
	}
	var parents []string
	if be.procCg != "" && a.opts.Executor == nil {
		parents = append(parents, be.procCg)
	}
	if a.cfg.Executor.Backend != BackendProcess {
		parents = append(parents, be.ociParent)
	}
	for _, p := range parents {
		a.cleanCgroupParent(p)
	}
}

// cleanRuncRoot force-deletes every container runc knows under root.
func (a *Agent) cleanRuncRoot(root string) {
	if _, err := os.Stat(root); err != nil {
		return
	}
	bin, err := osexec.LookPath(a.cfg.ociRuntimeBinary())
	if err != nil {
		return
	}
	out, err := osexec.Command(bin, "--root", root, "list", "--quiet").Output()
	if err != nil {
		a.log.Warn("runc list of leftover containers failed", "root", root, logkey.Err, err)
		return
	}
	for _, id := range strings.Fields(string(out)) {
		a.log.Info("deleting a container left by a previous run", "container", id)
		if b, err := osexec.Command(bin, "--root", root, "delete", "--force", id).CombinedOutput(); err != nil {
			a.log.Warn("leftover container not deleted", "container", id, logkey.Err, err, "runc", strings.TrimSpace(string(b)))
		}
	}
}

// mountPoints returns the mount points in mountinfo content at or under
// dir, deepest first.
func mountPoints(mountinfo []byte, dir string) []string {
	dir = filepath.Clean(dir)
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	slices.SortStableFunc(out, func(x, y string) int { return strings.Count(y, "/") - strings.Count(x, "/") })
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space…).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountUnder lazily unmounts every mount under dir.
func (a *Agent) unmountUnder(dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	for _, mp := range mountPoints(b, dir) {
		if mp == filepath.Clean(dir) {
			continue
		}
		a.log.Info("unmounting a mount left by a previous run", "mount", mp)
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			a.log.Warn("leftover mount not unmounted", "mount", mp, logkey.Err, err)
		}
	}
}

// cleanCgroupParent removes every job cgroup under parent in every
// controller hierarchy, killing what still runs in it.
func (a *Agent) cleanCgroupParent(parent string) {
	ctrls, err := os.ReadDir(cgroupRoot)
	if err != nil {
		return
	}
	for _, c := range ctrls {
		dir := filepath.Join(cgroupRoot, c.Name(), parent)
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if !e.IsDir() {
				continue
			}
			p := filepath.Join(dir, e.Name())
			a.log.Info("removing a job cgroup left by a previous run", "cgroup", p)
			if err := cgroupv1.RemoveTree(a.runCtx, p, leftoverKillWait); err != nil {
				a.log.Warn("leftover cgroup not removed", "cgroup", p, logkey.Err, err)
			}
		}
	}
}
