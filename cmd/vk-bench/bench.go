package main

import (
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"time"

	"github.com/spf13/cobra"
	"github.com/vk-ci/vk/internal/loadgen"
)

// benchCmd is vk-bench: the load generator (internal/loadgen) against a
// hub it starts as a child process of this binary, or against a running
// hub given by --hub, --ca and --state-dir (its admin socket).
func benchCmd(socket func() string) *cobra.Command {
	var o loadgen.Options
	var hubURL, caFile, keep, cpuProfile string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "vk-bench",
		Short: "drive full job lifecycles through a hub and report lifecycles/s, latencies and the machine's floor",
		Long: `bench enrols relays and lightweight nodes over the real protocol and runs
job lifecycles (reserve, ticket, claim, outcome, submit, follow, output,
settle) from concurrent request loops. Without --hub it starts this binary
as the hub ("vk-hub serve" in its own process) in a temporary state directory and reads the hub's CPU
and memory from /proc; with --hub it drives that hub, enrolling through
its admin socket in --state-dir (the enrolled principals stay; use a hub
you can throw away).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if hubURL != "" {
				if caFile == "" {
					return errors.New("bench: --hub needs --ca FILE (the hub's pki/ca.pem)")
				}
				ca, err := os.ReadFile(caFile)
				if err != nil {
					return fmt.Errorf("bench: --ca: %w", err)
				}
				o.Target = &loadgen.Target{URL: hubURL, CAPEM: ca, Socket: socket()}
			} else {
				exe, err := os.Executable()
				if err != nil {
					return err
				}
				o.HubCommand = []string{exe, hubChild}
				dir := keep
				if dir == "" {
					if dir, err = os.MkdirTemp("", "vk-hub-bench-"); err != nil {
						return err
					}
					defer os.RemoveAll(dir)
				} else if err := os.MkdirAll(dir, 0o700); err != nil {
					return err
				}
				o.Dir = dir
			}
			o.Progress = cmd.ErrOrStderr()
			if cpuProfile != "" {
				stop, err := profileCPU(cpuProfile)
				if err != nil {
					return err
				}
				defer stop()
			}
			rep, err := loadgen.Run(cmd.Context(), o)
			if err != nil {
				return err
			}
			if asJSON {
				return rep.WriteJSON(cmd.OutOrStdout())
			}
			return rep.WriteText(cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Relays, "relays", 4, "relays to enrol")
	f.IntVar(&o.Nodes, "nodes", 16, "lightweight nodes to enrol")
	f.IntVar(&o.Loops, "loops", 0, "concurrent request loops, one runner each (default 8 per relay)")
	f.DurationVar(&o.Warmup, "warmup", 5*time.Second, "lifecycles run before measuring")
	f.DurationVar(&o.Duration, "duration", 60*time.Second, "the measured window")
	f.DurationVar(&o.FloorDuration, "floor-duration", 3*time.Second, "how long each floor measure runs")
	f.IntVar(&o.OutputBytes, "output-bytes", 4<<10, "output each job writes")
	f.BoolVar(&o.ConnPerRequest, "conn-per-request", false, "relays open a new (resumed) TLS connection per request instead of keeping connections alive")
	f.StringVar(&hubURL, "hub", "", "drive this running hub (https://host:port) instead of starting one")
	f.StringVar(&caFile, "ca", "", "the running hub's CA certificate (with --hub)")
	f.StringVar(&keep, "keep", "", "start the hub with its state in this `DIR` and keep it (default: a temporary directory, removed)")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write the load generator's own CPU profile (not the hub's: that is the admin socket's /debug/pprof/profile) to `FILE`")
	return cmd
}

// profileCPU starts a CPU profile of this process into path and returns
// what stops it and closes the file.
func profileCPU(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("bench: --cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("bench: --cpuprofile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
