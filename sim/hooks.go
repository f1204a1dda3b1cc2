package sim

import (
	"slices"
	"time"

	"github.com/vk-ci/vk/sched"
)

// Hooks for code that builds scenarios itself (sim/replay: a recorded hub
// trace replayed under a policy): recorded jobs without a CSV file, the
// core's policy beyond the scenario's knobs (headroom, production
// bursts), extra core events at given times (node readiness over time),
// and a periodic look at why the vk run's tickets wait. They affect the
// vk policy only.

// vkHooks are a scenario's hooks, shared by its copies.
type vkHooks struct {
	policy      func(*sched.Policy)
	events      []TimedEvent
	sampleEvery time.Duration
	sample      func(at time.Duration, template int, why sched.Reason)
	observe     func(at time.Duration, ev sched.Event, acts []sched.Action)
}

// TimedEvent is a core event the vk run steps at At (offset from the
// run's start).
type TimedEvent struct {
	At    time.Duration
	Event sched.Event
}

// RecordedJob is one job of a recorded workload: its arrival at GitLab,
// its template (runner) and its runtime once started.
type RecordedJob struct {
	Arrive   time.Duration
	Template int
	Runtime  time.Duration
}

// Prepare fills the defaults of a scenario built in code and validates it,
// as [ParseScenario] does for a file. Errors wrap [ErrScenario].
func Prepare(s *Scenario) error {
	s.defaults()
	return s.validate()
}

// SetRecordedJobs makes jobs the scenario's recorded jobs, in place of a
// trace file's; they join the sampled ones. Arrivals must lie in
// [0, Duration) and templates index Jobs.
func (s *Scenario) SetRecordedJobs(jobs []RecordedJob) {
	s.traceJobs = make([]traceJob, 0, len(jobs))
	for _, j := range jobs {
		s.traceJobs = append(s.traceJobs, traceJob{arrive: j.Arrive, template: j.Template, runtime: max(j.Runtime, time.Millisecond)})
	}
}

func (s *Scenario) hooksOrNew() *vkHooks {
	if s.hooks == nil {
		s.hooks = &vkHooks{}
	}
	return s.hooks
}

// SetVKPolicy makes fn adjust the core's policy after the scenario's
// tenants and knobs are applied (tenant i is TenantID i+1, template i
// RunnerID i+1).
func (s *Scenario) SetVKPolicy(fn func(*sched.Policy)) { s.hooksOrNew().policy = fn }

// AddVKEvents makes the vk run step evs at their times (node i is NodeID
// i+1). A NodeReport whose state is not ready keeps new work off a node;
// its running jobs go on.
func (s *Scenario) AddVKEvents(evs ...TimedEvent) {
	h := s.hooksOrNew()
	h.events = append(h.events, evs...)
}

// SampleVKWaits calls fn every `every` of virtual time with the reason
// each waiting ticket of the vk run waits for, by its runner's template.
func (s *Scenario) SampleVKWaits(every time.Duration, fn func(at time.Duration, template int, why sched.Reason)) {
	h := s.hooksOrNew()
	h.sampleEvery, h.sample = every, fn
}

// ObserveVK calls fn after every step of the vk run's core with the event
// and the actions it produced (as the hub's driver hands them to its
// workload trace). fn must not keep acts.
func (s *Scenario) ObserveVK(fn func(at time.Duration, ev sched.Event, acts []sched.Action)) {
	s.hooksOrNew().observe = fn
}

// observeStep runs the step observer, if any.
func (h *vkHooks) observeStep(at time.Duration, ev sched.Event, acts []sched.Action) {
	if h != nil && h.observe != nil {
		h.observe(at, ev, acts)
	}
}

// Workload returns the jobs the report's policies ran, by ID.
func (rep *Report) Workload() []Job { return slices.Clone(rep.jobs) }

// applyPolicy runs the policy hook, if any.
func (h *vkHooks) applyPolicy(p *sched.Policy) {
	if h != nil && h.policy != nil {
		h.policy(p)
	}
}

// start schedules the hooks' events and samples on the vk run.
func (h *vkHooks) start(v *vkRun) {
	if h == nil {
		return
	}
	for _, te := range h.events {
		ev := te.Event
		v.w.eng.at(te.At, func() { v.step(ev) })
	}
	if h.sample == nil || h.sampleEvery <= 0 {
		return
	}
	var look func()
	look = func() {
		if v.w.m.ended == len(v.w.jobs) {
			return
		}
		for _, id := range v.core.WaitingTickets() {
			l := v.loops[id]
			tv, ok := v.core.Ticket(id)
			if l == nil || !ok {
				continue
			}
			h.sample(v.w.eng.now, l.tmpl, tv.Wait)
		}
		v.w.eng.after(h.sampleEvery, look)
	}
	v.w.eng.at(h.sampleEvery, look)
}
