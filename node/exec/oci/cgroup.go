package oci

import (
	"errors"
	"fmt"
	"sync"

	"github.com/vk-ci/vk/node/internal/cgroupv1"
)

// jobCgroup is a job's cgroup v1 group <root>/<ctrl>/<parent>/<id> in the
// memory, cpu, cpuacct and pids controllers. It carries the job's
// envelope; the job's container and its services are runc-made children of
// it, so the limits bound them together (v1 memory is hierarchical on
// current kernels).
type jobCgroup struct {
	cgroupv1.Group
	parent string
	// mu serialises creating and removing jobs' cgroups under the shared
	// parent, which the last job to leave removes; shared by an
	// executor's jobs.
	mu *sync.Mutex
}

func newJobCgroup(root, parent, id string, mu *sync.Mutex) *jobCgroup {
	return &jobCgroup{Group: cgroupv1.Group{Root: root, Path: parent + "/" + id}, parent: parent, mu: mu}
}

// rel is the job cgroup's path from the cgroup root, as runc's
// cgroupsPath takes it.
func (cg *jobCgroup) rel() string { return "/" + cg.Path }

func (cg *jobCgroup) dir(ctrl string) string { return cg.Dir(ctrl) }

// create makes the directories and writes the limits. A limit whose
// controller is not mounted is an error: the container backend promises
// its envelope.
func (cg *jobCgroup) create(lim cgroupv1.Limits) error {
	cg.mu.Lock()
	defer cg.mu.Unlock()
	dirs, err := cg.Create(lim)
	if err != nil {
		return err
	}
	for _, c := range []struct {
		ctrl string
		want bool
	}{{"memory", lim.MemBytes > 0}, {"cpu", lim.CPUs > 0}, {"pids", lim.PidsMax > 0}} {
		if _, ok := dirs[c.ctrl]; c.want && !ok {
			return fmt.Errorf("cgroup %s: controller not mounted: %w", c.ctrl, errors.ErrUnsupported)
		}
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
	err := cg.Remove()
	// The shared parent goes when the last job leaves it.
	cgroupv1.Group{Root: cg.Root, Path: cg.parent}.RemoveEmpty()
	return err
}
