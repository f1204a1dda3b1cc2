package stage

import (
	"context"
	"fmt"
	"os"

	"github.com/vk-ci/vk/node/exec"
	"github.com/vk-ci/vk/node/xfer/fileset"
	"github.com/vk-ci/vk/proto/job"
)

// A backend whose job tree the host cannot reach ([exec.GuestTree], the
// microvm backend) gets its trees through the guest's agent: each
// host-side transfer that fills the project directory writes into an
// empty staging directory of its own, whose content is then pushed into
// the guest; the transfers that read it (archive_cache, upload_artifacts)
// read one copy of the tree as the job left it, pulled once after the
// scripts, and only as much of it as the job's cache and artifact paths
// can select ([pullRoots]): a job keeping build/out.bin does not copy its
// .git and sources out of the VM. Every other backend's transfers work
// on [exec.Job.HostPath] of the project directory, as before.

// intoProject runs fn, a host-side transfer writing into the project
// directory, on the directory it writes.
func (x *run) intoProject(ctx context.Context, name string, fn func(dir string) error) error {
	gt, ok := x.ej.(exec.GuestTree)
	if !ok {
		return fn(x.ej.HostPath(x.projectDir))
	}
	dir, err := gt.StagingDir(name)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSystem, err)
	}
	defer os.RemoveAll(dir)
	if err := fn(dir); err != nil {
		return err
	}
	if err := gt.PushTree(ctx, dir, x.projectDir); err != nil {
		return fmt.Errorf("%w: %w", ErrSystem, err)
	}
	return nil
}

// fromProject runs fn, a host-side transfer reading the project
// directory, on a directory holding it.
func (x *run) fromProject(ctx context.Context, fn func(dir string) error) error {
	gt, ok := x.ej.(exec.GuestTree)
	if !ok {
		return fn(x.ej.HostPath(x.projectDir))
	}
	if x.pulled == "" {
		dir, err := gt.StagingDir("job-tree")
		if err != nil {
			return fmt.Errorf("%w: %w", ErrSystem, err)
		}
		if roots, all := pullRoots(x.job); all || len(roots) > 0 {
			if err := gt.PullTree(ctx, x.projectDir, dir, roots); err != nil {
				os.RemoveAll(dir)
				return fmt.Errorf("%w: %w", ErrSystem, err)
			}
		}
		x.pulled = dir
	}
	return fn(x.pulled)
}

// pullRoots returns the paths of the project directory that the job's
// caches and artifacts can select, whether or not they apply to this
// outcome (one pull serves both); all is true when they can select
// anywhere (a leading wildcard, the whole tree, untracked files).
func pullRoots(j *job.CiJob) (roots []string, all bool) {
	var specs []fileset.Spec
	for _, c := range j.Caches {
		specs = append(specs, fileset.Spec{Paths: c.Paths, Untracked: c.Untracked})
	}
	for _, a := range j.Artifacts {
		specs = append(specs, fileset.Spec{Paths: a.Paths, Exclude: a.Exclude, Untracked: a.Untracked})
	}
	return fileset.Roots(specs...)
}

// guestMkdir makes the project directory in a guest the host cannot
// reach (an empty push creates it); ok is false for other backends.
func (x *run) guestMkdir(ctx context.Context) (ok bool, err error) {
	if _, isGuest := x.ej.(exec.GuestTree); !isGuest {
		return false, nil
	}
	return true, x.intoProject(ctx, "mkdir", func(string) error { return nil })
}
