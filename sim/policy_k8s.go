package sim

import (
	"context"
	"time"
)

// k8sRun models gitlab-runner's Kubernetes executor: per runner (job
// template) a deployment of replicas, each with request_concurrency request
// slots polling GitLab every check_interval; a taken job becomes a pod that
// the Kubernetes scheduler binds when a node has room.
//
//   - accept-then-wait (K8S-03): a replica requests while it holds fewer
//     than concurrent jobs, room or not; a pod not bound within
//     poll_timeout fails its job (GitLab cannot requeue it).
//   - quota-margin (K8S-01..14): before each request a slot checks
//     used + in_flight + margin < hard on the namespace's ResourceQuota
//     (pods, requests.cpu, requests.memory; in_flight is its replica's jobs
//     without a pod yet, K8S-02); admission rejects a pod over hard and its
//     job fails (K8S-08). hard is the fleet's full capacity (K8S-11), so an
//     admitted pod eventually binds.
type k8sRun struct {
	w      *world
	quota  bool
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

	owner map[int]*replica // job → its replica, until the job ends
	// inFlight is every replica's jobs without a pod (no manager sees
	// this sum); overshoot tracks how far usedPods + inFlight went past
	// hard − margin, the room the managers meant to leave (K8S-07).
	inFlight int

	pending bool
	overWin time.Duration
	overRun int
}

type replica struct {
	tmpl     int
	held     int // jobs taken, not ended
	inFlight int // jobs taken, no pod yet
	from, to time.Duration
}

func (r *replica) active(now time.Duration) bool { return now >= r.from && now < r.to }

func runK8s(ctx context.Context, w *world, quota bool, margin int) error {
	b := w.s.Baseline
	k := &k8sRun{w: w, quota: quota, margin: margin, gl: newGitlabQueues(len(w.s.Jobs)),
		pend: newShapeQueues(len(w.s.Jobs)), idx: newFreeIndex(w.nodes), podOf: make([]int, len(w.jobs)),
		hardPods: b.QuotaPods, owner: map[int]*replica{}}
	for i := range k.podOf {
		k.podOf[i] = -1
	}
	for _, n := range w.nodes {
		k.hard = k.hard.add(n.capacity)
	}
	never := w.end + time.Hour
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
			for range b.RequestConcurrency {
				phase := r.from + time.Duration(w.rng.Int64N(int64(b.CheckInterval.Duration)))
				w.eng.at(phase, func() { k.slot(r) })
			}
		}
	}
	w.scheduleArrivals(func(j int) { k.gl.push(w.jobs[j].Template, j) })
	return w.runUntilDone(ctx)
}

// slot is one request slot's turn: check, maybe request, and come back.
func (k *k8sRun) slot(r *replica) {
	w := k.w
	b := w.s.Baseline
	now := w.eng.now
	if !r.active(now) {
		return // drained replicas stop requesting (K8S-06)
	}
	retry := func() {
		// next feed within check_interval, jittered as gitlab-runner's
		// feeder spreads runners (K8S-05: all see a freed slot within
		// about a second)
		w.eng.after(b.CheckInterval.Duration/2+time.Duration(w.rng.Int64N(int64(b.CheckInterval.Duration))), func() { k.slot(r) })
	}
	if !k.quota && r.held >= b.Concurrent {
		retry()
		return
	}
	if k.quota && !k.check(r) {
		retry()
		return
	}
	w.m.gitlabRequests++
	w.eng.after(w.s.GitLab.RoundTrip.Sample(w.rng), func() {
		k.gl.request(&w.eng, r.tmpl, w.s.GitLab.LongPoll.Duration, w.s.GitLab.RoundTrip.Sample(w.rng)/2, func(j int, ok bool) { k.answer(r, j, ok, retry) })
	})
}

// answer is GitLab's answer to a slot's job request.
func (k *k8sRun) answer(r *replica, j int, ok bool, retry func()) {
	w := k.w
	b := w.s.Baseline
	{
		if !ok {
			w.m.emptyAnswers++
			retry()
			return
		}
		r.held++
		r.inFlight++
		k.inFlight++
		if k.quota && k.hardPods > 0 {
			w.m.overshoot = max(w.m.overshoot, k.usedPods+k.inFlight-(k.hardPods-k.margin))
		}
		w.eng.after(b.PodCreate.Duration, func() { k.createPod(r, j) })
		// a runner that got a job asks again at once
		w.eng.after(0, func() { k.slot(r) })
	}
}

// check is K8S-01's used + in_flight + margin < hard, for pods and for
// requests.cpu and requests.memory with the runner's per-pod requests.
func (k *k8sRun) check(r *replica) bool {
	env := k.w.env[r.tmpl]
	if k.hardPods > 0 && k.usedPods+r.inFlight+k.margin >= k.hardPods {
		return false
	}
	need := int64(r.inFlight + k.margin + 1)
	return k.used.cpus+need*env.cpus <= k.hard.cpus && k.used.memGiB+need*env.memGiB <= k.hard.memGiB
}

func (k *k8sRun) createPod(r *replica, j int) {
	w := k.w
	r.inFlight--
	k.inFlight--
	env := w.env[r.tmpl]
	if k.quota {
		if (k.hardPods > 0 && k.usedPods+1 > k.hardPods) || k.used.cpus+env.cpus > k.hard.cpus || k.used.memGiB+env.memGiB > k.hard.memGiB {
			r.held--
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
			env := w.env[tmpl]
			w.eng.after(w.jobs[j].Runtime, func() {
				k.idx.give(n, env)
				k.endQuota(env)
				if r := k.owner[j]; r != nil {
					r.held--
					delete(k.owner, j)
				}
				w.m.finished(w.eng.now, j, tmpl)
				k.schedule()
			})
		})
	})
}
