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
	pf := root.PersistentFlags()
	stateDir := pf.String("state-dir", hub.DefaultStateDir,
		"state directory (serve: overrides the file's state_dir; other commands: where the admin socket is)")
	cfgPath := pf.String("config", "", "the hub's configuration `FILE` (TOML, version = 1); default $"+configEnv+
		"; without either the defaults apply")
	root.AddCommand(serveCmd(stateDir, cfgPath))
	root.AddCommand(traceCmd(stateDir, cfgPath))
	// Operator commands talk to the running hub over its admin socket in
	// its state directory: --state-dir, else the config's state_dir.
	var socket string
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		for c := cmd; c != nil; c = c.Parent() {
			switch c.Name() {
			case "serve", "help", "completion", "trace":
				return nil // no admin socket needed
			}
		}
		dir, err := adminStateDir(cmd, *cfgPath, *stateDir)
		socket = admin.SocketPath(dir)
		return err
	}
	root.AddCommand(admin.Commands(func() string { return socket })...)
	addDryRun(root, stateDir, cfgPath)
	return root
}

// configEnv names the hub's config file when --config is not given.
const configEnv = "VK_HUB_CONFIG"

// configFile is --config, else $VK_HUB_CONFIG, else "" (the defaults).
func configFile(flag string) string {
	if flag != "" {
		return flag
	}
	return os.Getenv(configEnv)
}

// adminStateDir is where an operator command finds the admin socket:
// --state-dir when given, else the config file's state_dir, else the
// default.
func adminStateDir(cmd *cobra.Command, cfgFlag, dirFlag string) (string, error) {
	if cmd.Flags().Changed("state-dir") {
		return dirFlag, nil
	}
	path := configFile(cfgFlag)
	if path == "" {
		return hub.DefaultStateDir, nil
	}
	cfg, err := hub.LoadConfig(path)
	if err != nil {
		return "", err
	}
	return cfg.StateDir, nil
}

func serveCmd(stateDir, cfgPath *string) *cobra.Command {
	var addr, logFormat, logLevel string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "serve the client API and sessions (--config hub.toml)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := hub.DefaultConfig()
			if path := configFile(*cfgPath); path != "" {
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
	f.StringVar(&addr, "addr", hub.DefaultAddr, "listener address, overrides the file's addr")
	f.StringVar(&logFormat, "log-format", "text", "log format: text or json")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	return cmd
}
