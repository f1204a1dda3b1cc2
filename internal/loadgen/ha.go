package loadgen

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// HAOptions configure a failover run ([RunHA]): two hub instances on one
// PostgreSQL database under the leader lease, N lightweight nodes each
// holding a session to both (every report sent to both, as a real node
// does), and relays whose request loops and sessions know both
// instances and follow the leader. The leader is SIGKILLed again and
// again; each time the run measures how long the fleet took to be served
// by the new leader. The zero value of a field means its default.
type HAOptions struct {
	// DSN is the PostgreSQL database both instances share (one schema,
	// in search_path). Required.
	DSN string
	// Nodes is the number of lightweight nodes; default 1,000.
	Nodes int
	// Relays is the number of relays; default 5.
	Relays int
	// Loops is the number of request loops spread over the relays;
	// default 50.
	Loops int
	// Kills is the number of leader SIGKILLs; default 20.
	Kills int
	// TTLMillis is the lease TTL; 0 means the hub's default (5 s).
	TTLMillis int
	// IngestWindow, when positive, measures report ingest after the
	// kills (see [IngestReport]) for that long.
	IngestWindow time.Duration
	// IngestRate is the reports per second sent to each instance while
	// ingest is measured; default 4,000 (BS-09's per-instance rate).
	IngestRate int
	// OutputBytes is each job's output; default 4 KiB.
	OutputBytes int
	// HubCommand, HubEnv, Dir, HubLog and Progress are as in [Options];
	// Dir is required.
	HubCommand []string
	HubEnv     []string
	Dir        string
	HubLog     io.Writer
	Progress   io.Writer
}

func (o *HAOptions) defaults() {
	o.Nodes = cmpOr(o.Nodes, 1000)
	o.Relays = cmpOr(o.Relays, 5)
	o.Loops = cmpOr(o.Loops, 50)
	o.Kills = cmpOr(o.Kills, 20)
	o.IngestRate = cmpOr(o.IngestRate, 4000)
	o.OutputBytes = cmpOr(o.OutputBytes, 4<<10)
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

// sessionsWait bounds the wait for an instance to hold every node's
// session: 2 minutes, or 40 ms per node for larger fleets (a restarted
// instance is redialled by each node on its own backoff; 1,000 took
// about 40 s).
func (o *HAOptions) sessionsWait() time.Duration {
	return max(2*time.Minute, time.Duration(o.Nodes)*40*time.Millisecond)
}

func cmpOr(v, d int) int {
	if v <= 0 {
		return d
	}
	return v
}

// Failover is one leader SIGKILL, each duration measured from the kill.
type Failover struct {
	// Killed names the instance killed.
	Killed string `json:"killed"`
	// Elected: the other instance's /healthz said it leads (polled every
	// 20 ms).
	Elected time.Duration `json:"elected_ns"`
	// FirstGrant: the first reservation grant answered to a request sent
	// after the kill (so by the new leader).
	FirstGrant time.Duration `json:"first_grant_ns"`
	// AllLoops: every request loop had such a grant.
	AllLoops time.Duration `json:"all_loops_ns"`
	// Resynced: the killed instance, restarted as a standby (as its
	// supervisor would), held every node's session again.
	Resynced time.Duration `json:"resynced_ns"`
}

// HAReport is what [RunHA] measured.
type HAReport struct {
	Nodes     int        `json:"nodes"`
	Relays    int        `json:"relays"`
	Loops     int        `json:"loops"`
	TTLMillis int        `json:"ttl_ms"`
	Failovers []Failover `json:"failovers"`
	// Lifecycles counts the lifecycles completed over the run; Failed
	// those ended by an error (the failovers' transport errors and
	// refusals), each followed by a new lifecycle.
	Lifecycles int64 `json:"lifecycles"`
	Failed     int64 `json:"failed"`
	// Errors samples the first distinct errors of failed lifecycles.
	Errors []string `json:"errors,omitempty"`
	// Ingest is the report ingest measured after the kills, nil when not
	// asked for.
	Ingest *IngestReport `json:"ingest,omitempty"`
}

// haInstance is one hub instance: a child process on a port kept across
// its restarts.
type haInstance struct {
	name, addr, dir string
	config          string
	t               *Target
}

// haRun is one RunHA's state.
type haRun struct {
	o     HAOptions
	inst  [2]*haInstance
	nodes []*lightNode
	loops []*loop
	watch failWatch

	logMu     sync.Mutex // serialises both instances' log lines
	completed atomic.Int64
	failed    atomic.Int64
	errMu     sync.Mutex
	errs      []string
}

// RunHA starts two hub instances, enrols the nodes and relays, runs the
// request loops and SIGKILLs the leader o.Kills times, alternating
// between the instances; after each kill the killed instance is started
// again as a standby once every loop was served by the new leader.
func RunHA(ctx context.Context, o HAOptions) (*HAReport, error) {
	o.defaults()
	if o.Dir == "" || o.DSN == "" {
		return nil, errors.New("loadgen: HAOptions.Dir and DSN are required")
	}
	r := &haRun{o: o}
	for i, name := range []string{"hub-a", "hub-b"} {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		in := &haInstance{name: name, addr: addr, dir: filepath.Join(o.Dir, name)}
		in.config = fmt.Sprintf(haHubConfig, addr, filepath.Join(in.dir, "state"), o.DSN, o.TTLMillis, name, "https://"+addr)
		r.inst[i] = in
	}
	defer r.stopAll()
	ctx, cancel := context.WithCancel(ctx)
	var sessions sync.WaitGroup
	defer func() { cancel(); sessions.Wait() }()
	if err := r.startInstances(ctx); err != nil {
		return nil, err
	}
	if err := r.enrol(ctx, &sessions); err != nil {
		return nil, err
	}
	var loops sync.WaitGroup
	lctx, stopLoops := context.WithCancel(ctx)
	defer func() { stopLoops(); loops.Wait() }()
	for _, l := range r.loops {
		loops.Go(func() { r.runLoop(lctx, l) })
	}
	if err := r.waitProgress(ctx, int64(o.Loops)); err != nil {
		return nil, fmt.Errorf("loadgen: warm-up: %w", err)
	}
	rep := &HAReport{Nodes: o.Nodes, Relays: o.Relays, Loops: o.Loops, TTLMillis: o.TTLMillis}
	leader := 0
	for k := range o.Kills {
		f, err := r.killLeader(ctx, leader)
		if err != nil {
			return nil, fmt.Errorf("loadgen: kill %d: %w", k+1, err)
		}
		fmt.Fprintf(o.Progress, "kill %d (%s): elected %v, first grant %v, all %d loops %v, resynced %v\n", k+1, f.Killed,
			f.Elected.Round(time.Millisecond), f.FirstGrant.Round(time.Millisecond), o.Loops,
			f.AllLoops.Round(time.Millisecond), f.Resynced.Round(time.Millisecond))
		rep.Failovers = append(rep.Failovers, f)
		leader = 1 - leader
	}
	stopLoops()
	loops.Wait()
	if o.IngestWindow > 0 {
		var err error
		if rep.Ingest, err = r.measureIngest(ctx, r.inst[leader], r.inst[1-leader]); err != nil {
			return nil, err
		}
	}
	rep.Lifecycles, rep.Failed = r.completed.Load(), r.failed.Load()
	r.errMu.Lock()
	rep.Errors = slices.Clone(r.errs)
	r.errMu.Unlock()
	return rep, nil
}

// haHubConfig is an instance's configuration: hubConfig's load settings,
// the PostgreSQL store under the lease, and pre-authentication limits
// above what a thousand nodes dialling again from one loopback address
// need (a real fleet dials from as many addresses as it has machines).
const haHubConfig = `version = 1
addr = %q
state_dir = %q

[approvals]
required = false

[limits]
per_principal = 100000
per_hub = 1000000
max_unauth_per_peer = 100000
max_pending_hellos = 100000

[capacity_policy]
probe_limit = 100000
backoff_initial_secs = 1
backoff_max_secs = 2

[store]
kind = "postgres"
dsn = %q
lease = true
lease_ttl_ms = %d
instance = %q
advertise_url = %q
`

// freeAddr is a loopback address nothing listens on now; an instance
// keeps it across restarts, as a real one keeps its address.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// start starts the instance's process; the second instance is given a
// copy of the first's pki first (every instance serves the same
// certificate, docs/ha.md).
func (r *haRun) start(ctx context.Context, in *haInstance) error {
	stateDir := filepath.Join(in.dir, "state")
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return err
	}
	if in != r.inst[0] {
		if _, err := os.Stat(filepath.Join(stateDir, "pki")); errors.Is(err, os.ErrNotExist) {
			if err := os.CopyFS(filepath.Join(stateDir, "pki"), os.DirFS(filepath.Join(r.inst[0].dir, "state", "pki"))); err != nil {
				return fmt.Errorf("loadgen: %s pki: %w", in.name, err)
			}
		}
	}
	var logw io.Writer
	if r.o.HubLog != nil {
		logw = &prefixWriter{mu: &r.logMu, w: r.o.HubLog, prefix: []byte(in.name + " ")}
	}
	t, err := startHubConfig(ctx, r.o.HubCommand, in.dir, stateDir, in.config, r.o.HubEnv, logw)
	if err != nil {
		return fmt.Errorf("loadgen: %s: %w", in.name, err)
	}
	in.t = t
	return nil
}

// startInstances starts hub-a, waits for it to lead, then hub-b.
func (r *haRun) startInstances(ctx context.Context) error {
	fmt.Fprintf(r.o.Progress, "starting %s and %s on one PostgreSQL database\n", r.inst[0].name, r.inst[1].name)
	if err := r.start(ctx, r.inst[0]); err != nil {
		return err
	}
	if _, err := r.waitHealth(ctx, r.inst[0], 60*time.Second, func(h health) bool { return h.Role == "leader" }); err != nil {
		return err
	}
	if err := r.start(ctx, r.inst[1]); err != nil {
		return err
	}
	_, err := r.waitHealth(ctx, r.inst[1], 60*time.Second, func(h health) bool { return h.Role == "standby" })
	return err
}

func (r *haRun) stopAll() {
	for _, in := range r.inst {
		if in.t != nil {
			in.t.Stop()
		}
	}
}

// sessionURL is an instance's node session URL.
func (in *haInstance) sessionURL() string { return "wss://" + in.addr + "/v1/node/session" }

// enrol joins the nodes (eight at a time) and the relays through hub-a,
// runs their sessions and builds the loops; it returns once both
// instances hold every node's session.
func (r *haRun) enrol(ctx context.Context, sessions *sync.WaitGroup) error {
	o := r.o
	fmt.Fprintf(o.Progress, "enrolling %d nodes (a session to each instance) and %d relays\n", o.Nodes, o.Relays)
	t := r.inst[0].t
	output := bytes.Repeat([]byte("log line of a benchmark job\n"), o.OutputBytes/28+1)[:o.OutputBytes]
	r.nodes = make([]*lightNode, o.Nodes)
	var wg sync.WaitGroup
	errs := make(chan error, o.Nodes)
	sem := make(chan struct{}, 8)
	for i := range o.Nodes {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			n, err := enrolNode(ctx, t, fmt.Sprintf("ha-node-%d", i), output, r.inst[1].sessionURL())
			if err != nil {
				errs <- err
				return
			}
			r.nodes[i] = n
			sessions.Go(func() { n.sess.Run(ctx) })
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	for _, in := range r.inst {
		if _, err := r.waitHealth(ctx, in, o.sessionsWait(), func(h health) bool { return h.Nodes >= o.Nodes }); err != nil {
			return fmt.Errorf("loadgen: %s never held every node's session: %w", in.name, err)
		}
	}
	return r.enrolRelays(ctx, sessions)
}

// enrolRelays joins the relays, starts their sessions and builds the
// loops, each relay knowing both instances (hub-a first).
func (r *haRun) enrolRelays(ctx context.Context, sessions *sync.WaitGroup) error {
	o := r.o
	t := r.inst[0].t
	other := "https://" + r.inst[1].addr
	var gitlabJob atomic.Int64
	r.loops = make([]*loop, o.Loops)
	for i := range o.Relays {
		name := fmt.Sprintf("ha-relay-%d", i)
		rl, err := enrolRelay(ctx, t, name, false, other)
		if err != nil {
			return err
		}
		var runners []string
		for j := i; j < o.Loops; j += o.Relays {
			runners = append(runners, fmt.Sprintf("runner-%d", j))
		}
		rs, err := newRelaySession(t, rl, name, runners, other)
		if err != nil {
			return err
		}
		if err := rs.start(ctx, sessions); err != nil {
			return err
		}
		for j := i; j < o.Loops; j += o.Relays {
			runner := fmt.Sprintf("runner-%d", j)
			l := &loop{c: rl.c, runner: runner, nextJob: func() int64 { return gitlabJob.Add(1) },
				hold: func(f func(*runnerHeld)) { rs.update(runner, f) }, lat: map[string][]time.Duration{}}
			l.granted = func(sent time.Time) { r.watch.granted(j, sent) }
			r.loops[j] = l
		}
	}
	return nil
}

// runLoop runs lifecycles until ctx ends. A lifecycle ended by an error
// (a failover's) is counted and abandoned: what it held is dropped from
// the relay's heartbeat, and after a fifth of a second, as a relay's
// request loop pauses after a failed request, a new one begins.
func (r *haRun) runLoop(ctx context.Context, l *loop) {
	for ctx.Err() == nil {
		if _, err := l.lifecycle(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			r.failed.Add(1)
			r.noteErr(err)
			l.hold(func(h *runnerHeld) { *h = runnerHeld{} })
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		r.completed.Add(1)
	}
}

func (r *haRun) noteErr(err error) {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	if s := err.Error(); len(r.errs) < 8 && !slices.Contains(r.errs, s) {
		r.errs = append(r.errs, s)
	}
}

// waitProgress waits until n more lifecycles completed (within 2 min).
func (r *haRun) waitProgress(ctx context.Context, n int64) error {
	want := r.completed.Load() + n
	deadline := time.Now().Add(2 * time.Minute)
	for r.completed.Load() < want {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d lifecycles in 2 min", r.completed.Load()-want+n, n)
		}
		if err := pause(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// pause waits d (polling an outside process's state) or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// prefixWriter prefixes each Write (one log line of scanHubLog) with
// the instance's name.
type prefixWriter struct {
	mu     *sync.Mutex
	w      io.Writer
	prefix []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := p.w.Write(append(append([]byte{}, p.prefix...), b...)); err != nil {
		return 0, err
	}
	return len(b), nil
}
