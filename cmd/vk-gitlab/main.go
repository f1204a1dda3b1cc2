// Command vk-gitlab is the relay: it holds the GitLab runner tokens,
// reserves room on the hub before asking GitLab for a job, submits jobs and
// patches their traces.
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
		Use:           "vk-gitlab",
		Short:         "vk's GitLab relay: runner tokens, reservations, job submission, traces",
		Version:       version.String("vk-gitlab"),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("{{.Version}}\n")
	for _, c := range [][2]string{
		{"run", "run the relay daemon (--config vk-gitlab.toml)"},
		{"join", "enrol with a hub: join <hub-url> --token - [--ca FILE]"},
		{"leave", "forget the hub enrolment"},
	} {
		use := c[0]
		root.AddCommand(&cobra.Command{
			Use:   use,
			Short: c[1] + " [not built yet]",
			RunE: func(*cobra.Command, []string) error {
				return errors.New(use + ": not built yet in this version; see the README for what works today")
			},
		})
	}
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "vk-gitlab:", err)
		os.Exit(1)
	}
}
