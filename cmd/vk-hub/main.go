// Command vk-hub is the fleet hub: the fleet picture, the arbitration queue,
// placement, job records and output, and enrolment of relays and nodes.
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
		Use:           "vk-hub",
		Short:         "vk's fleet hub: arbitration, placement, job records and output",
		Version:       version.String("vk-hub"),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.AddCommand(notBuilt("serve", "serve the client API and sessions (--config hub.toml)"))
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "vk-hub:", err)
		os.Exit(1)
	}
}

func notBuilt(use, short string) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short + " [not built yet]",
		RunE: func(*cobra.Command, []string) error {
			return errors.New(use + ": not built yet in this version; see the README for what works today")
		},
	}
}
