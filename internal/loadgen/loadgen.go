package loadgen

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a run. The zero value of a field means its default.
type Options struct {
	// Relays is the number of relays enrolled; default 4.
	Relays int
	// Nodes is the number of lightweight nodes; default 16.
	Nodes int
	// Loops is the number of concurrent request loops (one runner each),
	// spread over the relays; default 8 per relay.
	Loops int
	// Warmup runs lifecycles before measuring; default 5 s.
	Warmup time.Duration
	// Duration is the measured window; default 60 s.
	Duration time.Duration
	// MinLifecycles extends the measured window until that many
	// lifecycles completed in it (tests use it instead of a long
	// window on a slow machine); 0 means none.
	MinLifecycles int
	// FloorDuration is how long each floor measure runs; default 3 s.
	FloorDuration time.Duration
	// OutputBytes is each job's output; default 4 KiB.
	OutputBytes int
	// ConnPerRequest makes the relays' clients open a new (resumed) TLS
	// connection for every request instead of keeping connections alive,
	// as hubclient did before keep-alive: to compare the two on one
	// machine.
	ConnPerRequest bool
	// Target is a running hub to drive. Nil starts one with HubCommand
	// in Dir.
	Target *Target
	// HubCommand starts the hub (its "serve" arguments are added), e.g.
	// {"/usr/bin/vk-hub"}.
	HubCommand []string
	// HubEnv is added to the started hub's environment.
	HubEnv []string
	// Dir holds a started hub's state; required when Target is nil.
	Dir string
	// HubLog receives a started hub's log; nil discards it.
	HubLog io.Writer
	// Progress receives one line per phase; nil discards.
	Progress io.Writer
}

func (o *Options) defaults() {
	if o.Relays <= 0 {
		o.Relays = 4
	}
	if o.Nodes <= 0 {
		o.Nodes = 16
	}
	if o.Loops <= 0 {
		o.Loops = 8 * o.Relays
	}
	if o.Warmup <= 0 {
		o.Warmup = 5 * time.Second
	}
	if o.Duration <= 0 {
		o.Duration = 60 * time.Second
	}
	if o.FloorDuration <= 0 {
		o.FloorDuration = 3 * time.Second
	}
	if o.OutputBytes <= 0 {
		o.OutputBytes = 4 << 10
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

// Run enrols the relays and nodes, runs lifecycles for the warm-up and
// the measured window, measures the floor and returns the report. A
// lifecycle that fails ends the run with its error: at this load, an
// error is a finding, not noise.
func Run(ctx context.Context, o Options) (*Report, error) {
	o.defaults()
	t := o.Target
	if t == nil {
		if o.Dir == "" {
			return nil, errors.New("loadgen: Options.Dir is required to start a hub")
		}
		fmt.Fprintf(o.Progress, "starting hub: %v\n", o.HubCommand)
		var err error
		if t, err = StartHub(ctx, o.HubCommand, o.Dir, o.HubEnv, o.HubLog); err != nil {
			return nil, err
		}
		defer t.Stop()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	fmt.Fprintf(o.Progress, "enrolling %d nodes and %d relays at %s\n", o.Nodes, o.Relays, t.URL)
	output := bytes.Repeat([]byte("log line of a benchmark job\n"), o.OutputBytes/28+1)[:o.OutputBytes]
	// The sessions end with the run: cancel first, then wait for them.
	var sessions sync.WaitGroup
	defer func() { cancel(); sessions.Wait() }()
	for i := range o.Nodes {
		n, err := enrolNode(ctx, t, fmt.Sprintf("bench-node-%d", i), output)
		if err != nil {
			return nil, err
		}
		sessions.Go(func() { n.sess.Run(ctx) })
		select {
		case <-n.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(30 * time.Second):
			return nil, fmt.Errorf("loadgen: node %s: no welcome within 30 s", n.id)
		}
	}
	relays := make([]relay, o.Relays)
	for i := range relays {
		var err error
		if relays[i], err = enrolRelay(ctx, t, fmt.Sprintf("bench-relay-%d", i), o.ConnPerRequest); err != nil {
			return nil, err
		}
	}
	loops := make([]*loop, o.Loops)
	var gitlabJob atomic.Int64
	for i, r := range relays {
		var runners []string
		for j := i; j < o.Loops; j += len(relays) {
			runners = append(runners, fmt.Sprintf("runner-%d", j))
		}
		rs, err := newRelaySession(t, r, fmt.Sprintf("bench-relay-%d", i), runners)
		if err != nil {
			return nil, err
		}
		if err := rs.start(ctx, &sessions); err != nil {
			return nil, err
		}
		for j := i; j < o.Loops; j += len(relays) {
			runner := fmt.Sprintf("runner-%d", j)
			loops[j] = &loop{c: r.c, runner: runner, nextJob: func() int64 { return gitlabJob.Add(1) },
				hold: func(f func(*runnerHeld)) { rs.update(runner, f) }, lat: map[string][]time.Duration{}}
		}
	}
	rep, err := runLoops(ctx, o, loops, t.PID)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Progress, "measuring the floor (%s each)\n", o.FloorDuration)
	if rep.Floor, err = measureFloor(ctx, t, relays[0], o.Loops, o.FloorDuration); err != nil {
		return nil, err
	}
	rep.ConnPerRequest = o.ConnPerRequest
	rep.finish()
	return rep, nil
}

// runLoops runs o.Loops lifecycle loops through the warm-up and the
// measured window and collects what they recorded.
func runLoops(ctx context.Context, o Options, loops []*loop, pid int) (*Report, error) {
	var recording atomic.Bool
	// completed counts measured lifecycles; progress wakes the wait for
	// MinLifecycles after each.
	var completed atomic.Int64
	progress := make(chan struct{}, 1)
	for _, l := range loops {
		l.completed = func() {
			completed.Add(1)
			select {
			case progress <- struct{}{}:
			default:
			}
		}
	}
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	errs := make(chan error, len(loops))
	var wg sync.WaitGroup
	for _, l := range loops {
		wg.Go(func() {
			if err := l.run(lctx, recording.Load); err != nil {
				errs <- fmt.Errorf("loadgen: %s: %w", l.runner, err)
				stop()
			}
		})
	}
	fmt.Fprintf(o.Progress, "warming up for %s with %d loops\n", o.Warmup, o.Loops)
	wait := func(d time.Duration) {
		select {
		case <-time.After(d):
		case <-lctx.Done():
		}
	}
	wait(o.Warmup)
	before, genBefore := readProc(pid), readProc(os.Getpid())
	start := time.Now()
	recording.Store(true)
	fmt.Fprintf(o.Progress, "measuring for %s\n", o.Duration)
	wait(o.Duration)
	for completed.Load() < int64(o.MinLifecycles) && lctx.Err() == nil {
		select {
		case <-progress:
		case <-lctx.Done():
		}
	}
	recording.Store(false)
	elapsed := time.Since(start)
	after, genAfter := readProc(pid), readProc(os.Getpid())
	stop()
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rep := &Report{Relays: o.Relays, Nodes: o.Nodes, Loops: o.Loops, Window: elapsed, OutputBytes: o.OutputBytes, byStep: map[string][]time.Duration{}}
	for _, l := range loops {
		rep.Lifecycles += l.done
		for k, v := range l.lat {
			rep.byStep[k] = append(rep.byStep[k], v...)
		}
	}
	// The generator's own CPU is the other share of the machine: on the
	// two cores that the hub and the load generator share, it is CPU the
	// hub could not have.
	rep.GenCPU = genAfter.CPU - genBefore.CPU
	if pid != 0 {
		rep.HubCPU = after.CPU - before.CPU
		rep.HubRSS, rep.HubMaxRSS = after.RSS, after.MaxRSS
	}
	for _, v := range rep.byStep {
		slices.Sort(v)
	}
	return rep, nil
}
