package node

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/internal/version"
	"github.com/vk-ci/vk/node/exec"
	"github.com/vk-ci/vk/node/exec/microvm"
	"github.com/vk-ci/vk/node/journal"
	"github.com/vk-ci/vk/node/ledger"
	"github.com/vk-ci/vk/node/session"
	"github.com/vk-ci/vk/node/stage"
	"github.com/vk-ci/vk/proto/dispatch"
)

// Result repeats (NSESS-16) and the shutdown grace.
const (
	// DefaultResultRetry is the first interval at which an unrecorded
	// result is repeated; it doubles up to MaxResultRetry.
	DefaultResultRetry = 5 * time.Second
	// MaxResultRetry is the longest interval between repeats.
	MaxResultRetry = time.Minute
	// ResultGrace is how long Shutdown waits, after the last job ended,
	// for the hub to record results before it stops anyway (the journal
	// resends them after the restart).
	ResultGrace = 10 * time.Second
)

// Errors.
var (
	// ErrStopped is returned by Shutdown after the agent already stopped,
	// and by Start on a stopped agent (one whose Start failed included).
	ErrStopped = errors.New("node: agent stopped")
)

// Options are the parts of an [Agent] that are not configuration: the
// wiring tests and an in-process fleet replace. The zero value is
// production.
type Options struct {
	// Identity overrides the state dir's (from `vk node join`).
	Identity *Identity
	// TLSConfig overrides the client TLS config built from the identity's
	// CA.
	TLSConfig *tls.Config
	// Clock drives leases, result repeats and job timers; nil means real
	// time.
	Clock clock.Clock
	// SessionClock drives the session's redial backoff and heartbeats; nil
	// means real time.
	SessionClock clock.Clock
	// DetectRunner reports a local gitlab-runner when [NodeSection.Runner]
	// is unset; nil means [DetectLocalRunner] with [RunnerUnits].
	DetectRunner func() bool
	// Executor replaces the process backend (the oci backend, when
	// configured, still runs jobs with an image).
	Executor exec.Executor
	// ResultRetry is the first repeat interval of a result; 0 means
	// DefaultResultRetry.
	ResultRetry time.Duration

	// ResultGrace bounds Shutdown's wait for results to be recorded once
	// the jobs ended; 0 means [ResultGrace].
	ResultGrace time.Duration

	// egressSource, when set (tests), measures every job's egress in
	// place of the oci backend's network namespace.
	egressSource func(jobID string) egressSource
	// egressSampled, when set (tests), is called after each egress sample
	// with whether a frame was sent.
	egressSampled func(jobID string, sent bool)

	// probeKVM, when set (tests), stands in for booting the KVM probe
	// guest ([microvm.ProbeKVM]) with the microvm executor's config.
	probeKVM func(cfg microvm.Config) error

	// imageSwept, when set (tests), is called after each image cache
	// sweep with the images it removed.
	imageSwept func(removed []string)

	// leaseArmed, when set (tests), is called each time the lease timer is
	// armed, with the deadline on the ledger's clock.
	leaseArmed func(at time.Duration)
}

// Agent is a running node: ledger, journal, spools, stage runner and hub
// session. Build it with [New], run it with [Agent.Start] (or both with
// [Start]); stop it with [Agent.Shutdown].
//
//	Start ──▶ running ──Shutdown──▶ draining ──jobs ended or ctx──▶ interrupting ──▶ stopped
type Agent struct {
	cfg     Config
	opts    Options
	baseLog *slog.Logger // the log as given, for the session's own component
	log     *slog.Logger
	clk     clock.Clock
	t0      time.Time // the monotonic origin of ledger time
	ident   Identity
	journal *journal.Journal
	runner  *stage.Runner
	be      *backends
	sess    *session.Client
	spools  string // directory of the spools
	retry   time.Duration
	metrics *metrics
	httpSrv *http.Server
	httpLn  net.Listener
	ctlLn   net.Listener // the control socket

	runCtx    context.Context // the agent's lifetime: session, senders, lease timer
	runCancel context.CancelFunc
	jobsCtx   context.Context // ending it interrupts running jobs (FAIL-08)
	jobsStop  context.CancelFunc
	bg        sync.WaitGroup // session, lease timer, metrics
	jobsWG    sync.WaitGroup // job goroutines and senders
	rearm     chan struct{}  // capacity 1: the lease timer recomputes
	stopOnce  sync.Once
	stopped   chan struct{}

	mu          sync.Mutex
	led         *ledger.Ledger     // guarded by mu
	jobs        map[string]*jobRun // unrecorded jobs; guarded by mu
	connected   bool               // guarded by mu
	sessVersion int                // the session's negotiated version; guarded by mu
	pools       []string           // applied from settings; nil until then; guarded by mu
	hasPools    bool               // guarded by mu
	capTotal    ledger.Envelope    // guarded by mu (immutable after Start)
	runnerOn    bool               // a local runner is present; guarded by mu
	changed     chan struct{}      // closed and replaced when a job changes; guarded by mu
}

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// MetricsAddr returns the metrics listener's address, "" without one.
func (a *Agent) MetricsAddr() string {
	if a.httpLn == nil {
		return ""
	}
	return a.httpLn.Addr().String()
}

// WriteMetrics writes the node's metrics in the Prometheus text format
// (what the metrics listener serves at /metrics).
func (a *Agent) WriteMetrics(w io.Writer) error { return a.metrics.write(w) }

// now is the ledger's monotonic time.
func (a *Agent) now() time.Duration { return a.clk.Now().Sub(a.t0) }

// send queues m for the hub; a failure is logged (the durable mechanisms
// resend what matters).
func (a *Agent) send(m dispatch.Message) {
	if err := a.sess.Send(m); err != nil && !errors.Is(err, session.ErrStopped) {
		a.log.Warn("send to hub failed", "type", m.FrameType(), "kind", m.FrameKind(), logkey.Err, err)
	}
}

func (a *Agent) kickLease() {
	select {
	case a.rearm <- struct{}{}:
	default:
	}
}

// leaseLoop drops reservations whose lease ran out on the monotonic clock
// and tells the hub (NODE-03): one timer, armed at the ledger's next
// expiry.
func (a *Agent) leaseLoop() {
	for {
		a.mu.Lock()
		now := a.now()
		for _, id := range a.led.Expire(now) {
			a.metrics.leaseGone.WithLabelValues(string(dispatch.GoneExpired)).Inc()
			a.send(&dispatch.Lease{Reservation: id, State: dispatch.LeaseGone, Why: dispatch.GoneExpired})
			a.log.Info("lease expired", logkey.Reservation, id)
		}
		a.wakeLocked()
		a.checkDrainedLocked()
		at, ok := a.led.NextExpiry()
		a.mu.Unlock()
		var t clock.Timer
		var tc <-chan time.Time
		if ok {
			t = a.clk.NewTimer(max(at-now, 0))
			tc = t.C()
			if a.opts.leaseArmed != nil {
				a.opts.leaseArmed(at)
			}
		}
		select {
		case <-a.runCtx.Done():
			if t != nil {
				t.Stop()
			}
			return
		case <-a.rearm:
		case <-tc:
		}
		if t != nil {
			t.Stop()
		}
	}
}

// SetState moves the node to state s (operators: drain, quarantine,
// ready). Quarantine releases held reservations and tells the hub
// (NODE-05).
func (a *Agent) SetState(s ledger.State) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, id := range a.led.SetState(s) {
		a.metrics.leaseGone.WithLabelValues(string(dispatch.GoneReleased)).Inc()
		a.send(&dispatch.Lease{Reservation: id, State: dispatch.LeaseGone, Why: dispatch.GoneReleased})
	}
	a.wakeLocked()
	a.checkDrainedLocked()
	a.broadcastLocked()
	a.log.Info("node state", "state", s)
}

// State returns the node's admission state.
func (a *Agent) State() ledger.State {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.led.Snapshot(a.now()).State
}

// checkDrainedLocked moves a draining node with nothing left to drained.
func (a *Agent) checkDrainedLocked() {
	s := a.led.Snapshot(a.now())
	if s.State == ledger.StateDraining && len(s.Jobs) == 0 && len(s.Reservations) == 0 {
		a.led.SetState(ledger.StateDrained)
	}
}

// unfinishedLocked counts jobs without a result.
func (a *Agent) unfinishedLocked() int {
	n := 0
	for _, jr := range a.jobs {
		if jr.result == nil {
			n++
		}
	}
	return n
}

// heldLocked is the held message (NSESS-11, NSESS-24).
func (a *Agent) heldLocked() *dispatch.Held {
	s := a.led.Snapshot(a.now())
	h := &dispatch.Held{}
	for _, r := range s.Reservations {
		h.Reservations = append(h.Reservations, dispatch.HeldReservation{
			Reservation: r.ID, Envelope: toWire(r.Envelope), RemainingSecs: r.RemainingSecs})
	}
	ids := make([]string, 0, len(a.jobs))
	for id := range a.jobs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		jr := a.jobs[id]
		if jr.recorded {
			continue
		}
		h.Jobs = append(h.Jobs, dispatch.HeldJob{Job: id, Finished: jr.result != nil, Spooled: jr.sp.Status().Produced})
	}
	return h
}

// reportLocked is the inventory (XFER-17, PLACE-04, PLACE-08).
func (a *Agent) reportLocked() *dispatch.Report {
	host, _ := os.Hostname()
	pools := a.cfg.Node.Pools
	if a.hasPools {
		pools = a.pools
	}
	return &dispatch.Report{
		Release: version.Version, Host: host, Name: a.cfg.Node.Name,
		Resources:      dispatch.Resources{Mem: toWire(a.capTotal).Mem, Disk: toWire(a.capTotal).Disk, CPUs: int(a.capTotal.CPUs)},
		Labels:         a.cfg.Node.Labels,
		Pools:          pools,
		Registry:       a.cfg.Registry.URL,
		MaxConcurrency: a.cfg.Executor.Schedule.MaxConcurrency,
		Executor:       a.be.reported(),
		LocalRunner:    a.runnerOn,
	}
}

// heartbeat is the periodic state, with the 1-minute load average.
func (a *Agent) heartbeat() dispatch.Heartbeat {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.led.Snapshot(a.now())
	free := toWire(s.Total)
	u := toWire(s.Used)
	free.Mem, free.Disk, free.CPUs = max(free.Mem-u.Mem, 0), max(free.Disk-u.Disk, 0), max(free.CPUs-u.CPUs, 0)
	return dispatch.Heartbeat{
		State: dispatch.NodeState(s.State), Load1: load1(),
		Jobs: a.unfinishedLocked(), Reservations: len(s.Reservations),
		Free: &dispatch.Resources{Mem: free.Mem, Disk: free.Disk, CPUs: free.CPUs},
	}
}
