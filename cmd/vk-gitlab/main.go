// Command vk-gitlab is the relay: it holds the GitLab runner tokens,
// reserves room on the hub before asking GitLab for a job, submits jobs and
// patches their traces. See docs/relay.md.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/vk-ci/vk/hubclient"
	"github.com/vk-ci/vk/internal/cmdlog"
	"github.com/vk-ci/vk/internal/conffile"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/internal/version"
	"github.com/vk-ci/vk/relay"
	"github.com/vk-ci/vk/relay/state"
)

func main() {
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "vk-gitlab:", err)
		os.Exit(1)
	}
}

// newRoot is vk-gitlab's command tree.
func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "vk-gitlab",
		Short:         "vk's GitLab relay: runner tokens, reservations, job submission, traces",
		Version:       version.String("vk-gitlab"),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.AddCommand(runCmd(), joinCmd(), leaveCmd())
	return root
}

func runCmd() *cobra.Command {
	var cfgPath, level, format string
	c := &cobra.Command{
		Use:   "run",
		Short: "run the relay daemon",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := cmdlog.New(os.Stderr, format, level)
			if err != nil {
				return err
			}
			cfg, tokens, err := relay.LoadConfig(cfgPath)
			if err != nil {
				return err
			}
			// SIGTERM: stop taking jobs, give running ones shutdown_timeout
			// (RELAY-17, RELAY-18).
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			for {
				srv, err := relay.New(cfg, tokens, log, relay.Options{})
				if err != nil {
					return err
				}
				err = srv.Run(ctx)
				// An update from the hub (OPS-04) installed a new binary:
				// exec it; Exec returns only when that failed, with the
				// old binary back in place, and this one carries on.
				var restart *relay.Restart
				if !errors.As(err, &restart) {
					return err
				}
				log.Error("update: the new release did not start; carrying on with this one", logkey.Err, restart.Exec())
			}
		},
	}
	c.Flags().StringVar(&cfgPath, "config", defaultConfig, "configuration file")
	c.Flags().StringVar(&level, "log-level", "info", "log level: debug, info, warn or error")
	c.Flags().StringVar(&format, "log-format", "text", "log format: text or json")
	return c
}

// defaultConfig is where the relay's config lives, beside the hub's and
// the node's (/etc/vk/hub.toml, /etc/vk/node.toml).
const defaultConfig = "/etc/vk/vk-gitlab.toml"

// stateDir is --state-dir, else the config's state_dir, else the default.
func stateDir(cfgPath, flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	cfg := relay.DefaultConfig()
	if err := conffile.Load(cfgPath, &cfg, 1); err != nil && !errors.Is(err, conffile.ErrNoConfig) {
		return "", err
	}
	return cfg.StateDir, nil
}

func joinCmd() *cobra.Command {
	var cfgPath, dirFlag, tokenArg, caFile string
	var replace bool
	c := &cobra.Command{
		Use:   "join <hub-url>",
		Short: "enrol with a hub: join <hub-url> --token - [--ca FILE]",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := stateDir(cfgPath, dirFlag)
			if err != nil {
				return err
			}
			if err := state.CheckDir(dir); err != nil {
				return err
			}
			token, err := readToken(tokenArg, cmd.InOrStdin())
			if err != nil {
				return err
			}
			var ca []byte
			if caFile != "" {
				if ca, err = os.ReadFile(caFile); err != nil {
					return fmt.Errorf("--ca: %w", err)
				}
			}
			host, _ := os.Hostname()
			ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Minute)
			defer cancel()
			// Refused while a state file records a job (AUTH-10).
			e, res, err := hubclient.JoinAndSave(ctx, dir, hubclient.JoinOptions{HubURL: args[0], Token: token, CAPEM: ca,
				Name: host, Kind: hubclient.KindGitLab, Replace: replace, Busy: func() error { return state.Busy(dir) }})
			if err != nil {
				return err
			}
			if res.TOFU {
				fmt.Fprintf(cmd.OutOrStdout(), "trusted the hub's CA on first use; compare its fingerprint with the one vk-hub printed:\n  %s\n", res.CAFingerprint)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "enrolled as relay %s with %s (state in %s)\n", e.ID, e.HubURL, hubclient.Dir(dir))
			return nil
		},
	}
	c.Flags().StringVar(&cfgPath, "config", defaultConfig, "configuration file (for state_dir; a missing one is fine)")
	c.Flags().StringVar(&dirFlag, "state-dir", "", "state directory (overrides the config's state_dir)")
	c.Flags().StringVar(&tokenArg, "token", "", `enrolment token, or "-" to read it from stdin (required)`)
	c.Flags().StringVar(&caFile, "ca", "", "hub CA certificate (PEM); without it the CA is trusted on first use")
	c.Flags().BoolVar(&replace, "replace", false, "replace an existing enrolment (stop the daemon with SIGTERM and let its jobs finish first)")
	return c
}

func readToken(arg string, stdin io.Reader) (string, error) {
	switch arg {
	case "":
		return "", errors.New("--token is required (use --token - to read it from stdin)")
	case "-":
		line, err := bufio.NewReader(stdin).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return "", fmt.Errorf("reading the token: %w", err)
		}
		if t := strings.TrimSpace(line); t != "" {
			return t, nil
		}
		return "", errors.New("no token on stdin")
	}
	return arg, nil
}

func leaveCmd() *cobra.Command {
	var cfgPath, dirFlag string
	c := &cobra.Command{
		Use:   "leave",
		Short: "forget the hub enrolment (refused while a job is recorded)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := stateDir(cfgPath, dirFlag)
			if err != nil {
				return err
			}
			if err := hubclient.Leave(dir, func() error { return state.Busy(dir) }); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "left the hub; %s removed\n", hubclient.Dir(dir))
			return nil
		},
	}
	c.Flags().StringVar(&cfgPath, "config", defaultConfig, "configuration file (for state_dir; a missing one is fine)")
	c.Flags().StringVar(&dirFlag, "state-dir", "", "state directory (overrides the config's state_dir)")
	return c
}
