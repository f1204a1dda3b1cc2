package hub

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vk-ci/vk/hub/wtrace"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/sched"
)

// tracer is what the driver tells the workload trace (hub/wtrace,
// docs/replay.md): every core step with its actions, on the driver's
// goroutine. Step must not block; Close writes what is buffered.
type tracer interface {
	Step(now time.Time, ev sched.Event, acts []sched.Action)
	Queue(now time.Time, job sched.JobID, runner sched.RunnerID, inQueue time.Duration, size int64)
	Close() error
}

// nopTracer records nothing (trace.disabled, or its directory unusable).
type nopTracer struct{}

func (nopTracer) Step(time.Time, sched.Event, []sched.Action)                        {}
func (nopTracer) Queue(time.Time, sched.JobID, sched.RunnerID, time.Duration, int64) {}
func (nopTracer) Close() error                                                       { return nil }

// traceQueue records what GitLab said about its queue when it handed out
// the job the core just took (the submission's gitlab_queue; nothing when
// it has none), for a replay's arrivals and hidden backlog.
func (d *Driver) traceQueue(job sched.JobID, runner sched.RunnerID, q *client.GitLabQueue) {
	if q == nil {
		return
	}
	secs := min(max(q.TimeInQueueSecs, 0), 1000*3600) // a relay's figure: bounded before it is a Duration
	d.trace.Queue(d.now(), job, runner, time.Duration(secs*float64(time.Second)), q.Size)
}

// openTrace starts the workload trace of cfg.Trace and records the policy
// in force. A trace that cannot start is logged and left off: the hub
// runs without it.
func (d *Driver) openTrace() tracer {
	if d.cfg.Trace.Disabled {
		return nopTracer{}
	}
	cfg := d.cfg.Trace.WithDefaults(d.cfg.StateDir)
	rec, err := wtrace.Open(cfg, func(id sched.TenantID) string { return d.ids.tenants.keys[id] }, d.log)
	if err != nil {
		d.log.Warn("workload trace off", "err", err)
		return nopTracer{}
	}
	if d.met != nil && d.met.reg != nil {
		_ = d.met.reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "vk_hub_trace_dropped_total",
			Help: "Workload trace records dropped because the trace writer's buffer was full."},
			func() float64 { return float64(rec.Dropped()) }))
	}
	rec.Step(d.now(), sched.PolicyChanged{Policy: d.core.Policy()}, nil)
	return rec
}
