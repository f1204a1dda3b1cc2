package microvm

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/vk-ci/vk/node/exec"
	"github.com/vk-ci/vk/node/exec/vmproto"
)

var _ exec.GuestTree = (*Job)(nil)

// guestRel turns a path under [GuestBuildsDir], as scripts see it, into
// the agent's path relative to its job tree.
func guestRel(guestPath string) (string, error) {
	p := path.Clean("/" + guestPath)
	if p == GuestBuildsDir {
		return ".", nil
	}
	rel, ok := strings.CutPrefix(p, GuestBuildsDir+"/")
	if !ok {
		return "", fmt.Errorf("microvm: %s is outside the guest's job tree %s", guestPath, GuestBuildsDir)
	}
	return rel, nil
}

// StagingDir makes a new empty host directory under the job's for one
// transfer; Cleanup removes whatever is left of it.
func (j *Job) StagingDir(name string) (string, error) {
	base := filepath.Join(j.dir, "staging")
	if err := os.MkdirAll(base, 0o700); err != nil {
		return "", err
	}
	return os.MkdirTemp(base, name+"-")
}

// PushTree streams the content of hostDir into the guest at guestPath
// through the agent's extract, for the job's user.
func (j *Job) PushTree(ctx context.Context, hostDir, guestPath string) error {
	rel, err := guestRel(guestPath)
	if err != nil {
		return err
	}
	if j.client == nil {
		return exec.ErrCleanedUp
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(vmproto.WriteTree(hostDir, ".", pw)) }()
	err = j.client.ExtractAs(ctx, vmproto.PathRequest{Path: rel, UID: j.user.UID, GID: j.user.GID}, pr)
	pr.CloseWithError(errors.New("extract ended"))
	if err != nil {
		return fmt.Errorf("microvm: into the guest's %s: %w", guestPath, err)
	}
	return nil
}

// PullTree streams the guest's guestPath, as the job left it, into
// hostDir through the agent's archive; only, when not empty, narrows it
// to those paths below guestPath ([vmproto.PathRequest.Only]).
func (j *Job) PullTree(ctx context.Context, guestPath, hostDir string, only []string) error {
	rel, err := guestRel(guestPath)
	if err != nil {
		return err
	}
	if j.client == nil {
		return exec.ErrCleanedUp
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := vmproto.ReadTree(hostDir, ".", pr)
		if err == nil {
			_, err = io.Copy(io.Discard, pr) // the tar's trailing padding
		}
		pr.CloseWithError(err) // a failed extraction stops the archive's writes
		done <- err
	}()
	err = j.client.ArchiveOnly(ctx, rel, only, pw)
	pw.CloseWithError(err)
	if rerr := <-done; err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("microvm: from the guest's %s: %w", guestPath, err)
	}
	return nil
}

// ownBuilds gives the guest's job tree to the job's user when it is not
// root: an empty extraction of the tree's root, for that user.
func (j *Job) ownBuilds(ctx context.Context) error {
	if j.user.UID == 0 && j.user.GID == 0 {
		return nil
	}
	var empty bytes.Buffer
	if err := tar.NewWriter(&empty).Close(); err != nil {
		return err
	}
	return j.client.ExtractAs(ctx, vmproto.PathRequest{Path: ".", UID: j.user.UID, GID: j.user.GID}, &empty)
}
