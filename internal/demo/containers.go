package demo

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/ocitest"
	"github.com/vk-ci/vk/internal/testfleet"
	"github.com/vk-ci/vk/node/exec/oci"
)

// ErrNoContainers is returned by [Run] with [Options.Containers] (and by
// [ContainersAvailable]) when this host cannot run containers; the error
// names every missing part and the apt-get line.
var ErrNoContainers = errors.New("demo: --containers cannot run on this host")

// ContainerPackages is the apt-get line that installs what --containers
// needs besides root and a cgroup v1 memory controller.
const ContainerPackages = "apt-get install -y runc busybox-static docker-registry"

// The demo image's contents and the in-image job's names.
const (
	// ImageJob is the "web" tenant's job that runs in the demo image with
	// an httpd service (alias [ImageService]); only with --containers.
	ImageJob = "test:in-image"
	// ImageService is the alias its service answers to.
	ImageService = "db"
	// ImageRepoTag is where the demo pushes its image in the fleet's
	// registry (the job names it as <registry host>/ImageRepoTag).
	ImageRepoTag = "vk-demo/tools:v1"
	// ImageMarker is the content of /etc/vk-demo-image, a file only the
	// image has: the job prints it to show it ran in the image.
	ImageMarker = "vk-demo image: busybox + bash, built at the demo's start"
	// ServedText is what the service serves at /hello.txt.
	ServedText = "hello from the db service (busybox httpd in the demo image)"
)

// hostProbe is how [ContainersAvailable] looks at the host; tests replace
// its parts to play a host lacking one.
type hostProbe struct {
	oci      func() error                 // the container backend: root, cgroup v1, runc
	stat     func(path string) error      // a file exists
	lookPath func(string) (string, error) // a binary on PATH
}

func realProbe() hostProbe {
	return hostProbe{
		oci:      func() error { return oci.Available("", "") },
		stat:     func(p string) error { _, err := os.Stat(p); return err },
		lookPath: exec.LookPath,
	}
}

// ContainersAvailable reports whether `vk demo --containers` can run
// here, with the checks the end-to-end image test makes: the container
// backend (oci.Available: root, a cgroup v1 memory controller, runc),
// busybox-static for the image (ocitest.Busybox), the fleet's registry
// (testfleet.RegistryBinary), and bash, which the image copies from the
// host. It returns nil, or an error wrapping [ErrNoContainers] that names
// every missing part and the apt-get line.
func ContainersAvailable() error { return checkContainers(realProbe()) }

func checkContainers(p hostProbe) error {
	var missing, pkgs []string
	runcMissing := false
	if _, err := p.lookPath(oci.DefaultRunc); err != nil {
		runcMissing = true
		pkgs = append(pkgs, "runc")
	}
	if err := p.oci(); err != nil {
		missing = append(missing, "the container backend: "+err.Error())
		if runcMissing && !strings.Contains(err.Error(), oci.DefaultRunc) {
			missing = append(missing, "runc: not found in PATH")
		}
	} else if runcMissing {
		missing = append(missing, "runc: not found in PATH")
	}
	if err := p.stat(ocitest.Busybox); err != nil {
		missing = append(missing, fmt.Sprintf("busybox-static: %s is missing (the demo image is built from it)", ocitest.Busybox))
		pkgs = append(pkgs, "busybox-static")
	}
	if err := p.stat(testfleet.RegistryBinary); err != nil {
		missing = append(missing, fmt.Sprintf("docker-registry: %s is missing (the registry the nodes pull the image from)", testfleet.RegistryBinary))
		pkgs = append(pkgs, "docker-registry")
	}
	if _, err := p.lookPath("bash"); err != nil {
		missing = append(missing, "bash: not found in PATH (the demo image copies the host's)")
		pkgs = append(pkgs, "bash")
	}
	if len(missing) == 0 {
		return nil
	}
	var b strings.Builder
	for _, m := range missing {
		b.WriteString("\n  - " + m)
	}
	if len(pkgs) > 0 {
		b.WriteString("\n  install: apt-get install -y " + strings.Join(pkgs, " "))
	}
	b.WriteString("\n  --containers needs root, a cgroup v1 memory controller and what `" + ContainerPackages +
		"` installs; `vk demo` without --containers needs none of it")
	return fmt.Errorf("%w:%s", ErrNoContainers, b.String())
}

// imageFiles is the demo image's rootfs: busybox-static and the host's
// bash (ocitest.BaseFilesE), the marker and the file the service serves.
func imageFiles() ([]ocitest.File, error) {
	base, err := ocitest.BaseFilesE()
	if err != nil {
		return nil, err
	}
	return append(base,
		ocitest.File{Name: "etc/vk-demo-image", Body: ImageMarker + "\n"},
		ocitest.File{Name: "srv/", Typ: tar.TypeDir},
		ocitest.File{Name: "srv/hello.txt", Body: ServedText + "\n"},
	), nil
}

// buildImage builds the demo image and pushes it to the plain-HTTP
// registry at host, returning its reference (host/ImageRepoTag) and its
// compressed size in bytes.
//
// The image exposes 8080 (the service's httpd), so the node waits for the
// service to listen before the job's script starts (a health check, as
// gitlab-runner's).
func buildImage(ctx context.Context, host string) (ref string, size int, err error) {
	files, err := imageFiles()
	if err != nil {
		return "", 0, fmt.Errorf("demo: building the image: %w", err)
	}
	layer, err := ocitest.LayerE(files)
	if err != nil {
		return "", 0, fmt.Errorf("demo: building the image: %w", err)
	}
	if _, err := ocitest.PushE(ctx, host, ImageRepoTag, ocitest.Host(), map[string]any{
		"Env":          []string{"PATH=/bin"},
		"ExposedPorts": map[string]struct{}{"8080/tcp": {}},
	}, layer); err != nil {
		return "", 0, fmt.Errorf("demo: pushing the image to %s: %w", host, err)
	}
	return host + "/" + ImageRepoTag, len(layer), nil
}

// imageJob is [ImageJob]: in image, with the image's httpd as service
// [ImageService], it prints the image's marker, what the service serves
// (reached by its alias) and runs the build's artifact.
func imageJob(image string) gitlabfake.JobSpec {
	return gitlabfake.JobSpec{
		Name: ImageJob, Stage: "test", Timeout: sampleTimeout,
		Image: gitlabfake.Image{Name: image},
		Services: []gitlabfake.Image{{
			Name: image, Alias: ImageService,
			Command: []string{"httpd", "-f", "-p", "8080", "-h", "/srv"},
		}},
		Script: []string{
			`echo "inside the image: $(cat /etc/vk-demo-image)"`,
			// The node waited for the service to listen (see buildImage).
			`echo "from the ` + ImageService + ` service: $(wget -qO- http://` + ImageService + `:8080/hello.txt)"`,
			`./dist/greet "from a container"`,
		},
	}
}

// AddImageJobs adds [ImageJob], running in image, to the "web" tenant of
// ts (expected: success). It is what --containers adds to the sample; ts
// without a "web" tenant is left as it is.
func AddImageJobs(ts []SampleTenant, image string) {
	for i := range ts {
		if ts[i].Name != "web" {
			continue
		}
		ts[i].Pipeline.Jobs = append(ts[i].Pipeline.Jobs, imageJob(image))
		ts[i].Want[ImageJob] = gitlabfake.StateSuccess
	}
}
