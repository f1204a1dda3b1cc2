// Command vk-bench is vk's load generator for the hub (internal/loadgen):
// it drives full job lifecycles through a real hub over the real
// protocol and reports lifecycles/s, each step's latency, the hub's CPU
// and memory, and the machine's floor measured in the same run.
//
// Without --hub it starts the hub itself: this binary again, as the
// hidden `vk-bench hub serve`, which is `vk-hub serve` in its own process
// (docs/hub.md, "Load test").
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/vk-ci/vk/hub"
	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/internal/loadgen"
	"github.com/vk-ci/vk/internal/version"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == hubChild {
		os.Exit(loadgen.ServeHub(os.Args[2:], os.Stderr))
	}
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "vk-bench:", err)
		os.Exit(1)
	}
}

// hubChild is the first argument with which vk-bench runs as the hub it
// started.
const hubChild = "hub"

// newRoot is vk-bench's command: the bench itself.
func newRoot() *cobra.Command {
	var stateDir string
	root := benchCmd(func() string { return admin.SocketPath(stateDir) })
	root.Use = "vk-bench"
	root.Version = version.String("vk-bench")
	root.SilenceUsage, root.SilenceErrors = true, true
	root.SetVersionTemplate("{{.Version}}\n")
	root.Flags().StringVar(&stateDir, "state-dir", hub.DefaultStateDir, "with --hub: the running hub's state directory (its admin socket)")
	return root
}
