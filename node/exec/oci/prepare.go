package oci

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/vk-ci/vk/node/exec/imageuser"
	"github.com/vk-ci/vk/node/exec/oci/imagestore"
	"github.com/vk-ci/vk/node/internal/cgroupv1"
	"github.com/vk-ci/vk/proto/job"
)

func (j *Job) prepare(ctx context.Context, spec Spec) error {
	e := j.e
	if e.gvisor() && len(spec.Services) > 0 {
		// A service is a sibling container in the job's network
		// namespace; under gVisor the job's network is the sandbox's
		// own, which no second sandbox can join.
		return fmt.Errorf("%w: the job has %d service(s) and this node runs containers under gVisor (runtime runsc), which does not run services yet", ErrConfig, len(spec.Services))
	}
	if err := j.makeDirs(); err != nil {
		return err
	}
	// Images first: a pull failure leaves nothing to undo but directories.
	img, svcImgs, err := j.pullImages(ctx, spec)
	if err != nil {
		return err
	}
	if err := j.createCgroup(); err != nil {
		return err
	}
	rfs, err := j.jobRootfs(img, spec.Image)
	if err != nil {
		return err
	}
	hostsPath, err := j.writeHosts(spec.Services)
	if err != nil {
		return err
	}
	binds := []bindMount{
		{Host: j.hostBuilds(), Guest: e.cfg.GuestBuildsDir},
		{Host: j.hostTemp(), Guest: GuestTempDir},
		{Host: hostsPath, Guest: "/etc/hosts", ReadOnly: true},
	}
	if e.cfg.CacheDir != "" {
		binds = append(binds, bindMount{Host: e.cfg.CacheDir, Guest: DefaultGuestCacheDir})
	}
	j.env = containerEnv(img.Config.Env, j.user.Home)
	entry := img.Config.Entrypoint
	if spec.Image.Entrypoint != nil {
		entry = clearEmpty(spec.Image.Entrypoint)
	}
	// The keeper: the container's main process lives until the node closes
	// the pipe on its stdin (or TERM); scripts are `runc exec`ed beside it.
	keeper := []string{"/bin/sh", "-c", `trap 'exit 0' TERM; read -r _; exit 0`}
	cs := containerSpec{
		Rootfs:     rfs.merged,
		Hostname:   hostname(j.id),
		Args:       append(append([]string(nil), entry...), keeper...),
		Env:        j.env,
		Cwd:        e.cfg.GuestBuildsDir,
		UID:        j.user.UID,
		GID:        j.user.GID,
		Groups:     j.user.Groups,
		CgroupPath: j.cg.rel() + "/job",
		Binds:      binds,
	}
	if err := j.startJobContainer(cs); err != nil {
		return err
	}
	for i, s := range spec.Services {
		if err := j.startService(i, s, svcImgs[i], spec.ServiceEnv, binds[2:]); err != nil {
			return fmt.Errorf("service %s: %w", s.Name, err)
		}
	}
	j.warnings = append(j.warnings, j.waitServices(ctx)...)
	return ctx.Err()
}

// makeDirs makes the job's builds and temp directories on the host, the
// temp one private.
func (j *Job) makeDirs() error {
	for _, d := range []string{j.hostBuilds(), j.hostTemp()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	return os.Chmod(j.hostTemp(), 0o700)
}

// pullImages gets the job's image and its services' from the store, with
// the job's registry credentials; the job holds them until cleanup.
func (j *Job) pullImages(ctx context.Context, spec Spec) (*imagestore.Image, []*imagestore.Image, error) {
	cr := creds(spec.Credentials)
	get := func(im job.Image) (*imagestore.Image, error) {
		return j.e.cfg.Images.Get(ctx, imagestore.Request{Name: im.Name, PullPolicy: im.PullPolicy, Platform: im.Platform, Credentials: cr})
	}
	img, err := get(spec.Image)
	if err != nil {
		return nil, nil, err
	}
	j.images = append(j.images, img)
	svcImgs := make([]*imagestore.Image, len(spec.Services))
	for i, s := range spec.Services {
		if svcImgs[i], err = get(s); err != nil {
			return nil, nil, fmt.Errorf("service %s: %w", s.Name, err)
		}
		j.images = append(j.images, svcImgs[i])
	}
	return img, svcImgs, nil
}

// createCgroup makes the job's cgroup: the envelope for the job and its
// services.
func (j *Job) createCgroup() error {
	pids := max(j.e.cfg.PidsMax, 0)
	j.cgCreated = true
	return j.cg.create(cgroupv1.Limits{MemBytes: j.size.MemMiB << 20, CPUs: j.size.CPUs, PidsMax: pids})
}

// jobRootfs makes the job container's rootfs on img and resolves the user
// the job runs as (the job's image user, else the image's), who then owns
// the builds and temp directories.
func (j *Job) jobRootfs(img *imagestore.Image, im job.Image) (*layeredRootfs, error) {
	rfs, err := makeRootfs(filepath.Join(j.dir, "job"), img.Rootfs, j.e.cfg.NoOverlay)
	if err != nil {
		return nil, err
	}
	j.rootfs = append(j.rootfs, rfs)
	userSpec := img.Config.User
	if im.User != "" {
		userSpec = im.User
	}
	u, err := imageuser.Resolve(rfs.merged, userSpec)
	if err != nil {
		return nil, fmt.Errorf("%w: image %s: %w", ErrConfig, im.Name, err)
	}
	j.user = u
	for _, d := range []string{j.hostBuilds(), j.hostTemp()} {
		if err := os.Chown(d, int(u.UID), int(u.GID)); err != nil {
			return nil, err
		}
	}
	return rfs, nil
}

// writeHosts writes the job's /etc/hosts: localhost and every service
// alias, all on loopback since the containers share one network
// namespace. It returns the file's host path.
func (j *Job) writeHosts(services []job.Image) (string, error) {
	var names []string
	for i, s := range services {
		hn, dropped := ServiceHostnames(s)
		names = append(names, hn...)
		if len(dropped) > 0 {
			j.warnings = append(j.warnings, fmt.Sprintf(
				"WARNING: service %s (#%d) has several aliases; vk uses one per service (the first, %q) and drops: %s",
				s.Name, i, hn[0], strings.Join(dropped, ", ")))
		}
	}
	hosts := "127.0.0.1\tlocalhost " + strings.Join(names, " ") + "\n::1\tlocalhost ip6-localhost ip6-loopback\n"
	hostsPath := filepath.Join(j.dir, "hosts")
	return hostsPath, os.WriteFile(hostsPath, []byte(hosts), 0o644)
}
