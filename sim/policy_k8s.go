package sim

import (
	"context"
	"slices"
	"time"
)

// k8sMode selects which Kubernetes baseline runK8s models.
type k8sMode int

const (
	k8sAcceptWait k8sMode = iota // accept-then-wait (K8S-03)
	k8sQuota                     // quota-margin (K8S-01..12)
	k8sLease                     // k8s-lease, the exact alternative (K8S-13)
)

// k8sRun models gitlab-runner's Kubernetes executor: per runner (job
// template) a deployment of replicas, each with request_concurrency request
// slots polling GitLab every check_interval; a taken job becomes a pod that
// the Kubernetes scheduler binds when a node has room.
//
//   - accept-then-wait (K8S-03): a replica requests while it holds fewer
//     than concurrent jobs, room or not; a pod not bound within
//     poll_timeout fails its job (GitLab cannot requeue it).
//   - quota-margin (K8S-01..12): before each request a slot checks
//     used + in_flight + margin < hard on the namespace's ResourceQuota
//     (pods, requests.cpu, requests.memory; in_flight is its replica's jobs
//     without a pod yet, K8S-02); admission rejects a pod over hard and its
//     job fails (K8S-08), and under a requests.memory quota any pod without
//     a memory request (K8S-12). hard is the fleet's full capacity (K8S-11),
//     so an admitted pod eventually binds.
//   - k8s-lease (K8S-13): before each request a slot takes a Lease for the
//     job, granted atomically by the API server only while the leases'
//     sum stays within hard (no margin); the holder renews it while the
//     job is pending or running and deletes it when the request comes back
//     empty or the job ends; a sweeper deletes leases whose holder stopped
//     renewing. The namespace keeps the same quota, which admission still
//     enforces: it never rejects a pod for room, because the leases never
//     exceed hard.
type k8sRun struct {
	w      *world
	mode   k8sMode
	quota  bool // the namespace quota is enforced (quota-margin, k8s-lease)
	mem    bool // the quota has requests.memory (K8S-12)
	margin int
	gl     gitlabQueues
	pend   *shapeQueues
	idx    *freeIndex
	podSeq int
	podOf  []int // per job: creation order of its pod, -1 none

	used     res // quota usage: pods admitted and not ended
	usedPods int
	hard     res
	hardPods int

	owner   map[int]*replica // job → its replica, while it has a pod
	running map[int]*simNode // job → its node, while its pod runs
	// inFlight is every replica's jobs without a pod (no manager sees
	// this sum); overshoot tracks how far usedPods + inFlight went past
	// hard − margin, the room the managers meant to leave (K8S-07).
	inFlight int

	// k8s-lease
	leased     res // sum of live leases
	leasedPods int
	leaseOf    map[int]*lease // job → its lease, until the job ends
	orphans    []*lease       // leases of crashed holders, until swept
	apiCalls   int            // quota gets or lease calls (Result.KubeAPICalls)
	swept      int            // leases the sweeper deleted
	sweeps     []sweepRec     // every sweep delete, for tests

	pending bool
	overWin time.Duration
	overRun int
}

type replica struct {
	tmpl     int
	held     int // jobs taken, not ended
	inFlight int // jobs taken, no pod yet
	from, to time.Duration
	dead     bool     // crashed (baseline crash_at)
	leases   []*lease // k8s-lease: its live leases
}

func (r *replica) active(now time.Duration) bool { return now >= r.from && now < r.to }

// sweepRec is one lease the sweeper deleted: when it expired, when it went.
type sweepRec struct{ expires, at time.Duration }

// lease is one k8s-lease Lease object: one job's (or one job request's)
// exact share of hard.
type lease struct {
	r       *replica
	amt     res // cpus and memory counted against hard (disk: none)
	created time.Duration
	idle    bool          // counted as held-idle: no pod of it is running
	stale   bool          // its holder crashed; counted in the meter's stale lease area
	expires time.Duration // stale: last renewal + lease_duration
	gone    bool
}

func runK8s(ctx context.Context, w *world, mode k8sMode, margin int) (*k8sRun, error) {
	b := w.s.Baseline
	k := &k8sRun{w: w, mode: mode, quota: mode != k8sAcceptWait, mem: b.quotaMemory(), margin: margin, gl: newGitlabQueues(len(w.s.Jobs)),
		pend: newShapeQueues(len(w.s.Jobs)), idx: newFreeIndex(w.nodes), podOf: make([]int, len(w.jobs)),
		hardPods: b.QuotaPods, owner: map[int]*replica{}, running: map[int]*simNode{}, leaseOf: map[int]*lease{}}
	for i := range k.podOf {
		k.podOf[i] = -1
	}
	for _, n := range w.nodes {
		k.hard = k.hard.add(n.capacity)
	}
	never := w.end + time.Hour
	start := func(r *replica) {
		for range b.RequestConcurrency {
			phase := r.from + time.Duration(w.rng.Int64N(int64(b.CheckInterval.Duration)))
			w.eng.at(phase, func() { k.slot(r) })
		}
	}
	var all [][]*replica
	for ti := range w.s.Jobs {
		var reps []*replica
		for range b.Replicas {
			reps = append(reps, &replica{tmpl: ti, to: never})
		}
		if b.RolloutFor.Duration > 0 {
			// maxSurge 100%: the new set is Ready before the old drains
			for _, r := range reps {
				r.to = b.RolloutAt.Duration + b.RolloutFor.Duration
			}
			for range b.Replicas {
				reps = append(reps, &replica{tmpl: ti, from: b.RolloutAt.Duration, to: never})
			}
		}
		for _, r := range reps {
			start(r)
		}
		all = append(all, reps)
	}
	if at := b.CrashAt.Duration; at > 0 {
		for _, reps := range all {
			i := slices.IndexFunc(reps, func(r *replica) bool { return r.active(at) })
			if i < 0 {
				continue
			}
			r := reps[i]
			// the Deployment restarts the container: a new process that
			// knows none of the old one's jobs or leases
			repl := &replica{tmpl: r.tmpl, from: at + b.RestartAfter.Duration, to: r.to}
			r.to = at
			w.eng.at(at, func() { k.crash(r) })
			start(repl)
		}
	}
	if mode == k8sLease {
		var sweep func()
		sweep = func() {
			k.sweep()
			w.eng.after(b.LeaseSweep.Duration, sweep)
		}
		w.eng.at(b.LeaseSweep.Duration, sweep)
	}
	w.scheduleArrivals(func(j int) { k.gl.push(w.jobs[j].Template, j) })
	return k, w.runUntilDone(ctx)
}

// slot is one request slot's turn: check, maybe request, and come back.
func (k *k8sRun) slot(r *replica) {
	w := k.w
	b := w.s.Baseline
	now := w.eng.now
	if !r.active(now) {
		return // drained (K8S-06) or crashed replicas stop requesting
	}
	retry := func() {
		// next feed within check_interval, jittered as gitlab-runner's
		// feeder spreads runners (K8S-05: all see a freed slot within
		// about a second)
		w.eng.after(b.CheckInterval.Duration/2+time.Duration(w.rng.Int64N(int64(b.CheckInterval.Duration))), func() { k.slot(r) })
	}
	var l *lease
	delay := time.Duration(0)
	switch k.mode {
	case k8sAcceptWait:
		if r.held >= b.Concurrent {
			retry()
			return
		}
	case k8sQuota:
		k.apiCalls++ // get resourcequotas
		if !k.check(r) {
			retry()
			return
		}
	case k8sLease:
		if l = k.take(r); l == nil {
			retry()
			return
		}
		delay = b.APILatency.Duration
	}
	w.m.gitlabRequests++
	w.eng.after(delay+w.s.GitLab.RoundTrip.Sample(w.rng), func() {
		k.gl.request(&w.eng, r.tmpl, w.s.GitLab.LongPoll.Duration, w.s.GitLab.RoundTrip.Sample(w.rng)/2, func(j int, ok, _ bool) { k.answer(r, l, j, ok, retry) })
	})
}

// answer is GitLab's answer to a slot's job request; l is the request's
// lease (k8s-lease) or nil.
func (k *k8sRun) answer(r *replica, l *lease, j int, ok bool, retry func()) {
	w := k.w
	b := w.s.Baseline
	if r.dead {
		// the request's connection died with its manager: GitLab never
		// handed the job out (its lease, if any, is already an orphan)
		if ok {
			k.gl.requeue(r.tmpl, j)
		}
		return
	}
	if !ok {
		w.m.emptyAnswers++
		if l != nil {
			k.release(l)
		}
		retry()
		return
	}
	r.held++
	r.inFlight++
	k.inFlight++
	if l != nil {
		k.leaseOf[j] = l
	}
	if k.quota && k.hardPods > 0 {
		w.m.overshoot = max(w.m.overshoot, k.usedPods+k.inFlight-(k.hardPods-k.margin))
	}
	w.eng.after(b.PodCreate.Duration, func() { k.createPod(r, j) })
	// a runner that got a job asks again at once
	w.eng.after(0, func() { k.slot(r) })
}

// podMem is the memory a runner's pods request (K8S-11's per-pod amount):
// the envelope's, or none when the runner sets no memory request (K8S-12).
func (k *k8sRun) podMem(tmpl int) int64 {
	if !k.w.s.Jobs[tmpl].setsMemoryRequest() {
		return 0
	}
	return k.w.env[tmpl].memGiB
}

// check is K8S-01's used + in_flight + margin < hard, for pods and for
// requests.cpu and requests.memory with the runner's per-pod requests.
func (k *k8sRun) check(r *replica) bool {
	env := k.w.env[r.tmpl]
	if k.hardPods > 0 && k.usedPods+r.inFlight+k.margin >= k.hardPods {
		return false
	}
	need := int64(r.inFlight + k.margin + 1)
	return k.used.cpus+need*env.cpus <= k.hard.cpus && (!k.mem || k.used.memGiB+need*k.podMem(r.tmpl) <= k.hard.memGiB)
}

// take asks the API server for a lease for one job of r's runner: granted
// atomically when every live lease plus this one fits hard (pods,
// requests.cpu, requests.memory; no margin), refused otherwise. Either way
// it is one API call.
func (k *k8sRun) take(r *replica) *lease {
	w := k.w
	k.apiCalls++
	amt := res{cpus: w.env[r.tmpl].cpus}
	if k.mem {
		amt.memGiB = k.podMem(r.tmpl)
	}
	if (k.hardPods > 0 && k.leasedPods+1 > k.hardPods) || k.leased.cpus+amt.cpus > k.hard.cpus || k.leased.memGiB+amt.memGiB > k.hard.memGiB {
		return nil
	}
	l := &lease{r: r, amt: amt, created: w.eng.now}
	k.leased = k.leased.add(amt)
	k.leasedPods++
	r.leases = append(r.leases, l)
	k.setIdle(l, true)
	return l
}

// renewals is how many times a lease created at from was renewed by now.
func (k *k8sRun) renewals(l *lease, now time.Duration) int {
	return int((now - l.created) / k.w.s.Baseline.LeaseRenew.Duration)
}

// release is the holder deleting its lease (an empty answer, the job's
// end): its renewals and the delete are API calls.
func (k *k8sRun) release(l *lease) {
	if l.gone || l.stale {
		return
	}
	now := k.w.eng.now
	k.apiCalls += 1 + k.renewals(l, now)
	if i := slices.Index(l.r.leases, l); i >= 0 {
		l.r.leases = slices.Delete(l.r.leases, i, i+1)
	}
	k.free(l)
}

// free returns a lease's share of hard.
func (k *k8sRun) free(l *lease) {
	l.gone = true
	k.leased = k.leased.sub(l.amt)
	k.leasedPods--
	k.setIdle(l, false)
	if l.stale {
		k.w.m.stale(k.w.eng.now, -l.amt.cpus)
	}
}

// setIdle counts a lease's vCPUs as held-idle (leased, no pod running) or
// not.
func (k *k8sRun) setIdle(l *lease, idle bool) {
	if l.idle == idle {
		return
	}
	l.idle = idle
	if idle {
		k.w.m.hold(k.w.eng.now, l.amt.cpus)
	} else {
		k.w.m.unhold(k.w.eng.now, l.amt.cpus)
	}
}

// endJob is a job of r ending while r lives: its lease is deleted.
func (k *k8sRun) endJob(j int) {
	if l := k.leaseOf[j]; l != nil {
		delete(k.leaseOf, j)
		k.release(l)
	}
}

// sweep is the lease sweeper's turn: one list, and a delete for every
// lease not renewed for lease_duration.
func (k *k8sRun) sweep() {
	now := k.w.eng.now
	k.apiCalls++
	keep := k.orphans[:0]
	for _, l := range k.orphans {
		switch {
		case l.gone:
		case l.expires <= now:
			k.apiCalls++
			k.swept++
			k.sweeps = append(k.sweeps, sweepRec{expires: l.expires, at: now})
			k.free(l)
		default:
			keep = append(keep, l)
		}
	}
	clear(k.orphans[len(keep):])
	k.orphans = keep
}

// crash kills replica r's manager: the jobs it holds fail and their pods
// are deleted (nodes and quota free at once: the quota needs no cleanup),
// while its leases are left unrenewed for the sweeper.
func (k *k8sRun) crash(r *replica) {
	w := k.w
	now := w.eng.now
	r.dead = true
	var js []int
	for j, o := range k.owner {
		if o == r {
			js = append(js, j)
		}
	}
	slices.Sort(js) // map order is random; the meter's sums are not
	env := w.env[r.tmpl]
	for _, j := range js {
		delete(k.owner, j)
		r.held--
		if n, ok := k.running[j]; ok {
			delete(k.running, j)
			k.idx.give(n, env)
		} else {
			k.pend.remove(r.tmpl, j)
		}
		k.endQuota(env)
		w.m.kill(now, j, r.tmpl, FailManagerCrash)
		delete(k.leaseOf, j)
	}
	renew := w.s.Baseline.LeaseRenew.Duration
	for _, l := range r.leases {
		k.apiCalls += k.renewals(l, now)
		l.expires = l.created + (now-l.created)/renew*renew + w.s.Baseline.LeaseDuration.Duration
		l.stale = true
		k.setIdle(l, true)
		w.m.stale(now, l.amt.cpus)
		k.orphans = append(k.orphans, l)
	}
	r.leases = nil
	if len(js) > 0 {
		k.schedule()
	}
}

func (k *k8sRun) createPod(r *replica, j int) {
	w := k.w
	r.inFlight--
	k.inFlight--
	if r.dead {
		// the manager died before creating the pod
		r.held--
		delete(k.leaseOf, j)
		w.m.fail(w.eng.now, j, FailManagerCrash)
		return
	}
	env := w.env[r.tmpl]
	if k.quota {
		if k.mem && !w.s.Jobs[r.tmpl].setsMemoryRequest() {
			// K8S-12: a requests.memory quota rejects any pod that sets
			// no memory request, whatever the room
			r.held--
			k.endJob(j)
			w.m.fail(w.eng.now, j, FailQuotaNoRequest)
			return
		}
		if (k.hardPods > 0 && k.usedPods+1 > k.hardPods) || k.used.cpus+env.cpus > k.hard.cpus || (k.mem && k.used.memGiB+env.memGiB > k.hard.memGiB) {
			r.held--
			k.endJob(j)
			w.m.fail(w.eng.now, j, FailQuotaRejected)
			if w.eng.now-k.overWin >= w.s.Baseline.QuotaRefresh.Duration {
				k.overWin, k.overRun = w.eng.now, 0
			}
			k.overRun++
			w.m.peakOver = max(w.m.peakOver, k.overRun)
			return
		}
		k.usedPods++
		k.used = k.used.add(env)
	}
	k.podSeq++
	k.podOf[j] = k.podSeq
	k.owner[j] = r
	k.pend.push(r.tmpl, j)
	w.eng.after(w.s.Baseline.PollTimeout.Duration, func() {
		if k.pend.remove(r.tmpl, j) {
			r.held--
			delete(k.owner, j)
			k.endQuota(env)
			k.endJob(j)
			w.m.fail(w.eng.now, j, FailPollTimeout)
		}
	})
	k.schedule()
}

func (k *k8sRun) endQuota(env res) {
	if k.quota {
		k.usedPods--
		k.used = k.used.sub(env)
	}
}

func (k *k8sRun) schedule() {
	if k.pending {
		return
	}
	k.pending = true
	k.w.eng.after(0, func() {
		k.pending = false
		w := k.w
		backfill(w, k.pend, k.idx, false, func(j int) int { return k.podOf[j] }, func(j, tmpl int, n *simNode) {
			w.m.started(w.eng.now, j, tmpl)
			if l := k.leaseOf[j]; l != nil {
				k.setIdle(l, false)
			}
			k.running[j] = n
			env := w.env[tmpl]
			w.eng.after(w.jobs[j].Runtime, func() {
				if k.running[j] != n {
					return // its manager crashed and the pod was deleted
				}
				delete(k.running, j)
				k.idx.give(n, env)
				k.endQuota(env)
				if r := k.owner[j]; r != nil {
					r.held--
					delete(k.owner, j)
				}
				k.endJob(j)
				w.m.finished(w.eng.now, j, tmpl)
				k.schedule()
			})
		})
	})
}
