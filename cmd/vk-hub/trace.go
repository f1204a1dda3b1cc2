package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/vk-ci/vk/hub"
	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/hub/wtrace"
	"github.com/vk-ci/vk/sim"
	"github.com/vk-ci/vk/sim/replay"
)

// traceDir is where the hub's trace files are: the config's trace.dir,
// else <state_dir>/trace, --state-dir overriding the file's state_dir.
func traceDir(cmd *cobra.Command, cfgFlag, dirFlag string) (string, error) {
	cfg := hub.DefaultConfig()
	if path := configFile(cfgFlag); path != "" {
		var err error
		if cfg, err = hub.LoadConfig(path); err != nil {
			return "", err
		}
	}
	if cmd.Flags().Changed("state-dir") {
		cfg.StateDir = dirFlag
	}
	return cfg.Trace.WithDefaults(cfg.StateDir).Dir, nil
}

// traceCmd is `vk-hub trace export`: the hub's workload trace files as one
// trace on stdout, for vk-sim replay (docs/replay.md). It reads the files
// directly, so it runs on the hub's host as a user who may read them.
func traceCmd(stateDir, cfgPath *string) *cobra.Command {
	root := &cobra.Command{Use: "trace", Short: "the hub's workload trace (docs/replay.md)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() }}
	var since time.Duration
	exp := &cobra.Command{
		Use:   "export [--since 24h]",
		Short: "write the trace of the last --since to stdout (vk-sim replay reads it)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if since <= 0 {
				return fmt.Errorf("--since must be positive")
			}
			dir, err := traceDir(cmd, *cfgPath, *stateDir)
			if err != nil {
				return err
			}
			w := bufio.NewWriter(cmd.OutOrStdout())
			if err := wtrace.Export(dir, time.Now().Add(-since), w); err != nil {
				return err
			}
			return w.Flush()
		},
	}
	exp.Flags().DurationVar(&since, "since", 24*time.Hour, "how far back")
	root.AddCommand(exp)
	return root
}

// addDryRun gives `capacity-policy set` a --dry-run: replay the hub's
// last --window of trace under the policy in force and the file's, print
// the report with its deltas, and change nothing (docs/replay.md). set
// without --dry-run is unchanged.
func addDryRun(root *cobra.Command, stateDir, cfgPath *string) {
	var set *cobra.Command
	for _, c := range root.Commands() {
		if c.Name() != "capacity-policy" {
			continue
		}
		for _, sub := range c.Commands() {
			if sub.Name() == "set" {
				set = sub
			}
		}
	}
	if set == nil {
		return
	}
	var (
		dry    bool
		window time.Duration
		seed   uint64
		html   string
	)
	apply := set.RunE
	set.RunE = func(cmd *cobra.Command, args []string) error {
		if !dry {
			return apply(cmd, args)
		}
		dir, err := traceDir(cmd, *cfgPath, *stateDir)
		if err != nil {
			return err
		}
		return dryRun(cmd, dir, args[0], time.Now().Add(-window), seed, html)
	}
	f := set.Flags()
	f.BoolVar(&dry, "dry-run", false, "replay the hub's recent trace under the policy in force and FILE, print the deltas, change nothing")
	f.DurationVar(&window, "window", 24*time.Hour, "with --dry-run: how much of the trace to replay")
	f.Uint64Var(&seed, "seed", 1, "with --dry-run: the replay's PRNG seed")
	f.StringVar(&html, "html", "", "with --dry-run: also write the HTML report to FILE")
}

// dryRun replays the trace of dir since since under the policy in force
// and the policy file at path (- for stdin).
func dryRun(cmd *cobra.Command, dir, path string, since time.Time, seed uint64, htmlOut string) error {
	var (
		data []byte
		err  error
	)
	if path == "-" {
		data, err = io.ReadAll(cmd.InOrStdin())
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return err
	}
	p, err := admin.DecodePolicy(path, data)
	if err != nil {
		return err
	}
	rep, warns, err := replay.DryRun(cmd.Context(), dir, p, since, seed, "dry run of "+path)
	for _, s := range warns {
		fmt.Fprintln(cmd.ErrOrStderr(), "warning:", s)
	}
	if err != nil {
		return err
	}
	if err := rep.WriteText(cmd.OutOrStdout()); err != nil {
		return err
	}
	fmt.Fprintln(cmd.ErrOrStderr(), "dry run: nothing changed")
	if htmlOut == "" {
		return nil
	}
	return sim.SaveHTML(htmlOut, rep.WriteHTML)
}
