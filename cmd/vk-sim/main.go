// Command vk-sim runs the hub's scheduling core against a simulated fleet in
// virtual time and compares it with the policies CI fleets use today.
//
//	vk-sim run SCENARIO [--seed N] [--html FILE]
//	vk-sim compare SCENARIO [--policies vk,pull-fifo,…] [--seed N] [--html FILE]
//	vk-sim goals [--dir sim/scenarios] [--seeds 1,2,3,4,5] [--policies …] [--check-invariants]
//	vk-sim record SCENARIO > run.vktrace
//	vk-sim replay TRACE [--policy candidate.toml] [--seed N] [--html FILE]
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/vk-ci/vk/internal/version"
	"github.com/vk-ci/vk/sim"
)

func main() {
	root := &cobra.Command{
		Use:           "vk-sim",
		Short:         "deterministic fleet simulator driving vk's scheduling core",
		Version:       version.String("vk-sim"),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.AddCommand(command("run", "run a scenario with its own policy list (default: all policies)", false))
	root.AddCommand(command("compare", "compare policies on one scenario (default: every known policy)", true))
	root.AddCommand(goalsCommand())
	root.AddCommand(replayCommand(), recordCommand())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := root.ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "vk-sim:", err)
		os.Exit(1)
	}
}

// command builds run or compare. With allPolicies (compare), no
// --policies means every known policy, whatever the scenario lists.
func command(use, short string, allPolicies bool) *cobra.Command {
	var (
		seed     uint64
		html     string
		policies string
	)
	c := &cobra.Command{
		Use:   use + " SCENARIO",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := sim.LoadScenario(args[0])
			if err != nil {
				return err
			}
			opt := sim.Options{Scenario: s, Seed: seed, Progress: os.Stderr}
			if policies != "" {
				opt.Policies = strings.Split(policies, ",")
			} else if allPolicies {
				opt.Policies = sim.PolicyNames
			}
			rep, err := sim.Run(cmd.Context(), opt)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if err := rep.WriteText(out); err != nil {
				return err
			}
			fmt.Fprintln(out)
			if err := rep.WriteWall(out); err != nil {
				return err
			}
			if html != "" {
				return sim.SaveHTML(html, rep.WriteHTML)
			}
			return nil
		},
	}
	c.Flags().Uint64Var(&seed, "seed", 0, "PRNG seed (0: the scenario's seed)")
	c.Flags().StringVar(&html, "html", "", "also write a self-contained HTML report to FILE")
	c.Flags().StringVar(&policies, "policies", "", "comma-separated policies: "+strings.Join(sim.PolicyNames, ","))
	return c
}

// goalsCommand runs the goal scenarios on several seeds and prints the goal
// table (Markdown) of the arbiter's goals (issue 15).
func goalsCommand() *cobra.Command {
	var (
		dir      string
		seeds    string
		policies string
		check    bool
	)
	c := &cobra.Command{
		Use:   "goals",
		Short: "run the goal scenarios (" + strings.Join(sim.GoalScenarios, ", ") + ") on several seeds and print the goal table",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opt := sim.GoalOptions{Dir: dir, CheckInvariants: check, Progress: cmd.ErrOrStderr()}
			for _, f := range strings.Split(seeds, ",") {
				n, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
				if err != nil || n == 0 {
					return fmt.Errorf("--seeds: %q is not a positive integer", f)
				}
				opt.Seeds = append(opt.Seeds, n)
			}
			if policies != "" {
				opt.Policies = strings.Split(policies, ",")
			}
			g, err := sim.RunGoals(cmd.Context(), opt)
			if err != nil {
				return err
			}
			return g.WriteMarkdown(cmd.OutOrStdout())
		},
	}
	c.Flags().StringVar(&dir, "dir", "sim/scenarios", "directory of the goal scenarios")
	c.Flags().StringVar(&seeds, "seeds", "1,2,3,4,5", "comma-separated seeds")
	c.Flags().StringVar(&policies, "policies", "", "comma-separated policies (default: all): "+strings.Join(sim.PolicyNames, ","))
	c.Flags().BoolVar(&check, "check-invariants", false, "check sched's invariants after every step of vk (slow)")
	return c
}
