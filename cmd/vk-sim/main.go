// Command vk-sim runs the hub's scheduling core against a simulated fleet in
// virtual time and compares it with the policies CI fleets use today.
//
//	vk-sim run SCENARIO [--seed N] [--html FILE]
//	vk-sim compare SCENARIO --policies vk,pull-fifo,… [--seed N] [--html FILE]
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
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
	root.AddCommand(command("compare", "compare the given policies on one scenario", true))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := root.ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "vk-sim:", err)
		os.Exit(1)
	}
}

func command(use, short string, needPolicies bool) *cobra.Command {
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
			} else if needPolicies {
				return fmt.Errorf("compare needs --policies (known: %s)", strings.Join(sim.PolicyNames, ","))
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
				f, err := os.Create(html)
				if err != nil {
					return err
				}
				if err := rep.WriteHTML(f); err != nil {
					f.Close()
					return err
				}
				return f.Close()
			}
			return nil
		},
	}
	c.Flags().Uint64Var(&seed, "seed", 0, "PRNG seed (0: the scenario's seed)")
	c.Flags().StringVar(&html, "html", "", "also write a self-contained HTML report to FILE")
	c.Flags().StringVar(&policies, "policies", "", "comma-separated policies: "+strings.Join(sim.PolicyNames, ","))
	return c
}
