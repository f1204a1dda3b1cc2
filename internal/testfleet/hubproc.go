package testfleet

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/pelletier/go-toml/v2"
	"github.com/vk-ci/vk/hub"
)

// HubChildEnv names, for a re-executed binary, the hub.toml it is to run as the fleet's first hub (see
// [Options.HubProcess] and [RunHubChildIfAsked]).
const HubChildEnv = "VK_TESTFLEET_HUB_CHILD"

// RunHubChildIfAsked runs the fleet's first hub and exits, when this
// process was started for that by a fleet with [Options.HubProcess]
// (HubChildEnv is set); otherwise it returns at once. Call it first
// thing in main (or TestMain) of the binary HubProcess re-executes. The
// child prints "leading <addr>" on stdout once it leads, logs to stderr,
// shuts down gracefully on SIGTERM and exits; a SIGKILL is a machine
// lost.
func RunHubChildIfAsked() {
	path := os.Getenv(HubChildEnv)
	if path == "" {
		return
	}
	os.Exit(runHubChild(path))
}

func runHubChild(path string) int {
	cfg, err := hub.LoadConfig(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	srv, err := hub.Start(ctx, cfg, slog.New(slog.NewTextHandler(os.Stderr, nil)), hub.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	select {
	case <-srv.Leading():
		fmt.Printf("leading %s\n", srv.Addr())
	case <-ctx.Done():
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// startChild runs the hub as a child process (Options.HubProcess or
// Options.HubBinary) and waits until it leads, or, for a standby of a
// HubBinary fleet, until it serves.
func (h *Hub) startChild(ctx context.Context) error {
	if err := os.MkdirAll(h.cfg.StateDir, 0o700); err != nil {
		return err
	}
	bin := h.f.opts.HubBinary != ""
	if bin && strings.HasSuffix(h.cfg.Addr, ":0") {
		addr, err := freeAddr(h.cfg.Addr)
		if err != nil {
			return err
		}
		h.cfg.Addr = addr
	}
	b, err := toml.Marshal(h.cfg)
	if err != nil {
		return err
	}
	path := filepath.Join(h.cfg.StateDir, "hub.toml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return err
	}
	var cmd *exec.Cmd
	if bin {
		cmd = exec.Command(h.f.opts.HubBinary, "serve", "--config", path)
	} else {
		cmd = h.f.opts.HubProcess()
		if cmd.Env == nil {
			cmd.Env = os.Environ()
		}
		cmd.Env = append(cmd.Env, HubChildEnv+"="+path)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("testfleet: hub process: %w", err)
	}
	log := h.f.log.With("component", "hub", "instance", h.cfg.Store.Instance, "pid", cmd.Process.Pid)
	go h.readLog(stderr, log)
	exited := make(chan struct{})
	kill := func(e error) error {
		cmd.Process.Kill()
		cmd.Wait()
		return e
	}
	addr := h.cfg.Addr
	if bin {
		go io.Copy(io.Discard, stdout)
		go func() {
			cmd.Wait()
			close(exited)
		}()
		if err := h.waitServing(ctx, exited, !h.standby); err != nil {
			cmd.Process.Kill()
			<-exited
			return err
		}
	} else {
		lines := make(chan string, 1)
		go func() {
			line, _ := bufio.NewReader(stdout).ReadString('\n')
			lines <- line
		}()
		var line string
		select {
		case line = <-lines:
		case <-ctx.Done():
		}
		var ok bool
		if addr, ok = strings.CutPrefix(strings.TrimSpace(line), "leading "); !ok {
			return kill(fmt.Errorf("testfleet: hub process did not lead (said %q; its log is the fleet's)", line))
		}
		go func() {
			cmd.Wait()
			close(exited)
		}()
	}
	h.mu.Lock()
	h.proc, h.exited, h.up = cmd, exited, true
	h.cfg.Addr = addr
	for _, l := range h.links {
		l.SetTarget(addr)
	}
	h.mu.Unlock()
	return nil
}

// Process returns the hub's child process (Options.HubProcess), nil when
// the hub runs in this process or its process was killed.
func (h *Hub) Process() *os.Process {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.proc == nil {
		return nil
	}
	return h.proc.Process
}

// killChild SIGKILLs the hub's process after blocking every link to it.
func (h *Hub) killChild() error {
	h.mu.Lock()
	cmd, exited := h.proc, h.exited
	h.proc, h.up = nil, false
	for _, l := range h.links {
		l.Block()
	}
	h.mu.Unlock()
	return sigkillChild(cmd, exited)
}

// stopChild ends the hub's process gracefully (SIGTERM), killing it when
// ctx ends first.
func (h *Hub) stopChild(ctx context.Context) error {
	h.mu.Lock()
	cmd, exited := h.proc, h.exited
	h.proc, h.up = nil, false
	h.mu.Unlock()
	return termChild(ctx, cmd, exited, "hub process")
}
