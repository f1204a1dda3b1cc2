package process

import (
	"syscall"

	"github.com/vk-ci/vk/node/internal/cgroupv1"
)

// cgroup is one job's cgroup v1 group, <root>/<ctrl>/<parent>/<job id> in
// the memory, cpu, cpuacct and pids controllers present; the job's
// processes run in it directly (no child cgroups).
type cgroup struct {
	cgroupv1.Group
	// dirs are the directories Create made, controller → directory; set
	// once, read-only afterwards. Remove finds them itself.
	dirs map[string]string
}

// newCgroup creates the job's cgroup and writes the limits; on error
// nothing of it is left.
func newCgroup(root, parent, id string, lim cgroupv1.Limits) (*cgroup, error) {
	g := cgroupv1.Group{Root: root, Path: parent + "/" + id}
	dirs, err := g.Create(lim)
	if err != nil {
		return nil, err
	}
	return &cgroup{Group: g, dirs: dirs}, nil
}

// kill SIGKILLs every process in the job's cgroup once, without waiting.
func (cg *cgroup) kill() {
	for _, p := range cg.Procs("") {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
}
