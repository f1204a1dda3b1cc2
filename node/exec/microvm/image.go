package microvm

import (
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/vk-ci/vk/node/exec"
	"github.com/vk-ci/vk/node/exec/imageuser"
	"github.com/vk-ci/vk/node/exec/oci/imagestore"
	"github.com/vk-ci/vk/node/regproxy"
	"github.com/vk-ci/vk/proto/job"
)

// A job's image becomes its guest's root file system: the image store
// pulls and unpacks it once (as for the oci backend); the executor makes
// an ext4 disk of that tree once per image ID (mkfs.ext4 -d, with
// [Config.DiskMiB] of free space), kept in <root>/disks; each job's
// guest boots on a qcow2 copy-on-write overlay of that disk in its own
// directory, so nothing a job writes reaches the cached disk or another
// job, and the overlay goes with the job. The guest's init mounts the
// disk and makes it the root (cmd/vk-agent, root.go); scripts then run in
// the image's tree with its environment, under its bash when it has one,
// else its /bin/sh, as the image's USER (or the job's image user),
// resolved against the image's /etc/passwd and /etc/group as Docker
// does, and through the image's entrypoint (or the job's): each script is
// the entrypoint's arguments, as gitlab-runner's Docker executor starts
// the build container's entrypoint with the shell for every script, so
// an entrypoint that ends with `exec "$@"` runs it and `entrypoint: [""]`
// clears it. The job tree /builds and everything the node puts there
// belong to that user.

// Spec is what a job asks of the microvm backend beyond its size.
type Spec struct {
	// Image is the job's image; "" Name means the initramfs root.
	Image job.Image
	// Credentials are the job's registry credentials, used only to pull
	// the images (AUTH-05).
	Credentials []job.RegistryCredential
	// Services are the job's services, each its own VM beside the job's
	// on the job's private network (services.go).
	Services []job.Image
	// ServiceEnv is the environment every service gets before its own
	// variables (the job's non-file variables, as gitlab-runner passes
	// them), KEY=VALUE.
	ServiceEnv []string
	// NetMode is the job's net.mode: "switch" gives the job's VM a
	// network whose only way out is the job's registry proxy at
	// registry.vk (switch.go); any other mode none.
	NetMode string
	// Registry is the job's guest registry proxy (regproxy.New with the
	// job's token) under "switch"; nil means one refusing every request
	// (XFER-19).
	Registry http.Handler
	// RegistryNamespaces are the job's token's grants, for the steps'
	// VK_REGISTRY_NAMESPACES under "switch" (XFER-22).
	RegistryNamespaces []regproxy.Namespace
}

// For returns an [exec.Executor] whose Prepare boots spec's job.
func (e *Executor) For(spec Spec) exec.Executor { return bound{e, spec} }

type bound struct {
	e    *Executor
	spec Spec
}

func (b bound) Prepare(ctx context.Context, req exec.PrepareRequest) (exec.Job, error) {
	j, err := b.e.prepare(ctx, req, b.spec)
	if err != nil {
		return nil, err
	}
	return j, nil
}

// imageRoot pulls the spec's image, makes (or finds) its disk and the job's overlay
// of it, and sets the job's environment and shell from the image. It
// returns the overlay's path.
func (e *Executor) imageRoot(ctx context.Context, j *Job, spec Spec) (string, error) {
	img := spec.Image
	if e.cfg.Images == nil {
		return "", fmt.Errorf("%w: the job names image %s and this node's microvm backend has no image store", exec.ErrConfiguration, img.Name)
	}
	cr := make([]imagestore.Credential, 0, len(spec.Credentials))
	for _, c := range spec.Credentials {
		cr = append(cr, imagestore.Credential{Host: c.URL, Username: c.Username, Password: c.Password})
	}
	im, err := e.cfg.Images.Get(ctx, imagestore.Request{Name: img.Name, PullPolicy: img.PullPolicy, Platform: img.Platform, Credentials: cr})
	if err != nil {
		return "", err
	}
	j.image = im
	base, err := e.disks.get(im, e.buildDisk)
	if err != nil {
		return "", fmt.Errorf("the image's disk: %w", err)
	}
	overlay := filepath.Join(j.dir, "root.qcow2")
	if out, err := osexec.CommandContext(ctx, e.qemuImg, "create", "-q", "-f", "qcow2", "-F", "raw", "-b", base, overlay).CombinedOutput(); err != nil {
		return "", fmt.Errorf("qemu-img create: %v: %s", err, strings.TrimSpace(string(out)))
	}
	userSpec := im.Config.User
	if img.User != "" {
		userSpec = img.User
	}
	if j.user, err = imageuser.Resolve(im.Rootfs, userSpec); err != nil {
		return "", fmt.Errorf("%w: image %s: %w", exec.ErrConfiguration, img.Name, err)
	}
	j.entry = im.Config.Entrypoint
	if img.Entrypoint != nil {
		j.entry = clearEmpty(img.Entrypoint)
	}
	j.env = imageEnv(im.Config.Env, j.user.Home)
	j.shell = imageShell(im.Rootfs)
	return overlay, nil
}

// clearEmpty turns [""] (a cleared entrypoint, as GitLab sends it) into
// nil.
func clearEmpty(s []string) []string {
	if len(s) == 1 && s[0] == "" {
		return nil
	}
	return s
}

// imageEnv is the scripts' base environment from the image's: its
// variables, with PATH and HOME (the user's home) defaulted.
func imageEnv(img []string, home string) []string {
	env := append([]string(nil), img...)
	has := func(k string) bool {
		for _, v := range env {
			if strings.HasPrefix(v, k+"=") {
				return true
			}
		}
		return false
	}
	if !has("PATH") {
		env = append(env, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	}
	if !has("HOME") {
		env = append(env, "HOME="+home)
	}
	return env
}

// imageShell is the image's bash, as gitlab-runner's bash detection
// looks for it, else /bin/sh.
func imageShell(rootfs string) []string {
	for _, p := range []string{"/usr/local/bin/bash", "/usr/bin/bash", "/bin/bash"} {
		if _, err := os.Lstat(filepath.Join(rootfs, p)); err == nil {
			return []string{p, "--noprofile", "--norc"}
		}
	}
	return []string{"/bin/sh"}
}

// diskCache makes each image's disk once, however many jobs ask at once,
// and never removes one while it is being made.
type diskCache struct {
	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

// lock takes image id's lock and returns its unlock.
func (c *diskCache) lock(id string) func() {
	c.mu.Lock()
	if c.locks == nil {
		c.locks = map[string]*sync.Mutex{}
	}
	l := c.locks[id]
	if l == nil {
		l = &sync.Mutex{}
		c.locks[id] = l
	}
	c.mu.Unlock()
	l.Lock()
	return l.Unlock
}

func (c *diskCache) get(im *imagestore.Image, build func(*imagestore.Image) (string, error)) (string, error) {
	defer c.lock(im.ID)()
	return build(im)
}

// RemoveDisks removes the disks of images ids (image IDs as the image
// store's GC returns those it removed): a disk goes with its image. No
// running job uses them: a job holds its image until Cleanup.
func (e *Executor) RemoveDisks(ids []string) {
	for _, id := range ids {
		hex := strings.TrimPrefix(id, "sha256:")
		if !idRe.MatchString(hex) {
			continue
		}
		unlock := e.disks.lock(id)
		if err := os.Remove(filepath.Join(e.cfg.Root, disksDir, hex+".ext4")); err == nil {
			e.log.Info("microVM disk of a removed image removed", "image", id)
		} else if !os.IsNotExist(err) {
			e.log.Warn("microVM disk of a removed image not removed", "image", id, "err", err)
		}
		unlock()
	}
}

// disksDir holds the images' disks under the executor's root.
const disksDir = "disks"

// buildDisk returns the image's disk, making it when absent: an ext4
// file system of its tree with [Config.DiskMiB] to spare, no journal (a
// job's disk does not outlive a crash of its guest).
func (e *Executor) buildDisk(im *imagestore.Image) (string, error) {
	id := strings.TrimPrefix(im.ID, "sha256:")
	if !idRe.MatchString(id) {
		return "", fmt.Errorf("image id %q", im.ID)
	}
	dir := filepath.Join(e.cfg.Root, disksDir)
	p := filepath.Join(dir, id+".ext4")
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	var used int64
	err := filepath.WalkDir(im.Rootfs, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if info, err := d.Info(); err == nil {
			used += info.Size() + 4096 // a block per entry, roughly
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	kib := used/1024 + used/1024/5 + e.cfg.DiskMiB*1024
	tmp := p + ".tmp"
	os.Remove(tmp)
	out, err := osexec.Command(e.mkfs, "-q", "-F", "-L", "vkroot", "-m", "0", "-O", "^has_journal",
		"-E", "root_owner=0:0", "-d", im.Rootfs, tmp, strconv.FormatInt(kib, 10)+"k").CombinedOutput()
	if err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("mkfs.ext4: %v: %s", err, strings.TrimSpace(string(out)))
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return "", err
	}
	return p, nil
}
