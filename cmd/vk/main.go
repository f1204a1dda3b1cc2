// Command vk is the node agent (`vk node`) and the demo (`vk demo`).
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/vk-ci/vk/internal/demo"
	"github.com/vk-ci/vk/internal/version"
)

func main() {
	demo.RunChildIfAsked() // vk demo --ha's leading hub
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "vk:", err)
		os.Exit(1)
	}
}

// newRoot is vk's command tree.
func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "vk",
		Short:         "vk: the node agent and tools",
		Version:       version.String("vk"),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "print the version",
		Run:   func(c *cobra.Command, _ []string) { fmt.Fprintln(c.OutOrStdout(), version.String("vk")) },
	})
	root.AddCommand(nodeCommand())
	root.AddCommand(demo.Command())
	return root
}
