package sim

import (
	"context"
	"slices"
	"time"

	"github.com/tidwall/btree"
	"github.com/vk-ci/vk/sched"
)

const gib = int64(1) << 30

// vkRun drives the real sched.Core the way the hub does (BS-01, BS-06): the
// relay's request loops queue tickets and long-poll them, nodes answer
// offers and starts from their ledger, GitLab answers job requests after a
// round trip, and every result goes back into Core.Step as an event.
type vkRun struct {
	w    *world
	p    VKParams
	core *sched.Core
	base time.Time
	gl   gitlabQueues

	nextTicket sched.TicketID
	loops      map[sched.TicketID]*vkLoop
	resv       map[sched.ReservationID]vkRes
	jobNode    map[sched.JobID]*simNode
	// for heartbeats (RSESS-04): each runner's loops, and the admission of
	// each submitted job until it is settled
	runnerLoops map[sched.RunnerID][]*vkLoop
	jobAdms     map[sched.RunnerID]*btree.BTreeG[sched.AdmissionID] // sorted, for heartbeats
	admOf       []sched.AdmissionID                                 // per workload job: its admission
	tickAt      time.Duration                                       // earliest scheduled tick, -1 none
	// with GitLab's long polling, as vk-gitlab: each runner's one loop
	// whose request GitLab may hold, the loops waiting for it (holding
	// nothing), and whether the runner's last answer was empty
	polls  map[sched.RunnerID]*vkLoop
	parked map[sched.RunnerID][]*vkLoop
	idle   map[sched.RunnerID]bool

	ended   map[string]int // AdmissionEnded reasons, when counting (tests)
	steps   int
	wall    time.Duration
	invErrs []string
	check   bool
}

type vkRes struct {
	node    *simNode
	env     res
	started bool
}

// vkLoop is one of a runner's request_concurrency loops (vk-gitlab).
type vkLoop struct {
	tmpl   int
	runner sched.RunnerID
	ticket sched.TicketID
	// asking is the admission whose GitLab request is out, 0 when none;
	// the relay renews its reservation meanwhile (API-29).
	asking sched.AdmissionID
}

func toResources(r res) sched.Resources {
	return sched.Resources{CPUs: r.cpus, MemBytes: r.memGiB * gib, DiskBytes: r.diskGiB * gib}
}

func fromResources(r sched.Resources) res {
	return res{cpus: r.CPUs, memGiB: r.MemBytes / gib, diskGiB: r.DiskBytes / gib}
}

func runVK(ctx context.Context, w *world, p VKParams, check bool) (*vkRun, error) {
	return runVKWith(ctx, w, p, check, false)
}

func runVKWith(ctx context.Context, w *world, p VKParams, check, countEnded bool) (*vkRun, error) {
	s := w.s
	pol := sched.Policy{
		Tenants:            map[sched.TenantID]sched.TenantPolicy{},
		ProductionRunners:  map[sched.RunnerID]bool{},
		BusySecs:           p.BusySecs,
		ProbeLimit:         p.ProbeLimit,
		BackoffInitialSecs: p.BackoffInitialSecs,
		BackoffMaxSecs:     p.BackoffMaxSecs,
		LeaseSecs:          p.LeaseSecs,
		// wide jobs (BS-20..23): packing and drain reservations; zero
		// keeps sched's defaults
		PackAboveUtilization: p.PackAboveUtilization,
		DrainsPerPool:        p.DrainsPerPool,
		WideFraction:         p.WideFraction,
		DrainMaxHold:         p.DrainMaxHold.Duration,
		// the sim's fleets may exceed API-20's defaults; the bound per
		// runner (request_concurrency) still holds
		TicketLimit: 1 << 30, RelayTicketLimit: 1 << 30,
	}
	for i, t := range s.Tenants {
		pol.Tenants[sched.TenantID(i+1)] = sched.TenantPolicy{Weight: t.Weight, Cap: t.Cap}
	}
	for i, j := range s.Jobs {
		if j.Production {
			pol.ProductionRunners[sched.RunnerID(i+1)] = true
		}
	}
	s.hooks.applyPolicy(&pol)
	v := &vkRun{w: w, p: p, core: sched.New(pol, s.Seed), base: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		gl: newGitlabQueues(len(s.Jobs)), loops: map[sched.TicketID]*vkLoop{},
		resv: map[sched.ReservationID]vkRes{}, jobNode: map[sched.JobID]*simNode{}, tickAt: -1,
		runnerLoops: map[sched.RunnerID][]*vkLoop{}, jobAdms: map[sched.RunnerID]*btree.BTreeG[sched.AdmissionID]{},
		admOf: make([]sched.AdmissionID, len(w.jobs)), check: check,
		polls: map[sched.RunnerID]*vkLoop{}, parked: map[sched.RunnerID][]*vkLoop{}, idle: map[sched.RunnerID]bool{}}
	if countEnded {
		v.ended = map[string]int{}
	}
	for _, n := range w.nodes {
		v.step(sched.NodeReport{Node: sched.NodeID(n.id + 1), Capacity: toResources(n.capacity),
			Pools: []string{n.pool}, Labels: n.labels, MaxConcurrency: n.maxConc, State: sched.NodeReady})
	}
	// one relay per tenant, one runner per job template
	for ti := range s.Tenants {
		var rs []sched.RunnerInfo
		for i, j := range s.Jobs {
			if w.m.tenantOf[i] != ti {
				continue
			}
			rs = append(rs, sched.RunnerInfo{Runner: sched.RunnerID(i + 1), Tenant: sched.TenantID(ti + 1),
				Placement:          sched.Placement{Pool: j.Pool, Envelope: toResources(w.env[i])},
				RequestConcurrency: p.RequestConcurrency})
		}
		rl := sched.RelayID(ti + 1)
		v.step(sched.RelayUp{Relay: rl, Session: 1})
		v.step(sched.RelayInventory{Relay: rl, Concurrent: p.RelayConcurrent, Runners: rs})
		v.step(sched.RelayHeartbeat{Relay: rl})
	}
	w.scheduleArrivals(func(j int) { v.gl.push(w.jobs[j].Template, j) })
	for i := range s.Jobs {
		for range p.RequestConcurrency {
			l := &vkLoop{tmpl: i, runner: sched.RunnerID(i + 1)}
			v.runnerLoops[l.runner] = append(v.runnerLoops[l.runner], l)
			if v.jobAdms[l.runner] == nil {
				v.jobAdms[l.runner] = btree.NewBTreeGOptions(func(a, b sched.AdmissionID) bool { return a < b }, btree.Options{NoLocks: true})
			}
			w.eng.at(0, func() { v.queue(l) })
		}
	}
	if every := p.HeartbeatEvery.Duration; every > 0 {
		for ti := range s.Tenants {
			var beat func()
			beat = func() {
				v.heartbeat(ti)
				w.eng.after(every, beat)
			}
			w.eng.at(every, beat)
		}
	}
	s.hooks.start(v)
	err := w.runUntilDone(ctx)
	return v, err
}

// step feeds one event to the Core at the engine's time and carries out
// the actions. It returns the verdict, if any.
func (v *vkRun) step(ev sched.Event) sched.VerdictCode {
	now := v.w.eng.now
	t0 := time.Now()
	acts := v.core.Step(v.base.Add(now), ev)
	v.wall += time.Since(t0)
	v.steps++
	acts = append([]sched.Action(nil), acts...) // the Core reuses its slice
	v.w.s.hooks.observeStep(now, ev, acts)
	if v.check {
		v.invErrs = append(v.invErrs, v.core.CheckInvariants()...)
	}
	verdict := sched.VerdictOK
	for _, a := range acts {
		v.do(a, &verdict)
	}
	if dl, ok := v.core.NextDeadline(); ok {
		at := max(dl.Sub(v.base), now)
		// the hub ticks every tick_ms: a deadline fires at the next tick
		if te := v.p.TickEvery.Duration; te > 0 {
			at = (at + te - 1) / te * te
		}
		if v.tickAt < 0 || at < v.tickAt {
			v.tickAt = at
			v.w.eng.at(at, v.tick)
		}
	}
	return verdict
}

func (v *vkRun) tick() {
	if v.w.eng.now < v.tickAt {
		return // superseded by an earlier tick that rescheduled
	}
	v.tickAt = -1
	v.step(sched.Tick{})
}

func (v *vkRun) lat() time.Duration { return v.p.HubLatency.Duration }
func (v *vkRun) ans() time.Duration {
	return v.p.HubLatency.Duration + v.p.NodeAnswer.Duration
}

func (v *vkRun) do(a sched.Action, verdict *sched.VerdictCode) {
	w := v.w
	switch a := a.(type) {
	case sched.Verdict:
		*verdict = a.Code
	case sched.Offer:
		w.eng.after(v.ans(), func() {
			n := w.nodes[a.Node-1]
			env := fromResources(a.Envelope)
			if !n.admits(env) {
				v.step(sched.OfferReplied{Node: a.Node, Reservation: a.Reservation, Reason: "insufficient_capacity"})
				return
			}
			n.used = n.used.add(env)
			n.count++
			v.resv[a.Reservation] = vkRes{node: n, env: env}
			w.m.hold(w.eng.now, env.cpus)
			v.step(sched.OfferReplied{Node: a.Node, Reservation: a.Reservation, Accepted: true, LeaseSecs: a.LeaseSecs})
		})
	case sched.Release:
		w.eng.after(v.lat(), func() { v.dropRes(a.Reservation) })
	case sched.Renew:
		w.eng.after(v.ans(), func() {
			if _, ok := v.resv[a.Reservation]; ok {
				v.step(sched.Renewed{Reservation: a.Reservation, RemainingSecs: a.LeaseSecs})
			} else {
				v.step(sched.LeaseGone{Reservation: a.Reservation, Why: "unknown"})
			}
		})
	case sched.Grant:
		l := v.loops[a.Ticket]
		if l == nil {
			return
		}
		delete(v.loops, a.Ticket)
		w.eng.after(v.lat(), func() { v.claim(l, a) })
	case sched.Expire:
		if l := v.loops[a.Ticket]; l != nil {
			delete(v.loops, a.Ticket)
			w.eng.after(v.lat(), func() { v.queue(l) })
		}
	case sched.Start:
		w.eng.after(v.ans(), func() { v.start(a) })
	case sched.EndJob:
		reason := FailNoCapacity
		if a.Failure == "lost" {
			reason = FailLost
		}
		w.m.fail(w.eng.now, int(a.Job-1), reason)
	case sched.AdmissionEnded:
		if v.ended != nil {
			v.ended[a.Reason]++
		}
	case sched.CancelJob:
		// the sim's nodes never hold jobs the Core gave up on; admissions
		// need no persisted record here
	}
}

func (v *vkRun) dropRes(id sched.ReservationID) {
	r, ok := v.resv[id]
	if !ok || r.started {
		return
	}
	delete(v.resv, id)
	r.node.used = r.node.used.sub(r.env)
	r.node.count--
	v.w.m.unhold(v.w.eng.now, r.env.cpus)
}

// queue makes a loop queue a fresh ticket and long-poll it.
func (v *vkRun) queue(l *vkLoop) {
	v.nextTicket++
	id := v.nextTicket
	l.ticket = id
	v.loops[id] = l
	switch v.step(sched.TicketQueued{Ticket: id, Runner: l.runner}) {
	case sched.VerdictPending, sched.VerdictOK:
		v.w.eng.after(v.p.PollEvery.Duration, func() { v.poll(l, id) })
	default: // unavailable or refused: retry in a second, as the relay does
		delete(v.loops, id)
		v.w.eng.after(time.Second, func() { v.queue(l) })
	}
}

func (v *vkRun) poll(l *vkLoop, id sched.TicketID) {
	if v.loops[id] != l {
		return // granted or expired meanwhile
	}
	if v.step(sched.TicketPolled{Ticket: id}) == sched.VerdictGone {
		if v.loops[id] == l {
			delete(v.loops, id)
			v.w.eng.after(v.lat(), func() { v.queue(l) })
		}
		return
	}
	if v.loops[id] == l {
		v.w.eng.after(v.p.PollEvery.Duration, func() { v.poll(l, id) })
	}
}

// claim takes the grant, asks GitLab for a job and reports the outcome.
func (v *vkRun) claim(l *vkLoop, g sched.Grant) {
	w := v.w
	if v.step(sched.Claimed{Admission: g.Admission}) != sched.VerdictOK {
		v.queue(l)
		return
	}
	// With long polling, a request sent after an empty answer is one
	// GitLab may hold (it carries the runner's last_update); vk-gitlab
	// lets one such request per runner out and gives the other loops'
	// grants back until it comes back. Other requests reach Rails, which
	// answers at once.
	var longPoll time.Duration
	if lp := w.s.GitLab.LongPoll.Duration; lp > 0 && v.idle[l.runner] {
		if v.polls[l.runner] != nil {
			v.step(sched.Outcome{Admission: g.Admission, Kind: sched.OutcomeReleased})
			v.parked[l.runner] = append(v.parked[l.runner], l)
			return
		}
		v.polls[l.runner], longPoll = l, lp
	}
	w.m.gitlabRequests++
	l.asking = g.Admission
	v.renewLater(l, g)
	w.eng.after(w.s.GitLab.RoundTrip.Sample(w.rng), func() {
		v.gl.request(&w.eng, l.tmpl, longPoll, w.s.GitLab.RoundTrip.Sample(w.rng)/2, func(j int, ok, held bool) { v.answer(l, g, j, ok, held) })
	})
}

// pollEnded ends runner r's long poll when l's request was it: the loops
// that waited for it queue again.
func (v *vkRun) pollEnded(l *vkLoop) {
	if v.polls[l.runner] != l {
		return
	}
	delete(v.polls, l.runner)
	for _, p := range v.parked[l.runner] {
		v.w.eng.after(v.lat(), func() { v.queue(p) })
	}
	v.parked[l.runner] = nil
}

// renewLater renews the grant's reservation every third of its lease while
// the loop's GitLab request is out, as vk-gitlab does (API-29).
func (v *vkRun) renewLater(l *vkLoop, g sched.Grant) {
	every := time.Duration(max(g.LeaseSecs, 3)) * time.Second / 3
	v.w.eng.after(every, func() {
		if l.asking != g.Admission {
			return
		}
		if v.step(sched.RenewRequested{Admission: g.Admission}) == sched.VerdictOK {
			v.renewLater(l, g)
		}
	})
}

// answer is GitLab's answer to a loop's job request; held says Workhorse
// held it and answered 204 itself (the queue changed or the long poll ran
// out), without X-GitLab-Last-Update.
func (v *vkRun) answer(l *vkLoop, g sched.Grant, j int, ok, held bool) {
	w := v.w
	l.asking = 0
	v.pollEnded(l)
	v.idle[l.runner] = !ok
	{
		if !ok {
			w.m.emptyAnswers++
			// a held request's end is Workhorse's own 204 (the queue
			// changed or the long poll ran out, Rails not asked):
			// vk-gitlab reports it released, so the runner is not backed
			// off for it, and its next request reaches Rails
			kind := sched.OutcomeEmpty
			if held {
				kind = sched.OutcomeReleased
			}
			v.step(sched.Outcome{Admission: g.Admission, Kind: kind})
			w.eng.after(v.lat(), func() { v.queue(l) })
			return
		}
		v.step(sched.Outcome{Admission: g.Admission, Kind: sched.OutcomeJob})
		t := w.s.Jobs[l.tmpl]
		var images []string
		if t.Image != "" {
			images = []string{t.Image}
		}
		v.jobAdms[l.runner].Set(g.Admission)
		v.admOf[j] = g.Admission
		v.step(sched.JobSubmitted{Job: sched.JobID(j + 1), Runner: l.runner, Admission: g.Admission,
			Reservation: g.Reservation, Project: t.Project, Ref: "main", Images: images, Name: jobName(t)})
		w.eng.after(v.lat(), func() { v.queue(l) })
	}
}

// start is the node receiving a start: on its reservation, or fresh room.
func (v *vkRun) start(a sched.Start) {
	w := v.w
	n := w.nodes[a.Node-1]
	j := int(a.Job - 1)
	tmpl := w.jobs[j].Template
	if r, ok := v.resv[a.Reservation]; ok && a.Reservation != 0 && r.node == n {
		r.started = true
		v.resv[a.Reservation] = r
		w.m.unhold(w.eng.now, r.env.cpus)
	} else {
		env := w.env[tmpl]
		if !n.admits(env) {
			v.step(sched.JobStartReplied{Node: a.Node, Job: a.Job, Reason: "insufficient_capacity"})
			return
		}
		n.used = n.used.add(env)
		n.count++
	}
	v.jobNode[a.Job] = n
	w.m.started(w.eng.now, j, tmpl)
	v.step(sched.JobStartReplied{Node: a.Node, Job: a.Job, Accepted: true})
	w.eng.after(w.jobs[j].Runtime, func() {
		if r, ok := v.resv[a.Reservation]; ok && a.Reservation != 0 && r.node == n {
			delete(v.resv, a.Reservation)
		}
		env := w.env[tmpl]
		n.used = n.used.sub(env)
		n.count--
		delete(v.jobNode, a.Job)
		w.m.finished(w.eng.now, j, tmpl)
		// the job's name and wall time feed the core's runtime
		// statistics, which predict which node empties first (BS-23)
		v.step(sched.JobFinished{Job: a.Job, Name: jobName(w.s.Jobs[tmpl]), Wall: w.jobs[j].Runtime})
		adm := v.jobAdm(a.Job)
		w.eng.after(v.p.SettleDelay.Duration, func() {
			v.jobAdms[sched.RunnerID(tmpl+1)].Delete(adm)
			v.step(sched.JobSettled{Job: a.Job})
		})
	})
}

// jobName is the name the Core keeps runtime statistics under (BS-23):
// project path and job name, as the hub names GitLab jobs.
func jobName(t JobTemplate) string { return t.Project + "/" + t.Name }

// jobAdm returns the admission a job was submitted under.
func (v *vkRun) jobAdm(id sched.JobID) sched.AdmissionID { return v.admOf[id-1] }

// heartbeat sends tenant ti's relay heartbeat: per runner, the admissions
// of its GitLab requests out and of its unsettled jobs (RSESS-04), sorted.
func (v *vkRun) heartbeat(ti int) {
	hb := sched.RelayHeartbeat{Relay: sched.RelayID(ti + 1)}
	for i := range v.w.s.Jobs {
		if v.w.m.tenantOf[i] != ti {
			continue
		}
		id := sched.RunnerID(i + 1)
		b := sched.RunnerBeat{Runner: id}
		for _, l := range v.runnerLoops[id] {
			if l.asking != 0 {
				b.RequestAdmissions = append(b.RequestAdmissions, l.asking)
			}
		}
		slices.Sort(b.RequestAdmissions) // at most request_concurrency
		if t := v.jobAdms[id]; t != nil && t.Len() > 0 {
			b.JobAdmissions = make([]sched.AdmissionID, 0, t.Len())
			t.Scan(func(a sched.AdmissionID) bool {
				b.JobAdmissions = append(b.JobAdmissions, a)
				return true
			})
		}
		hb.Runners = append(hb.Runners, b)
	}
	v.step(hb)
}
