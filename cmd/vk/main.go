// Command vk is the node agent (`vk node`) and the demo (`vk demo`).
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
	node := &cobra.Command{Use: "node", Short: "the node agent: admission ledger, journal, job execution"}
	for _, c := range [][2]string{
		{"run", "run the node agent (--config node.toml)"},
		{"join", "enrol with a hub: join <hub-url> --token -"},
	} {
		use := c[0]
		node.AddCommand(&cobra.Command{
			Use:   use,
			Short: c[1] + " [not built yet]",
			RunE: func(*cobra.Command, []string) error {
				return errors.New("node " + use + ": not built yet in this version; see the README for what works today")
			},
		})
	}
	root.AddCommand(node)
	root.AddCommand(&cobra.Command{
		Use:   "demo",
		Short: "run a demo fleet (hub, node, relay) against a built-in GitLab [not built yet]",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("demo: not built yet in this version; see the README for what works today")
		},
	})
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "vk:", err)
		os.Exit(1)
	}
}
