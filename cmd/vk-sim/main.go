// Command vk-sim runs the hub's scheduling core against a simulated fleet in
// virtual time and compares it with the policies CI fleets use today.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/vk-ci/vk/internal/version"
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
	for _, use := range []string{"run", "compare"} {
		root.AddCommand(&cobra.Command{
			Use:   use + " SCENARIO",
			Short: use + " a scenario [not built yet]",
			RunE: func(*cobra.Command, []string) error {
				return errors.New(use + ": not built yet in this version; see the README for what works today")
			},
		})
	}
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "vk-sim:", err)
		os.Exit(1)
	}
}
