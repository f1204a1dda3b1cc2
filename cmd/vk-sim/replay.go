package main

import (
	"bufio"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/hub/wtrace"
	"github.com/vk-ci/vk/sim"
	"github.com/vk-ci/vk/sim/replay"
)

// replayCommand is `vk-sim replay TRACE [--policy candidate.toml]`: a hub
// workload trace (vk-hub trace export) replayed with the real core under
// the policy in force and the candidate (docs/replay.md).
func replayCommand() *cobra.Command {
	var (
		seed   uint64
		html   string
		policy string
	)
	c := &cobra.Command{
		Use:   "replay TRACE [--policy candidate.toml]",
		Short: "replay a hub workload trace under the policy in force and a candidate policy file",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			h, recs, err := wtrace.ReadAll(bufio.NewReader(f))
			f.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			w, err := replay.FromTrace(h, recs)
			if err != nil {
				return err
			}
			opt := replay.Options{Name: "replay of " + args[0], Seed: seed}
			if policy != "" {
				p, err := admin.LoadPolicy(policy)
				if err != nil {
					return err
				}
				var warns []string
				opt.Candidate, warns = replay.Candidate(w.Policy, p)
				for _, s := range warns {
					fmt.Fprintln(cmd.ErrOrStderr(), "vk-sim: warning:", s)
				}
			}
			rep, err := replay.Run(cmd.Context(), w, opt)
			if err != nil {
				return err
			}
			if err := rep.WriteText(cmd.OutOrStdout()); err != nil {
				return err
			}
			if html == "" {
				return nil
			}
			return sim.SaveHTML(html, rep.WriteHTML)
		},
	}
	c.Flags().Uint64Var(&seed, "seed", 1, "PRNG seed of the replay")
	c.Flags().StringVar(&html, "html", "", "also write a self-contained HTML report to FILE")
	c.Flags().StringVar(&policy, "policy", "", "a capacity policy file (version = 1) to compare with the policy in force")
	return c
}

// recordCommand is `vk-sim record SCENARIO > run.vktrace`: the scenario's
// vk run written as the hub would have recorded it, to calibrate replays
// against (docs/sim.md).
func recordCommand() *cobra.Command {
	var seed uint64
	c := &cobra.Command{
		Use:   "record SCENARIO",
		Short: "run a scenario's vk policy and write the workload trace a hub would have recorded (stdout)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := sim.LoadScenario(args[0])
			if err != nil {
				return err
			}
			w := bufio.NewWriter(cmd.OutOrStdout())
			start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			if _, err := replay.WriteSimTrace(cmd.Context(), w, s, seed, start); err != nil {
				return err
			}
			return w.Flush()
		},
	}
	c.Flags().Uint64Var(&seed, "seed", 0, "PRNG seed (0: the scenario's seed)")
	return c
}
