package oci

import (
	"fmt"
	"strings"

	"github.com/vk-ci/vk/node/exec"
	"github.com/vk-ci/vk/proto/job"
)

// Chooser picks a job's backend by its image, per the node's
// configuration: a job with an image (its own or the node's default) runs
// in a container, a job without one in the process backend.
type Chooser struct {
	// Process runs jobs without an image; nil means the node has no
	// process backend.
	Process exec.Executor
	// OCI runs jobs with an image; nil means the node has no container
	// backend (runc missing, not root…).
	OCI *Executor
	// DefaultImage is the image of a job that names none; "" means such a
	// job runs in the process backend.
	DefaultImage string
	// RequireImage refuses a job that ends up without an image.
	RequireImage bool
}

// For returns the executor for j, and warnings for its trace. A job the
// node cannot run as configured gets an error wrapping [ErrConfig], which
// the stage runner reports as failure `configuration`.
func (c *Chooser) For(j *job.CiJob) (exec.Executor, []string, error) {
	var img *job.Image
	if j.Image != nil && strings.TrimSpace(j.Image.Name) != "" {
		im := *j.Image
		img = &im
	} else if c.DefaultImage != "" {
		img = &job.Image{Name: c.DefaultImage}
		if j.Image != nil { // keep the job's options on the node's image
			im := *j.Image
			im.Name = c.DefaultImage
			img = &im
		}
	}
	if img == nil {
		if c.RequireImage {
			return nil, nil, fmt.Errorf("%w: this node runs jobs only in containers and the job names no image (set image: in .gitlab-ci.yml)", ErrConfig)
		}
		if c.Process == nil {
			return nil, nil, fmt.Errorf("%w: the job names no image and this node has no process executor", ErrConfig)
		}
		var warns []string
		if len(j.Services) > 0 {
			warns = append(warns, fmt.Sprintf("WARNING: the job has %d service(s) but no image; services run only with the container executor and are ignored", len(j.Services)))
		}
		return c.Process, warns, nil
	}
	if c.OCI == nil {
		return nil, nil, fmt.Errorf("%w: the job names image %s but this node has no container executor", ErrConfig, img.Name)
	}
	var env []string
	for _, v := range j.Variables {
		if !v.File {
			env = append(env, v.Key+"="+v.Value)
		}
	}
	return c.OCI.For(Spec{Image: *img, Services: j.Services, Credentials: j.RegistryCredentials, ServiceEnv: env}), nil, nil
}
