package process

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
	"time"
)

// cgroup is one job's cgroup v1 directories, one per controller in use.
type cgroup struct {
	mu   sync.Mutex        // guards dirs
	dirs map[string]string // controller → directory; emptied by remove
}

// dir returns the directory of ctrl, if the cgroup has one.
func (cg *cgroup) dir(ctrl string) (string, bool) {
	cg.mu.Lock()
	defer cg.mu.Unlock()
	d, ok := cg.dirs[ctrl]
	return d, ok
}

// v1Available reports whether root holds cgroup v1 controller hierarchies
// we can write to (root needed).
func v1Available(root string) bool {
	if _, err := os.Stat(filepath.Join(root, "memory", "memory.limit_in_bytes")); err != nil {
		return false
	}
	return os.Geteuid() == 0
}

// newCgroup creates root/<ctrl>/<parent>/<id> for the memory, cpu, cpuacct
// and pids controllers present, and writes the limits.
func newCgroup(root, parent, id string, memBytes int64, cpus int, pidsMax int) (*cgroup, error) {
	cg := &cgroup{dirs: map[string]string{}}
	for _, ctrl := range []string{"memory", "cpu", "cpuacct", "pids"} {
		base := filepath.Join(root, ctrl)
		if _, err := os.Stat(base); err != nil {
			continue
		}
		dir := filepath.Join(base, parent, id)
		err := os.MkdirAll(filepath.Dir(dir), 0o755)
		if err == nil {
			// Mkdir, not MkdirAll: a job must never share another's cgroup.
			err = os.Mkdir(dir, 0o755)
		}
		if err != nil {
			_ = cg.remove()
			return nil, fmt.Errorf("cgroup %s: %w", ctrl, err)
		}
		cg.dirs[ctrl] = dir
	}
	var errs []error
	if d, ok := cg.dirs["memory"]; ok && memBytes > 0 {
		errs = append(errs, writeFile(d, "memory.limit_in_bytes", strconv.FormatInt(memBytes, 10)))
		// Keep the job from escaping the limit through swap where the
		// kernel accounts it; absent when swap accounting is off.
		if _, err := os.Stat(filepath.Join(d, "memory.memsw.limit_in_bytes")); err == nil {
			errs = append(errs, writeFile(d, "memory.memsw.limit_in_bytes", strconv.FormatInt(memBytes, 10)))
		}
		_ = writeFile(d, "memory.swappiness", "0")
	}
	if d, ok := cg.dirs["cpu"]; ok && cpus > 0 {
		errs = append(errs,
			writeFile(d, "cpu.cfs_period_us", "100000"),
			writeFile(d, "cpu.cfs_quota_us", strconv.Itoa(cpus*100000)))
	}
	if d, ok := cg.dirs["pids"]; ok && pidsMax > 0 {
		errs = append(errs, writeFile(d, "pids.max", strconv.Itoa(pidsMax)))
	}
	if err := errors.Join(errs...); err != nil {
		_ = cg.remove()
		return nil, err
	}
	return cg, nil
}

func writeFile(dir, name, value string) error {
	if err := os.WriteFile(filepath.Join(dir, name), []byte(value), 0o644); err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	return nil
}

// add moves pid into every controller's cgroup.
func (cg *cgroup) add(pid int) error {
	cg.mu.Lock()
	defer cg.mu.Unlock()
	var errs []error
	for _, d := range cg.dirs {
		errs = append(errs, writeFile(d, "cgroup.procs", strconv.Itoa(pid)))
	}
	return errors.Join(errs...)
}

func (cg *cgroup) readInt(ctrl, name string) (int64, bool) {
	d, ok := cg.dir(ctrl)
	if !ok {
		return 0, false
	}
	b, err := os.ReadFile(filepath.Join(d, name))
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}

// cpu returns the job's CPU time (cpuacct.usage, nanoseconds).
func (cg *cgroup) cpu() (time.Duration, bool) {
	n, ok := cg.readInt("cpuacct", "cpuacct.usage")
	return time.Duration(n), ok
}

// peak returns memory.max_usage_in_bytes.
func (cg *cgroup) peak() (int64, bool) { return cg.readInt("memory", "memory.max_usage_in_bytes") }

// oomKills returns the oom_kill counter of memory.oom_control (kernels ≥
// 4.13), or failcnt-free false when the kernel does not report it.
func (cg *cgroup) oomKills() (int64, bool) {
	d, ok := cg.dir("memory")
	if !ok {
		return 0, false
	}
	b, err := os.ReadFile(filepath.Join(d, "memory.oom_control"))
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), " "); ok && k == "oom_kill" {
			n, err := strconv.ParseInt(v, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// pids lists the processes still in the job's cgroup.
func (cg *cgroup) pids() []int {
	for _, ctrl := range []string{"pids", "memory", "cpuacct", "cpu"} {
		d, ok := cg.dir(ctrl)
		if !ok {
			continue
		}
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
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

// remove deletes the cgroup directories; they must be empty of processes.
func (cg *cgroup) remove() error {
	cg.mu.Lock()
	defer cg.mu.Unlock()
	var errs []error
	for ctrl, d := range cg.dirs {
		if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("cgroup %s: %w", ctrl, err))
			continue
		}
		delete(cg.dirs, ctrl)
	}
	return errors.Join(errs...)
}
