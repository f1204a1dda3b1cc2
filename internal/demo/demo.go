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
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/vk-ci/vk/hub/ui"
	"github.com/vk-ci/vk/internal/cmdlog"
	"github.com/vk-ci/vk/internal/testfleet"
	"github.com/vk-ci/vk/node"
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
	start := time.Now()
	var agent string
	if o.MicroVM {
		if o.Containers {
			return errors.New("demo: --microvm and --containers exclude each other")
		}
		check := o.microvmCheck
		if check == nil {
			check = func() (string, error) { return MicroVMAvailable(ctx) }
		}
		if agent, err = check(); err != nil {
			return err
		}
	}
	if o.Containers {
		check := o.containersCheck
		if check == nil {
			check = ContainersAvailable
		}
		if err := check(); err != nil {
			return err
		}
	}
	if o.Interval == 0 {
		o.Interval = 250 * time.Millisecond
	}
	if o.Timeout == 0 {
		o.Timeout = 3 * time.Minute
	}
	dir := o.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "vk-demo-"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("demo: --dir: %w", err)
	}
	log := o.Log
	if log == nil {
		lf, err := os.Create(filepath.Join(dir, "fleet.log"))
		if err != nil {
			return err
		}
		defer lf.Close()
		// The binaries' logger: one key once per line, no err=<nil>.
		if log, err = cmdlog.New(lf, "text", "info"); err != nil {
			return err
		}
	}
	p := func(format string, a ...any) { fmt.Fprintf(stdout, format+"\n", a...) }
	// A trace is what the job wrote, escape sequences included: shown as
	// is on a terminal, as plain text elsewhere (a file, a pipe, CI).
	tty := isTerminal(stdout)
	showTrace := func(b []byte) {
		if tty {
			stdout.Write(b)
			return
		}
		io.WriteString(stdout, ui.CleanOutput(b))
	}

	samples := Sample()
	caches := true
	if _, err := os.Stat(testfleet.RegistryBinary); err != nil {
		caches = false
	}
	fo := FleetOptions(samples, caches)
	if o.Containers {
		// Jobs naming an image run in a container, the others on the
		// host as without --containers.
		for i := range fo.Nodes {
			fo.Nodes[i].Executor = node.BackendAuto
		}
	}
	if o.MicroVM {
		microvmNodes(&fo, agent)
	}
	fo.Dir, fo.HubAddr, fo.Log = filepath.Join(dir, "fleet"), o.HubAddr, log
	p("vk demo: a hub, %d nodes, and per tenant a GitLab (built-in fake) and a relay, in %s", len(fo.Nodes), dir)
	if !caches {
		p("  (docker-registry is not installed: caches are skipped; apt-get install docker-registry)")
	}
	f, err := testfleet.Start(ctx, fo)
	if err != nil {
		return fmt.Errorf("demo: starting the fleet: %w (logs in %s)", err, filepath.Join(dir, "fleet.log"))
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = cerr
		}
		switch {
		case err == nil && o.Dir == "":
			os.RemoveAll(fo.Dir) // keep the traces and fleet.log, not the fleet's state
		case err == nil:
			fmt.Fprintf(stdout, "The fleet's state, logs and traces are kept in %s\n", dir)
		default:
			fmt.Fprintf(stdout, "The fleet's state and logs are kept for a look: %s\n", dir)
		}
	}()
	h := f.Hub()
	p("  hub     https://%s  state %s", h.Addr(), h.StateDir())
	for _, n := range f.Nodes() {
		c := n.Config()
		exe := ""
		if o.Containers {
			exe = ", executor " + c.Executor.Backend + " (jobs with an image in a container)"
		}
		if o.MicroVM {
			exe = ", executor microvm (every job in its own QEMU microVM under KVM)"
		}
		p("  node    %-8s %s  %d cpus, %s, at most %d jobs%s", n.Name, n.ID, c.Resources.CPUs, c.Resources.Mem, c.Executor.Schedule.MaxConcurrency, exe)
	}
	for _, t := range f.Tenants() {
		p("  tenant  %-8s weight %d  GitLab %s  relay %s", t.Spec.Name, t.Spec.Weight, t.GitLab.URL(), t.Relay.ID)
	}
	if o.Containers || o.MicroVM {
		p("  building the demo image (busybox + bash) and pushing it to the fleet's registry…")
		ref, size, err := buildImage(ctx, f.RegistryHost())
		if err != nil {
			return err
		}
		p("  image   %s  %.1f MiB, pulled by the nodes over plain HTTP", ref, float64(size)/(1<<20))
		if o.Containers {
			AddImageJobs(samples, ref)
		} else {
			// Every job boots from the image's disk (the microvm
			// backend runs no services yet: no ImageJob).
			inImage(samples, ref)
		}
	}
	loaded, err := Load(f, samples)
	if err != nil {
		return err
	}
	for _, l := range loaded {
		p("  loaded  %s: pipeline %d, %d jobs over %s", l.Sample.Project, l.Pipeline.ID, len(l.Pipeline.Jobs), strings.Join(l.Sample.Pipeline.Stages, " → "))
	}
	p("")

	col := newCollector(f, loaded, start)
	wctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	tick := time.NewTicker(o.Interval)
	defer tick.Stop()
	var prev Snapshot
	lastStatus := ""
	lastPrint := time.Time{}
	for {
		cur := col.snap(ctx)
		for _, e := range Events(prev, cur) {
			p("  %s", e)
		}
		if st := StatusLine(cur); stripTime(st) != stripTime(lastStatus) || time.Since(lastPrint) > 5*time.Second {
			p("%s", st)
			lastStatus, lastPrint = st, time.Now()
		}
		prev = cur
		if cur.Done() {
			break
		}
		select {
		case <-wctx.Done():
			p("demo: pipelines did not finish within %s", o.Timeout)
			return wctx.Err()
		case <-tick.C:
		}
	}

	final := col.snap(ctx)
	traces := filepath.Join(dir, "traces")
	if err := writeTraces(traces, loaded, &final); err != nil {
		return err
	}
	p("")
	if err := Summary(stdout, final); err != nil {
		return err
	}
	p("")
	p("Traces (GitLab's copy, byte for byte what the node produced): %s", traces)
	for _, j := range pickTraces(final) {
		b, _ := os.ReadFile(j.TracePath)
		p("")
		p("──── %s/%s #%d (%s) ── %s", j.Tenant, j.Name, j.GitLabID, j.Result(), j.TracePath)
		showTrace(b)
	}
	p("")
	var bad []string
	for _, l := range loaded {
		for name, id := range l.Pipeline.Jobs {
			if got, want := l.Tenant.GitLab.JobState(id), l.Sample.Want[name]; got != want {
				bad = append(bad, fmt.Sprintf("%s/%s is %s, want %s", l.Sample.Name, name, got, want))
			}
		}
	}
	sort.Strings(bad)
	// A job that did not end as expected is the one to read: print it.
	for _, j := range final.Jobs {
		for _, l := range loaded {
			if l.Sample.Name == j.Tenant && j.State != l.Sample.Want[j.Name] && j.State != "skipped" && j.TracePath != "" {
				b, _ := os.ReadFile(j.TracePath)
				p("──── unexpected: %s/%s #%d (%s) ── %s", j.Tenant, j.Name, j.GitLabID, j.Result(), j.TracePath)
				showTrace(b)
				p("")
			}
		}
	}
	if o.Keep {
		p("The fleet keeps running (--keep): hub https://%s, state in %s. Ctrl-C stops it.", h.Addr(), f.Dir())
		<-ctx.Done()
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s", ErrJobs, strings.Join(bad, "; "))
	}
	p("All %d jobs ended as expected (%s failed on purpose) in %s.", len(final.Jobs), FailingJob, time.Since(start).Round(100*time.Millisecond))
	return nil
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
	c.Flags().BoolVar(&o.MicroVM, "microvm", false, "run every job in its own QEMU microVM under KVM (needs a KVM that boots a guest, qemu-system-x86, linux-image-amd64, vk-agent)")
	c.Flags().StringVar(&o.Dir, "dir", "", "directory for state, logs and traces, created if missing and kept (default: a new temporary directory, its fleet state removed at the end)")
	return c
}
