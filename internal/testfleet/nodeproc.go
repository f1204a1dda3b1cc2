package testfleet

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/pelletier/go-toml/v2"
	"github.com/vk-ci/vk/node"
)

// A node of [NodeSpec.Binary] runs as a child process, `vk node run
// --config <Dir>/node.toml`, so that [Node.Kill] is a real SIGKILL: the
// agent gets no chance to interrupt its jobs, and whatever the jobs
// started on the host (a microVM's QEMU, a container) is left to die by
// itself or to the next start's sweep, as on a machine whose node
// crashed. The child's log goes to the fleet's.

// childReadyWait bounds a child node's start to its control socket
// answering.
const childReadyWait = 2 * time.Minute

// startChild runs the node's binary on its config and waits until the
// agent answers on its control socket (node.sock): node.Start has
// returned in the child, its leftovers swept and its journal recovered.
func (n *Node) startChild(ctx context.Context) error {
	b, err := toml.Marshal(n.cfg)
	if err != nil {
		return fmt.Errorf("testfleet: node %s config: %w", n.Name, err)
	}
	path := filepath.Join(n.Dir, "node.toml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return err
	}
	cmd := exec.Command(n.spec.Binary, "node", "run", "--config", path)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("testfleet: node %s process: %w", n.Name, err)
	}
	go copyLog(stderr, n.f.log.With("component", "node", "node", n.Name, "pid", cmd.Process.Pid))
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	if err := n.waitControl(ctx, exited); err != nil {
		cmd.Process.Kill()
		<-exited
		return err
	}
	n.mu.Lock()
	n.proc, n.exited = cmd, exited
	n.mu.Unlock()
	return nil
}

// waitControl polls the child's control socket until it answers, failing
// when the child exits first.
func (n *Node) waitControl(ctx context.Context, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, childReadyWait)
	defer cancel()
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		if _, err := node.Control(ctx, n.Dir, node.CmdStatus); err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("testfleet: node %s process exited before it answered on its control socket (its log is the fleet's)", n.Name)
		case <-ctx.Done():
			return fmt.Errorf("testfleet: node %s process never answered on its control socket: %w", n.Name, ctx.Err())
		case <-t.C:
		}
	}
}

// Process returns the node's child process ([NodeSpec.Binary]), nil
// when the node runs in this process or its process was killed.
func (n *Node) Process() *os.Process {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil {
		return nil
	}
	return n.proc.Process
}

// takeChild forgets the child process, returning it and its exit.
func (n *Node) takeChild() (*exec.Cmd, <-chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	cmd, exited := n.proc, n.exited
	n.proc, n.exited = nil, nil
	return cmd, exited
}

// killChild SIGKILLs the child and waits for it to be reaped.
func (n *Node) killChild() error {
	cmd, exited := n.takeChild()
	return sigkillChild(cmd, exited)
}

// stopChild ends the child gracefully (SIGTERM: `vk node run` drains and
// shuts down within shutdown_timeout_secs), killing it when ctx ends
// first.
func (n *Node) stopChild(ctx context.Context) error {
	cmd, exited := n.takeChild()
	return termChild(ctx, cmd, exited, "node "+n.Name+" process")
}

// copyLog copies a child's log lines into log.
func copyLog(r io.Reader, log *slog.Logger) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		log.Info(sc.Text())
	}
}
