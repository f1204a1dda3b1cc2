package oci

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// jobCgroup is a job's cgroup v1 directory <root>/<ctrl>/<parent>/<id> in
// the memory, cpu, cpuacct and pids controllers. It carries the job's
// envelope; the job's container and its services are runc-made children of
// it, so the limits bound them together (v1 memory is hierarchical on
// current kernels).
type jobCgroup struct {
	root, parent, id string
	// mu serialises creating and removing jobs' cgroups under the shared
	// parent, which the last job to leave removes; shared by an
	// executor's jobs.
	mu *sync.Mutex
}

// cgroupV1Available reports whether root has writable v1 controllers.
func cgroupV1Available(root string) bool {
	if _, err := os.Stat(filepath.Join(root, "memory", "memory.limit_in_bytes")); err != nil {
		return false
	}
	return os.Geteuid() == 0
}

// rel is the job cgroup's path from the cgroup root, as runc's
// cgroupsPath takes it.
func (cg *jobCgroup) rel() string { return "/" + cg.parent + "/" + cg.id }

func (cg *jobCgroup) dir(ctrl string) string {
	return filepath.Join(cg.root, ctrl, cg.parent, cg.id)
}

// create makes the directories and writes the limits.
func (cg *jobCgroup) create(memBytes int64, cpus, pidsMax int) error {
	cg.mu.Lock()
	defer cg.mu.Unlock()
	for _, ctrl := range []string{"memory", "cpu", "cpuacct", "pids"} {
		if _, err := os.Stat(filepath.Join(cg.root, ctrl)); err != nil {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(cg.dir(ctrl)), 0o755); err != nil {
			return fmt.Errorf("cgroup %s: %w", ctrl, err)
		}
		// Mkdir, not MkdirAll: a job never shares another's cgroup.
		if err := os.Mkdir(cg.dir(ctrl), 0o755); err != nil {
			return fmt.Errorf("cgroup %s: %w", ctrl, err)
		}
	}
	w := func(ctrl, name, v string) error {
		if err := os.WriteFile(filepath.Join(cg.dir(ctrl), name), []byte(v), 0o644); err != nil {
			return fmt.Errorf("cgroup %s/%s: %w", ctrl, name, err)
		}
		return nil
	}
	var errs []error
	if memBytes > 0 {
		errs = append(errs, w("memory", "memory.limit_in_bytes", strconv.FormatInt(memBytes, 10)))
		if _, err := os.Stat(filepath.Join(cg.dir("memory"), "memory.memsw.limit_in_bytes")); err == nil {
			errs = append(errs, w("memory", "memory.memsw.limit_in_bytes", strconv.FormatInt(memBytes, 10)))
		}
		_ = w("memory", "memory.swappiness", "0")
	}
	if cpus > 0 {
		errs = append(errs, w("cpu", "cpu.cfs_period_us", "100000"), w("cpu", "cpu.cfs_quota_us", strconv.Itoa(cpus*100000)))
	}
	if pidsMax > 0 {
		errs = append(errs, w("pids", "pids.max", strconv.Itoa(pidsMax)))
	}
	return errors.Join(errs...)
}

func (cg *jobCgroup) readInt(ctrl, name string) (int64, bool) {
	b, err := os.ReadFile(filepath.Join(cg.dir(ctrl), name))
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}

// oomKills sums memory.oom_control's oom_kill counter over the job
// cgroup and its children: v1 counts a kill in the victim's own cgroup,
// not in the ancestor whose limit was hit.
func (cg *jobCgroup) oomKills() int64 {
	dirs := []string{cg.dir("memory")}
	if subs, err := os.ReadDir(cg.dir("memory")); err == nil {
		for _, s := range subs {
			if s.IsDir() {
				dirs = append(dirs, filepath.Join(cg.dir("memory"), s.Name()))
			}
		}
	}
	var total int64
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "memory.oom_control"))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), " "); ok && k == "oom_kill" {
				n, _ := strconv.ParseInt(v, 10, 64)
				total += n
			}
		}
	}
	return total
}

// procs lists the host PIDs in the child cgroup sub ("" the job cgroup
// itself) of the pids (or memory) controller.
func (cg *jobCgroup) procs(sub string) []int {
	for _, ctrl := range []string{"pids", "memory"} {
		b, err := os.ReadFile(filepath.Join(cg.dir(ctrl), sub, "cgroup.procs"))
		if err != nil {
			continue
		}
		var out []int
		for f := range strings.FieldsSeq(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
		return out
	}
	return nil
}

// remove deletes the job's directories in every controller hierarchy
// under the root (runc makes its containers' cgroups in all of them),
// deepest first, then the parent where it is left empty. A directory still
// holding processes is reported.
func (cg *jobCgroup) remove() error {
	cg.mu.Lock()
	defer cg.mu.Unlock()
	ctrls, err := os.ReadDir(cg.root)
	if err != nil {
		return err
	}
	var errs []error
	for _, c := range ctrls {
		base := filepath.Join(cg.root, c.Name())
		if fi, err := os.Lstat(base); err != nil || !fi.IsDir() {
			continue // symlinks such as cpu,cpuacct → cpu
		}
		jd := filepath.Join(base, cg.parent, cg.id)
		if subs, err := os.ReadDir(jd); err == nil {
			for _, s := range subs {
				if s.IsDir() {
					if err := rmdirCgroup(filepath.Join(jd, s.Name())); err != nil {
						errs = append(errs, err)
					}
				}
			}
		}
		if err := rmdirCgroup(jd); err != nil {
			errs = append(errs, err)
		}
		// The shared parent goes when the last job leaves it.
		_ = syscall.Rmdir(filepath.Join(base, cg.parent))
	}
	return errors.Join(errs...)
}

func rmdirCgroup(d string) error {
	err := syscall.Rmdir(d)
	if err == nil || errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return fmt.Errorf("cgroup %s: %w", d, err)
}
