package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/vk-ci/vk/hub/ui"
	"github.com/vk-ci/vk/internal/cmdlog"
	"github.com/vk-ci/vk/internal/testfleet"
	"github.com/vk-ci/vk/node"
)

// demoRun is one [Run]: its options, where it prints, and where it keeps
// the fleet's state, logs and traces. Each step of the demo is a method.
type demoRun struct {
	o     Options
	out   io.Writer
	tty   bool // out is a terminal: traces are shown with their escapes
	start time.Time
	dir   string
	agent string // vk-agent's path, with --microvm
	ha    *haRun // with --ha
	// onSnap, when set, sees every snapshot watch takes (--ha kills the
	// leader from it).
	onSnap func(Snapshot)
}

func (o Options) withDefaults() Options {
	if o.Interval == 0 {
		o.Interval = 250 * time.Millisecond
	}
	if o.Timeout == 0 {
		o.Timeout = 3 * time.Minute
	}
	return o
}

func (r *demoRun) p(format string, a ...any) { fmt.Fprintf(r.out, format+"\n", a...) }

// showTrace prints what a job wrote, escape sequences included: as is on
// a terminal, as plain text elsewhere (a file, a pipe, CI).
func (r *demoRun) showTrace(b []byte) {
	if r.tty {
		r.out.Write(b)
		return
	}
	io.WriteString(r.out, ui.CleanOutput(b))
}

// checkHost fails before anything starts when --containers or --microvm
// was asked for and the host cannot run containers or boot a microVM.
func (r *demoRun) checkHost(ctx context.Context) error {
	if r.o.MicroVM {
		if r.o.Containers {
			return errors.New("demo: --microvm and --containers exclude each other")
		}
		check := r.o.microvmCheck
		if check == nil {
			check = func() (string, error) { return MicroVMAvailable(ctx) }
		}
		var err error
		if r.agent, err = check(); err != nil {
			return err
		}
		return nil
	}
	if !r.o.Containers {
		return nil
	}
	check := r.o.containersCheck
	if check == nil {
		check = ContainersAvailable
	}
	return check()
}

// openDir makes the demo's directory and, unless Options.Log is given,
// the components' log in it (fleet.log); the returned func closes it.
func (r *demoRun) openDir() (closeLog func(), err error) {
	r.dir = r.o.Dir
	if r.dir == "" {
		if r.dir, err = os.MkdirTemp("", "vk-demo-"); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return nil, fmt.Errorf("demo: --dir: %w", err)
	}
	if r.o.Log != nil {
		return func() {}, nil
	}
	lf, err := os.Create(filepath.Join(r.dir, "fleet.log"))
	if err != nil {
		return nil, err
	}
	// The binaries' logger: one key once per line, no err=<nil>.
	if r.o.Log, err = cmdlog.New(lf, "text", "info"); err != nil {
		lf.Close()
		return nil, err
	}
	return func() { lf.Close() }, nil
}

// fleetOptions is the fleet for the sample: caches when docker-registry
// is installed, executor "auto" with --containers (jobs naming an image
// run in a container, the others on the host).
func (r *demoRun) fleetOptions(samples []SampleTenant) testfleet.Options {
	caches := true
	if _, err := os.Stat(testfleet.RegistryBinary); err != nil {
		caches = false
	}
	fo := FleetOptions(samples, caches)
	if r.o.Containers {
		for i := range fo.Nodes {
			fo.Nodes[i].Executor = node.BackendAuto
		}
	}
	if r.o.MicroVM {
		microvmNodes(&fo, r.agent)
	}
	fo.Dir, fo.HubAddr, fo.Log = filepath.Join(r.dir, "fleet"), r.o.HubAddr, r.o.Log
	r.p("vk demo: a hub, %d nodes, and per tenant a GitLab (built-in fake) and a relay, in %s", len(fo.Nodes), r.dir)
	if !caches {
		r.p("  (docker-registry is not installed: caches are skipped; apt-get install docker-registry)")
	}
	return fo
}

// closeFleet stops the fleet and says what is kept: everything with
// --dir or after a failure; without --dir after success, the traces and
// fleet.log but not the fleet's state (fleetDir). It returns err, or the
// fleet's close error when err is nil.
func (r *demoRun) closeFleet(f *testfleet.Fleet, fleetDir string, err error) error {
	if cerr := f.Close(); cerr != nil && err == nil {
		err = cerr
	}
	switch {
	case err == nil && r.o.Dir == "":
		os.RemoveAll(fleetDir)
	case err == nil:
		fmt.Fprintf(r.out, "The fleet's state, logs and traces are kept in %s\n", r.dir)
	default:
		fmt.Fprintf(r.out, "The fleet's state and logs are kept for a look: %s\n", r.dir)
	}
	return err
}

// printFleet lists the hub, the nodes and the tenants.
func (r *demoRun) printFleet(f *testfleet.Fleet) {
	h := f.Hub()
	r.p("  hub     https://%s  state %s", h.Addr(), h.StateDir())
	for _, n := range f.Nodes() {
		c := n.Config()
		exe := ""
		if r.o.Containers {
			exe = ", executor " + c.Executor.Backend + " (jobs with an image in a container)"
		}
		if r.o.MicroVM {
			exe = ", executor microvm (every job in its own QEMU microVM under KVM)"
		}
		r.p("  node    %-8s %s  %d cpus, %s, at most %d jobs%s", n.Name, n.ID, c.Resources.CPUs, c.Resources.Mem, c.Executor.Schedule.MaxConcurrency, exe)
	}
	for _, t := range f.Tenants() {
		r.p("  tenant  %-8s weight %d  GitLab %s  relay %s", t.Spec.Name, t.Spec.Weight, t.GitLab.URL(), t.Relay.ID)
	}
}

// loadSamples creates the sample pipelines in the tenants' GitLabs, with
// --containers after building the demo image and adding its job.
func (r *demoRun) loadSamples(ctx context.Context, f *testfleet.Fleet, samples []SampleTenant) ([]Loaded, error) {
	if r.o.Containers || r.o.MicroVM {
		r.p("  building the demo image (busybox + bash) and pushing it to the fleet's registry…")
		ref, size, err := buildImage(ctx, f.RegistryHost())
		if err != nil {
			return nil, err
		}
		r.p("  image   %s  %.1f MiB, pulled by the nodes over plain HTTP", ref, float64(size)/(1<<20))
		if r.o.Containers {
			AddImageJobs(samples, ref)
		} else {
			// Every job boots from the image's disk (the microvm
			// backend runs no services yet: no ImageJob).
			inImage(samples, ref)
		}
	}
	loaded, err := Load(f, samples)
	if err != nil {
		return nil, err
	}
	for _, l := range loaded {
		r.p("  loaded  %s: pipeline %d, %d jobs over %s", l.Sample.Project, l.Pipeline.ID, len(l.Pipeline.Jobs), strings.Join(l.Sample.Pipeline.Stages, " → "))
	}
	r.p("")
	return loaded, nil
}

// watch prints what changed every interval, and the status line when it
// changed or every 5 s, until every job is done or the timeout passes. It
// returns the last snapshot.
func (r *demoRun) watch(ctx context.Context, col *collector) (Snapshot, error) {
	wctx, cancel := context.WithTimeout(ctx, r.o.Timeout)
	defer cancel()
	tick := time.NewTicker(r.o.Interval)
	defer tick.Stop()
	var prev Snapshot
	lastStatus := ""
	lastPrint := time.Time{}
	for {
		cur := col.snap(ctx)
		for _, e := range Events(prev, cur) {
			r.p("  %s", e)
		}
		if st := StatusLine(cur); stripTime(st) != stripTime(lastStatus) || time.Since(lastPrint) > 5*time.Second {
			r.p("%s", st)
			lastStatus, lastPrint = st, time.Now()
		}
		prev = cur
		if r.onSnap != nil {
			r.onSnap(cur)
		}
		if cur.Done() {
			return col.snap(ctx), nil
		}
		select {
		case <-wctx.Done():
			r.p("demo: pipelines did not finish within %s", r.o.Timeout)
			return Snapshot{}, wctx.Err()
		case <-tick.C:
		}
	}
}

// report writes the traces and prints the summary, a few traces and
// every job that did not end as the sample expects; with --keep it then
// waits for ctx. It returns [ErrJobs] naming those jobs.
func (r *demoRun) report(ctx context.Context, f *testfleet.Fleet, loaded []Loaded, final Snapshot) error {
	traces := filepath.Join(r.dir, "traces")
	if err := writeTraces(traces, loaded, &final); err != nil {
		return err
	}
	r.p("")
	if err := Summary(r.out, final); err != nil {
		return err
	}
	r.p("")
	r.p("Traces (GitLab's copy, byte for byte what the node produced): %s", traces)
	for _, j := range pickTraces(final) {
		b, _ := os.ReadFile(j.TracePath)
		r.p("")
		r.p("──── %s/%s #%d (%s) ── %s", j.Tenant, j.Name, j.GitLabID, j.Result(), j.TracePath)
		r.showTrace(b)
	}
	r.p("")
	bad := r.unexpected(loaded, final)
	if r.o.Keep {
		r.p("The fleet keeps running (--keep): hub https://%s, state in %s. Ctrl-C stops it.", f.Hub().Addr(), f.Dir())
		<-ctx.Done()
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s", ErrJobs, strings.Join(bad, "; "))
	}
	r.p("All %d jobs ended as expected (%s failed on purpose) in %s.", len(final.Jobs), FailingJob, time.Since(r.start).Round(100*time.Millisecond))
	return nil
}

// unexpected lists, sorted, the jobs whose GitLab state is not the one
// the sample wants, and prints the trace of each such job: the one to
// read.
func (r *demoRun) unexpected(loaded []Loaded, final Snapshot) []string {
	var bad []string
	for _, l := range loaded {
		for name, id := range l.Pipeline.Jobs {
			if got, want := l.Tenant.GitLab.JobState(id), l.Sample.Want[name]; got != want {
				bad = append(bad, fmt.Sprintf("%s/%s is %s, want %s", l.Sample.Name, name, got, want))
			}
		}
	}
	sort.Strings(bad)
	for _, j := range final.Jobs {
		for _, l := range loaded {
			if l.Sample.Name == j.Tenant && j.State != l.Sample.Want[j.Name] && j.State != "skipped" && j.TracePath != "" {
				b, _ := os.ReadFile(j.TracePath)
				r.p("──── unexpected: %s/%s #%d (%s) ── %s", j.Tenant, j.Name, j.GitLabID, j.Result(), j.TracePath)
				r.showTrace(b)
				r.p("")
			}
		}
	}
	return bad
}
