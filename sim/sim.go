package sim

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"time"
)

// PolicyNames lists the policies the simulator knows, in report order.
var PolicyNames = []string{"vk", "pull-fifo", "accept-then-wait", "quota-margin", "k8s-lease", "greedy-backfill"}

// Options configure [Run]. The zero value of each optional field means:
// Seed 0 → the scenario's seed; Policies nil → the scenario's list, or all
// of [PolicyNames]; Progress nil → silent; Log nil → discard.
type Options struct {
	Scenario *Scenario // required
	Seed     uint64    // 0: the scenario's seed
	Policies []string  // nil: the scenario's list, or all
	// Progress receives a line per finished policy when the run has taken
	// more than two seconds of wall time so far.
	Progress io.Writer
	Log      *slog.Logger // nil: discard
	// CheckInvariants runs sched's CheckInvariants after every step of the
	// vk policy and reports violations in Result.Invariants (slow).
	CheckInvariants bool
}

// Report is the outcome of one run: every policy on the same sampled jobs.
type Report struct {
	Scenario *Scenario // as run, with the seed used
	Seed     uint64    // the seed used
	Jobs     int       // jobs in the workload
	Nodes    int       // nodes in the fleet
	CPUs     int64     // vCPUs in the fleet
	Results  []*Result // one per policy run, in PolicyNames order

	jobs []Job
}

// Result is one policy's measurements. All fields but CoreWall are a pure
// function of (scenario, seed).
type Result struct {
	// Label is the policy name, with the margin for quota-margin
	// ("quota-margin/m=12").
	Label  string
	Policy string // one of PolicyNames
	Margin int    // quota-margin's margin in pods; 0 otherwise

	Started   int            // jobs that started (and were not killed by a manager crash)
	Finished  int            // jobs that finished by the end of the run
	Unstarted int            // neither started nor failed by the end of the run
	Failed    map[string]int // by Fail* reason
	// Util is the mean CPU-weighted utilization over the measured window
	// (after the scenario's warmup), 0..1; UtilSeries the same per bucket
	// of the whole window.
	Util       float64
	UtilSeries []float64 // per Scenario.Bucket, 0..1
	// TenantSeries[t][b] is tenant t's share of the fleet's vCPUs in bucket b.
	TenantSeries [][]float64
	// TenantCPUSecs is what each tenant ran within the measured window
	// (vCPU·s, busy vCPU·s).
	TenantCPUSecs []float64
	// TemplateCPUSecs is what each job template ran within the measured
	// window; TemplateDemandCPUSecs what the jobs of each template that
	// arrived in it asked for (vCPUs × runtime), run or not.
	TemplateCPUSecs       []float64
	TemplateDemandCPUSecs []float64
	// TenantPeakJobs is the most jobs each tenant had running at once.
	TenantPeakJobs []int
	// Jain is Jain's fairness index over TenantCPUSecs[t]/weight[t] for
	// tenants that had jobs (1 is perfectly weighted-fair).
	Jain float64
	// Waits are the waits (arrival at GitLab to running) of the jobs that
	// arrived in the measured window, by job ID. A job still waiting at
	// the end of the run counts with its wait so far (to the end of the
	// drain); a failed job, or one that arrived during the warmup, is -1.
	Waits []time.Duration
	// Left marks, by job ID, the jobs left waiting at the end of the run
	// (neither started nor failed), whenever they arrived.
	Left []bool
	// HeldIdleCPUSecs: vCPU·s set aside without running a job in the
	// measured window (vk
	// reservations granted but not yet used, pulled jobs booting,
	// k8s-lease's leases without a running pod).
	HeldIdleCPUSecs float64
	// FreeWhileWaitingCPUSecs: vCPU·s free while some job waited (in the
	// measured window).
	FreeWhileWaitingCPUSecs float64
	GitLabRequests          int // job requests made (pull policies: one per job)
	EmptyAnswers            int // job requests answered without a job
	// RunSecs is the simulated time the run lasted, start to the last
	// event (warmup and drain included, as GitLabRequests counts them).
	RunSecs float64
	// PeakOvershoot is the most pods admission rejected within one quota
	// refresh interval (quota-margin).
	PeakOvershoot int
	// MarginOvershoot is, with a pods quota, the most pods admitted or in
	// flight beyond hard − margin at once: how much of the margin the
	// managers' race used (K8S-07; the sandbox saw 1-3 against 12).
	MarginOvershoot int
	// KubeAPICalls counts the Kubernetes API calls a policy makes for its
	// capacity check, pod creates aside: quota-margin one get of the
	// ResourceQuota per check (K8S-14's Role); k8s-lease every lease take
	// (granted or refused), renewal and delete, and each sweep's list and
	// deletes (K8S-13). 0 for the other policies.
	KubeAPICalls int
	// LeasesSwept is how many leases the sweeper deleted because their
	// holder stopped renewing them (a crashed manager's).
	LeasesSwept int
	// StaleLeaseCPUSecs is vCPU·s leased by a crashed manager, from its
	// crash (or the lease's job's end) until the lease was swept: capacity
	// no one could take (k8s-lease).
	StaleLeaseCPUSecs float64
	// CoreSteps is how many events the vk core took; CoreWall the wall
	// time spent inside Step (not deterministic; never in Text/HTML).
	CoreSteps  int
	CoreWall   time.Duration // wall time inside Step; not deterministic
	Invariants []string      // sched invariant violations (Options.CheckInvariants)
	Events     uint64        // engine events run
}

// FailedTotal is the number of jobs the policy failed.
func (r *Result) FailedTotal() int {
	n := 0
	for _, v := range r.Failed {
		n += v
	}
	return n
}

// RaceLost is the number of jobs lost to a capacity race: taken from
// GitLab on room another taker got first and then failed by admission
// (quota_rejected) or by the core (vk's no_capacity and lost).
func (r *Result) RaceLost() int {
	return r.Failed[FailQuotaRejected] + r.Failed[FailNoCapacity] + r.Failed[FailLost]
}

// RequestsPerStart is GitLab job requests per job started (0 when none
// started).
func (r *Result) RequestsPerStart() float64 {
	if r.Started == 0 {
		return 0
	}
	return float64(r.GitLabRequests) / float64(r.Started)
}

// IdleRequestRate is the GitLab job requests beyond one per job started,
// per runner (job template) and second of the run: what a runner costs
// GitLab for asking while it finds nothing. gitlab-runner with
// check_interval = 1 asks once a second when idle, so 1 is its rate; the
// pull policies, one request per job, have 0.
func (r *Result) IdleRequestRate(runners int) float64 {
	if runners == 0 || r.RunSecs == 0 {
		return 0
	}
	return max(0, float64(r.GitLabRequests-r.Started)) / (float64(runners) * r.RunSecs)
}

// DecisionsPerSec is the vk core's events per second of wall time, 0 when
// not measured.
func (r *Result) DecisionsPerSec() float64 {
	if r.CoreWall <= 0 {
		return 0
	}
	return float64(r.CoreSteps) / r.CoreWall.Seconds()
}

// Run samples the scenario's jobs once from the seed and runs each policy
// on them in virtual time (BS-18). It stops early with ctx's error.
func Run(ctx context.Context, opt Options) (*Report, error) {
	s := opt.Scenario
	if s == nil {
		return nil, fmt.Errorf("%w: no scenario", ErrScenario)
	}
	seed := opt.Seed
	if seed == 0 {
		seed = s.Seed
	}
	log := opt.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	pols := opt.Policies
	if len(pols) == 0 {
		pols = s.Policies
	}
	if len(pols) == 0 {
		pols = PolicyNames
	}
	for _, p := range pols {
		if !slices.Contains(PolicyNames, p) {
			return nil, fmt.Errorf("%w: unknown policy %q", ErrScenario, p)
		}
	}
	// the scenario's seed also seeds the Core; a --seed override wins
	sc := *s
	sc.Seed = seed
	s = &sc
	jobs := Sample(s, seed)
	rep := &Report{Scenario: s, Seed: seed, Jobs: len(jobs), jobs: jobs}
	for _, n := range s.Nodes {
		rep.Nodes += n.Count
		rep.CPUs += int64(n.Count * n.CPUs)
	}
	t0 := time.Now()
	for _, p := range PolicyNames { // report order, whatever the flag order
		if !slices.Contains(pols, p) {
			continue
		}
		for _, vr := range variantsOf(p, s) {
			tp := time.Now()
			r, w, err := runOne(ctx, s, jobs, seed, p, vr, opt.CheckInvariants)
			if err != nil {
				return nil, err
			}
			rep.Results = append(rep.Results, r)
			log.Debug("policy done", "policy", r.Label, "events", w.eng.n, "wall", time.Since(tp))
			if opt.Progress != nil && time.Since(t0) > 2*time.Second {
				fmt.Fprintf(opt.Progress, "vk-sim: %s done (%d events, %.1fs)\n", r.Label, w.eng.n, time.Since(tp).Seconds())
			}
		}
	}
	return rep, nil
}

// variant is one run of a policy: quota-margin runs once per margin, vk
// once plus once per variant, the others once.
type variant struct {
	margin int
	vk     VKVariant
}

func variantsOf(p string, s *Scenario) []variant {
	runs := []variant{{}}
	switch p {
	case "quota-margin":
		runs = nil
		for _, m := range s.Baseline.Margins {
			runs = append(runs, variant{margin: m})
		}
	case "vk":
		for _, x := range s.VK.Variants {
			runs = append(runs, variant{vk: x})
		}
	}
	return runs
}

// runOne runs policy p's variant vr on the sampled jobs in a world of its
// own and returns its result and the world it ran in.
func runOne(ctx context.Context, s *Scenario, jobs []Job, seed uint64, p string, vr variant, checkInv bool) (*Result, *world, error) {
	m := vr.margin
	label := p
	switch p {
	case "quota-margin":
		label = p + "/m=" + strconv.Itoa(m)
	case "vk":
		label = p + variantLabel(vr.vk.Name)
	}
	w := newWorld(s, jobs, seed, label)
	r := &Result{Label: label, Policy: p, Margin: m}
	var err error
	switch p {
	case "vk":
		var v *vkRun
		v, err = runVK(ctx, w, vr.vk.apply(s.VK), checkInv)
		if v != nil {
			r.CoreSteps, r.CoreWall, r.Invariants = v.steps, v.wall, v.invErrs
		}
	case "pull-fifo":
		err = runPull(ctx, w, false)
	case "greedy-backfill":
		err = runPull(ctx, w, true)
	case "accept-then-wait":
		_, err = runK8s(ctx, w, k8sAcceptWait, 0)
	case "quota-margin", "k8s-lease":
		mode := k8sQuota
		if p == "k8s-lease" {
			mode = k8sLease
		}
		var k *k8sRun
		k, err = runK8s(ctx, w, mode, m)
		if k != nil {
			r.KubeAPICalls, r.LeasesSwept = k.apiCalls, k.swept
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("sim: %s: %w", label, err)
	}
	r.fill(s, w)
	return r, w, nil
}

func (r *Result) fill(s *Scenario, w *world) {
	m := w.m
	r.Events = w.eng.n
	r.Failed = m.fails
	measured := (w.window - s.Warmup.Duration).Seconds()
	r.Util = m.runArea / (m.totalCPU * measured)
	r.UtilSeries = make([]float64, len(m.util))
	win := w.window.Seconds()
	bsec := s.Bucket.Duration.Seconds()
	for b, a := range m.util {
		width := min(bsec, win-float64(b)*bsec)
		r.UtilSeries[b] = a / (m.totalCPU * width)
	}
	r.TenantSeries = make([][]float64, len(m.tenantUtil))
	for t, ser := range m.tenantUtil {
		r.TenantSeries[t] = make([]float64, len(ser))
		for b, a := range ser {
			width := min(bsec, win-float64(b)*bsec)
			r.TenantSeries[t][b] = a / (m.totalCPU * width)
		}
	}
	r.TenantCPUSecs = m.tenantArea
	r.TemplateCPUSecs = m.tmplArea
	r.TemplateDemandCPUSecs = make([]float64, len(s.Jobs))
	for _, j := range w.jobs {
		if j.Arrive >= s.Warmup.Duration && j.Arrive < w.window {
			r.TemplateDemandCPUSecs[j.Template] += m.tmplCPU[j.Template] * j.Runtime.Seconds()
		}
	}
	hasJobs := make([]bool, len(s.Tenants))
	for _, j := range w.jobs {
		hasJobs[j.Tenant] = true
	}
	r.Jain = jain(r.TenantCPUSecs, s.Tenants, hasJobs)
	r.Waits = make([]time.Duration, len(w.jobs))
	r.Left = make([]bool, len(w.jobs))
	for j, st := range m.start {
		wait := time.Duration(-1)
		switch {
		case st >= 0 && m.failed[j] == "":
			r.Started++
			wait = st - w.jobs[j].Arrive
		case m.failed[j] == "":
			// still waiting: it waited at least until the end of the drain
			r.Unstarted++
			r.Left[j] = true
			wait = max(w.end, w.eng.now) - w.jobs[j].Arrive
		}
		if w.jobs[j].Arrive < s.Warmup.Duration {
			wait = -1
		}
		r.Waits[j] = wait
	}
	r.Finished = m.ended - r.FailedTotal()
	r.TenantPeakJobs = m.tenantPeak
	r.HeldIdleCPUSecs = m.idleArea
	r.FreeWhileWaitingCPUSecs = m.freeWait
	r.GitLabRequests = m.gitlabRequests
	r.RunSecs = w.eng.now.Seconds()
	r.EmptyAnswers = m.emptyAnswers
	r.PeakOvershoot = m.peakOver
	r.MarginOvershoot = m.overshoot
	r.StaleLeaseCPUSecs = m.staleArea
}

// jain is Jain's fairness index over cpuSecs[t]/weight[t] for the tenants
// with had[t]: (Σx)² / (n·Σx²), 1 when every tenant got the same vCPU·s
// per unit of weight, 1/n when one tenant got everything; 0 when no one ran.
func jain(cpuSecs []float64, tenants []TenantSpec, had []bool) float64 {
	var sum, sq float64
	n := 0
	for t, c := range cpuSecs {
		if !had[t] {
			continue
		}
		x := c / float64(max(tenants[t].Weight, 1))
		sum += x
		sq += x * x
		n++
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(n) * sq)
}

// WaitStats are percentiles of a set of waits.
type WaitStats struct {
	N   int           // waits counted
	P50 time.Duration // median
	P95 time.Duration // 95th percentile
	P99 time.Duration // 99th percentile
}

// Percentiles returns nearest-rank percentiles of ws (negative entries,
// jobs that never started, are left out).
func Percentiles(ws []time.Duration) WaitStats {
	var v []time.Duration
	for _, w := range ws {
		if w >= 0 {
			v = append(v, w)
		}
	}
	slices.Sort(v)
	st := WaitStats{N: len(v)}
	if len(v) == 0 {
		return st
	}
	q := func(p float64) time.Duration {
		i := int(math.Ceil(p*float64(len(v)))) - 1
		return v[max(0, min(i, len(v)-1))]
	}
	st.P50, st.P95, st.P99 = q(0.50), q(0.95), q(0.99)
	return st
}

// WaitsBy returns the waits of the jobs whose key (by template index) is k.
func (rep *Report) WaitsBy(r *Result, key func(tmpl int) string) map[string][]time.Duration {
	out := map[string][]time.Duration{}
	for j, w := range r.Waits {
		k := key(rep.jobs[j].Template)
		out[k] = append(out[k], w)
	}
	return out
}
