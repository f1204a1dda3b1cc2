// Command vk-hub is the fleet hub: the fleet picture, the arbitration queue,
// placement, job records and output, and enrolment of relays and nodes.
//
// `vk-hub serve --config hub.toml` runs it until SIGTERM or SIGINT, then
// shuts down gracefully (docs/hub.md).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/vk-ci/vk/hub"
	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/internal/cmdlog"
	"github.com/vk-ci/vk/internal/version"
)

func main() {
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "vk-hub:", err)
		os.Exit(1)
	}
}

// newRoot is vk-hub's command tree.
func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "vk-hub",
		Short:         "vk's fleet hub: arbitration, placement, job records and output",
		Version:       version.String("vk-hub"),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("{{.Version}}\n")
	stateDir := root.PersistentFlags().String("state-dir", hub.DefaultStateDir,
		"state directory (serve: overrides the file's state_dir; other commands: where the admin socket is)")
	root.AddCommand(serveCmd(stateDir))
	// Operator commands talk to the running hub over its admin socket.
	root.AddCommand(admin.Commands(func() string { return admin.SocketPath(*stateDir) })...)
	return root
}

func serveCmd(stateDir *string) *cobra.Command {
	var (
		path, addr, logFormat, logLevel string
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "serve the client API and sessions (--config hub.toml)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := hub.DefaultConfig()
			if path != "" {
				var err error
				if cfg, err = hub.LoadConfig(path); err != nil {
					return err
				}
			}
			// defaults < file < flags (STYLE C13)
			if cmd.Flags().Changed("addr") {
				cfg.Addr = addr
			}
			if cmd.Flags().Changed("state-dir") {
				cfg.StateDir = *stateDir
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			log, err := cmdlog.New(os.Stderr, logFormat, logLevel)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			return hub.Run(ctx, cfg, log)
		},
	}
	f := cmd.Flags()
	f.StringVar(&path, "config", "", "the hub's configuration `FILE` (TOML, version = 1); without it the defaults apply")
	f.StringVar(&addr, "addr", hub.DefaultAddr, "listener address, overrides the file's addr")
	f.StringVar(&logFormat, "log-format", "text", "log format: text or json")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	return cmd
}
