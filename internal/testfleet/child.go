package testfleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// sigkillChild SIGKILLs a child process (a hub's or a node's) and waits
// until exited says it was reaped; a nil cmd is no child, and nothing to do.
func sigkillChild(cmd *exec.Cmd, exited <-chan struct{}) error {
	if cmd == nil {
		return nil
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	<-exited
	return nil
}

// termChild ends a child process gracefully with SIGTERM, killing it when
// ctx ends first; what names the child in that error.
func termChild(ctx context.Context, cmd *exec.Cmd, exited <-chan struct{}, what string) error {
	if cmd == nil {
		return nil
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		return nil
	case <-ctx.Done():
		cmd.Process.Kill()
		<-exited
		return fmt.Errorf("testfleet: %s did not stop in time: %w", what, ctx.Err())
	}
}
