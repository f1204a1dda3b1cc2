package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/vk-ci/vk/internal/testfleet"
)

// Options configure [Run]. The zero value is the documented demo.
type Options struct {
	// Dir is where the demo writes the fleet's state (fleet/), the
	// component log (fleet.log) and the traces (traces/); it is created
	// when missing, and everything in it is kept. "" means a new
	// temporary directory, whose fleet state is removed at the end.
	Dir string
	// Keep leaves the fleet running after the pipelines end, until ctx
	// ends (Ctrl-C), so it can be explored.
	Keep bool
	// HubAddr is the hub's listen address (e.g. 127.0.0.1:8443, to point
	// vk-hub's CLI or a browser at it); "" means a free loopback port.
	HubAddr string
	// Interval is how often progress is refreshed; 0 means 250 ms.
	Interval time.Duration
	// Log receives the components' logs; nil means <Dir>/fleet.log.
	Log *slog.Logger
	// Timeout bounds the pipelines; 0 means 3 minutes.
	Timeout time.Duration
	// Containers (--containers) runs the nodes with executor "auto",
	// builds the demo image (busybox + bash) at start, pushes it to the
	// fleet's registry and adds [ImageJob], which runs in that image with
	// a service. Run fails at once, before starting anything, when the
	// host cannot run containers ([ContainersAvailable]).
	Containers bool
	// MicroVM (--microvm) runs the nodes with executor "microvm": every
	// job in its own QEMU microVM booted from the demo image (built and
	// pushed as for --containers). Run fails at once when the host cannot
	// ([MicroVMAvailable]: among others, a KVM that boots a guest).
	MicroVM bool
	// HA (--ha) runs two hub instances on a private PostgreSQL under the
	// leader lease, the leader a child process SIGKILLed in the middle of
	// the pipeline; the standby takes over and every job still ends as
	// expected. Run fails at once without PostgreSQL ([ErrNoPostgres]).
	HA bool

	// microvmCheck replaces [MicroVMAvailable] (tests); nil means it.
	microvmCheck func() (string, error)
	// containersCheck replaces [ContainersAvailable] (tests); nil means
	// it.
	containersCheck func() error
}

// ErrJobs is returned when a sample job did not end in its expected state.
var ErrJobs = errors.New("demo: jobs did not end as expected")

// Run is `vk demo`: it starts a hub, two nodes, and per tenant a fake
// GitLab and a relay, in-process over TLS on loopback (internal/testfleet),
// loads the sample (two projects, 20 jobs), shows live progress, then a
// summary and where the traces are. It returns nil when every job ended
// as the sample expects (one failing on purpose).
//
// With [Options.Containers] it first checks the host ([ErrNoContainers]),
// then also builds and pushes the demo image and runs [ImageJob] in it.
func Run(ctx context.Context, o Options, stdout io.Writer) (err error) {
	r := &demoRun{o: o.withDefaults(), out: stdout, tty: isTerminal(stdout), start: time.Now()}
	if err := r.checkHost(ctx); err != nil {
		return err
	}
	closeLog, err := r.openDir()
	if err != nil {
		return err
	}
	defer closeLog()
	if r.o.HA {
		if err := r.startHA(); err != nil {
			return err
		}
		defer r.ha.stop() // after the fleet's close
	}
	samples := Sample()
	fo := r.fleetOptions(samples)
	if r.ha != nil {
		r.ha.fleet(&fo)
	}
	f, err := testfleet.Start(ctx, fo)
	if err != nil {
		return fmt.Errorf("demo: starting the fleet: %w (logs in %s)", err, filepath.Join(r.dir, "fleet.log"))
	}
	defer func() { err = r.closeFleet(f, fo.Dir, err) }()
	r.printFleet(f)
	if r.ha != nil {
		r.ha.print(r, f)
		r.onSnap = func(s Snapshot) { r.ha.onSnap(ctx, r, f, s) }
	}
	loaded, err := r.loadSamples(ctx, f, samples)
	if err != nil {
		return err
	}
	final, err := r.watch(ctx, newCollector(f, loaded, r.start))
	if err != nil {
		return err
	}
	if err := r.report(ctx, f, loaded, final); err != nil || r.ha == nil {
		return err
	}
	return r.ha.summary(r, loaded)
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// stripTime drops a status line's elapsed-time prefix.
func stripTime(s string) string {
	if i := strings.Index(s, "]"); i >= 0 {
		return s[i+1:]
	}
	return s
}

// pickTraces chooses the traces printed in full: the failing job, the
// shortest successful deploy job and, with --containers, [ImageJob].
func pickTraces(s Snapshot) []JobRow {
	var out []JobRow
	var short *JobRow
	for i, j := range s.Jobs {
		if j.TracePath == "" {
			continue
		}
		if j.Name == FailingJob || j.Name == ImageJob {
			out = append(out, j)
		}
		if j.Stage == "deploy" && j.State == "success" && (short == nil || j.RunTime() < short.RunTime()) {
			short = &s.Jobs[i]
		}
	}
	if short != nil {
		out = append(out, *short)
	}
	return out
}

// Command returns `vk demo`.
func Command() *cobra.Command {
	var o Options
	c := &cobra.Command{
		Use:   "demo",
		Short: "run a demo fleet (hub, nodes, relays) against a built-in GitLab",
		Long: `demo starts a hub, two nodes, and for each of two tenants a built-in fake
GitLab and a relay, all in this process over TLS on loopback, in a temporary
directory. It loads a sample project with a three-stage pipeline (20 jobs,
artifacts, a cache, one job failing on purpose, one waiting for room), shows
live progress, then a summary and where each job's trace was written.

--containers also runs a job in a container: the nodes use executor "auto",
the demo builds a small image (busybox + bash) and pushes it to the fleet's
docker-registry, and the job runs in it with an httpd service it reaches by
its alias. It needs root, cgroup v1, runc, busybox-static and
docker-registry, and says at once what is missing.

--ha runs two hub instances on a private PostgreSQL under the leader lease
(docs/ha.md): the leader is a child process, SIGKILLed once a third of the
jobs have ended; the standby, which held every node's session all along,
takes over and the demo prints how long that took. It needs PostgreSQL's
server binaries (apt-get install -y postgresql).

--microvm runs every job in its own QEMU microVM (executor "microvm"),
booted from that image. It needs a KVM that boots a stock guest (checked by
booting one), QEMU, a guest kernel, vk-agent beside vk, busybox-static and
docker-registry, and says plainly when this host lacks one.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			// Ctrl-C or SIGTERM ends --keep, or aborts the run, and the
			// fleet is still shut down and its state removed.
			ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
			defer stop()
			return Run(ctx, o, cmd.OutOrStdout())
		},
	}
	c.Flags().BoolVar(&o.Keep, "keep", false, "keep the fleet running after the pipelines end (Ctrl-C stops it)")
	c.Flags().StringVar(&o.HubAddr, "hub-addr", "", "the hub's listen address, e.g. 127.0.0.1:8443 (default: a free loopback port)")
	c.Flags().BoolVar(&o.Containers, "containers", false, "also run a job in a container image with a service (needs root, cgroup v1, runc, busybox-static, docker-registry)")
	c.Flags().BoolVar(&o.HA, "ha", false, "two hubs on a private PostgreSQL, the leader (a child process) SIGKILLed mid-pipeline (needs postgresql)")
	c.Flags().BoolVar(&o.MicroVM, "microvm", false, "run every job in its own QEMU microVM under KVM (needs a KVM that boots a guest, qemu-system-x86, linux-image-amd64, vk-agent)")
	c.Flags().StringVar(&o.Dir, "dir", "", "directory for state, logs and traces, created if missing and kept (default: a new temporary directory, its fleet state removed at the end)")
	return c
}
