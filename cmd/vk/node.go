package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/vk-ci/vk/internal/cmdlog"
	"github.com/vk-ci/vk/internal/conffile"
	"github.com/vk-ci/vk/node"
	"github.com/vk-ci/vk/node/ledger"
)

// nodeCommand is `vk node run` and `vk node join`.
func nodeCommand() *cobra.Command {
	n := &cobra.Command{Use: "node", Short: "the node agent: admission ledger, journal, job execution", Args: cobra.NoArgs,
		// An unknown subcommand is an error, not this help with status 0.
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() }}
	n.AddCommand(nodeRunCommand(), nodeJoinCommand())
	for _, c := range []struct{ name, short string }{
		{node.CmdStatus, "print the running agent's state (control socket)"},
		{node.CmdDrain, "refuse new offers, let held reservations lapse; running jobs finish"},
		{node.CmdReady, "take offers again"},
		{node.CmdQuarantine, "refuse new offers and release every held reservation now"},
	} {
		n.AddCommand(nodeControlCommand(c.name, c.short))
	}
	return n
}

// nodeControlCommand sends one command to the running agent over
// <state_dir>/node.sock and prints its state as JSON.
func nodeControlCommand(name, short string) *cobra.Command {
	var configPath, stateDir string
	cmd := &cobra.Command{
		Use:   name,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir := stateDir
			if !cmd.Flags().Changed("state-dir") {
				cfg, err := node.LoadConfig(configPath)
				switch {
				case err == nil:
					dir = cfg.Node.StateDir
				case cmd.Flags().Changed("config"):
					return err
				}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 15*time.Second)
			defer cancel()
			st, err := node.Control(ctx, dir, name)
			if err != nil {
				return err
			}
			b, _ := json.Marshal(st)
			fmt.Fprintln(cmd.OutOrStdout(), string(b))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&configPath, "config", "/etc/vk/node.toml", "node config file (TOML), for its [node] state_dir")
	f.StringVar(&stateDir, "state-dir", node.DefaultStateDir, "the agent's state dir (holds node.sock)")
	return cmd
}

func nodeRunCommand() *cobra.Command {
	var configPath, stateDir, hub, logFormat, logLevel string
	cmd := &cobra.Command{
		Use:   "run",
		Short: "run the node agent (--config node.toml)",
		Long: `Run the node agent: hold a session with the hub, answer offers from the
admission ledger, run jobs and stream their output.

Signals: SIGTERM or SIGINT drain the node (no new offers), let running jobs
finish for up to [node] shutdown_timeout_secs, then interrupt the rest.
SIGUSR1 drains the node without stopping it; SIGUSR2 makes it ready again.
The same and quarantine over <state_dir>/node.sock: vk node drain|ready|quarantine|status.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := cmdlog.New(os.Stderr, logFormat, logLevel)
			if err != nil {
				return err
			}
			cfg, err := node.LoadConfig(configPath)
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("state-dir") {
				cfg.Node.StateDir = stateDir
			}
			if cmd.Flags().Changed("hub") {
				cfg.Node.Hub = hub
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			return runNode(cmd.Context(), cfg, log)
		},
	}
	f := cmd.Flags()
	f.StringVar(&configPath, "config", "/etc/vk/node.toml", "node config file (TOML)")
	f.StringVar(&stateDir, "state-dir", "", "override [node] state_dir")
	f.StringVar(&hub, "hub", "", "override [node] hub (https://host:port)")
	f.StringVar(&logFormat, "log-format", "text", "log format: text or json")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	return cmd
}

// runNode runs the agent until SIGTERM/SIGINT, then shuts it down within
// the configured timeout; SIGUSR1 drains, SIGUSR2 undrains.
func runNode(ctx context.Context, cfg node.Config, log *slog.Logger) error {
	if ctx == nil {
		ctx = context.Background()
	}
	a, err := node.Start(ctx, cfg, log, node.Options{})
	if err != nil {
		return err
	}
	stop := make(chan os.Signal, 2)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	state := make(chan os.Signal, 4)
	signal.Notify(state, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(stop)
	defer signal.Stop(state)
	for {
		select {
		case s := <-state:
			if s == syscall.SIGUSR1 {
				a.SetState(ledger.StateDraining)
			} else {
				a.SetState(ledger.StateReady)
			}
			continue
		case s := <-stop:
			log.Info("signal: shutting down", "signal", s.String(), "timeout_secs", cfg.Node.ShutdownTimeoutSecs)
		case <-a.Done():
			return errors.New("node agent stopped")
		}
		break
	}
	sctx, cancel := context.WithTimeout(context.Background(), time.Duration(cfg.Node.ShutdownTimeoutSecs)*time.Second)
	defer cancel()
	go func() {
		// A second SIGTERM/SIGINT interrupts running jobs at once.
		select {
		case <-stop:
			cancel()
		case <-sctx.Done():
		}
	}()
	return a.Shutdown(sctx)
}

// jobUserHint is join's last word: the process backend refuses to run
// job scripts as root (the node's user under systemd) unless told to.
const jobUserHint = `next: jobs of the process backend must not run as root. Create their user and name it in the node's config:
  useradd --system --user-group --no-create-home --shell /usr/sbin/nologin vk-job
  [executor] user = "<uid>:<gid>"   (id -u vk-job; id -g vk-job)
or set [executor] allow_root_jobs = true to accept root jobs (the node refuses to start otherwise).
`

func nodeJoinCommand() *cobra.Command {
	var token, caFile, stateDir, name, configPath string
	var replace bool
	cmd := &cobra.Command{
		Use:   "join <hub-url> --token -",
		Short: "enrol with a hub using a one-time token (read from stdin with --token -)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			tok, err := readToken(token, cmd.InOrStdin())
			if err != nil {
				return err
			}
			var caPEM []byte
			if caFile != "" {
				if caPEM, err = os.ReadFile(caFile); err != nil {
					return fmt.Errorf("--ca: %w", err)
				}
			}
			// The node's config says where its state goes and its name,
			// unless the flags do; a missing default config is no error.
			if !cmd.Flags().Changed("state-dir") || !cmd.Flags().Changed("name") {
				cfg, err := node.LoadConfig(configPath)
				switch {
				case err == nil:
					if !cmd.Flags().Changed("state-dir") {
						stateDir = cfg.Node.StateDir
					}
					if name == "" {
						name = cfg.Node.Name
					}
				case cmd.Flags().Changed("config") || !errors.Is(err, conffile.ErrNoConfig):
					return err
				}
			}
			if name == "" {
				name, _ = os.Hostname()
			}
			res, err := node.Join(cmd.Context(), stateDir, node.JoinOptions{HubURL: args[0], Token: tok, CAPEM: caPEM, Name: name, Replace: replace})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "joined %s as node %s; enrolment in %s/hub\n", args[0], res.ID, stateDir)
			if res.TOFU {
				fmt.Fprintf(out, "hub CA trusted on first use: fingerprint %s\ncompare it with the one vk-hub printed\n", res.CAFingerprint)
			}
			fmt.Fprint(out, jobUserHint)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&token, "token", "", "the one-time join token, or - to read it from stdin (keeps it out of the process list)")
	f.StringVar(&caFile, "ca", "", "the hub's CA certificate (PEM); without it the CA is trusted on first use")
	f.StringVar(&configPath, "config", "/etc/vk/node.toml", "node config file (TOML), for its [node] state_dir and name")
	f.StringVar(&stateDir, "state-dir", node.DefaultStateDir, "the node's state directory (default: the config's [node] state_dir)")
	f.StringVar(&name, "name", "", "the node's display name (default: the config's [node] name, else the host name)")
	f.BoolVar(&replace, "replace", false, "replace an existing enrolment")
	cmd.MarkFlagRequired("token")
	return cmd
}

// readToken returns flag, or the first line of in when flag is "-".
func readToken(flag string, in io.Reader) (string, error) {
	if flag != "-" {
		if flag == "" {
			return "", errors.New("--token is empty")
		}
		return flag, nil
	}
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("reading the token from stdin: %w", err)
	}
	tok := strings.TrimSpace(line)
	if tok == "" {
		return "", errors.New("no token on stdin")
	}
	return tok, nil
}
