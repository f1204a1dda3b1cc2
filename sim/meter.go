package sim

import (
	"time"
)

// Failure reasons a policy can end a job with.
const (
	FailQuotaRejected = "quota_rejected" // pod over quota at admission (K8S-08)
	// FailQuotaNoRequest: a pod without a memory request, rejected by
	// admission under a requests.memory quota (K8S-12).
	FailQuotaNoRequest = "quota_no_request"
	FailPollTimeout    = "poll_timeout" // pod not placed within poll_timeout (K8S-03)
	// FailManagerCrash: the job's gitlab-runner manager crashed while it
	// held the job (baseline crash_at).
	FailManagerCrash = "manager_crash"
	FailNoCapacity   = "no_capacity" // vk: EndJob no_capacity
	FailLost         = "lost"        // vk: EndJob lost
)

// meter collects one policy's measurements as the run goes. Areas are
// integrals over virtual time in vCPU·seconds, restricted to the measured
// window [from, window); the per-bucket series cover all of [0, window).
type meter struct {
	window   time.Duration
	from     time.Duration // the warmup's end: measurements start here
	bucket   time.Duration
	totalCPU float64
	tmplCPU  []float64
	tenantOf []int // per template

	last       time.Duration
	runCPU     float64
	tenantCPU  []float64
	heldIdle   float64 // vCPUs set aside on nodes, not running a job
	waiting    int     // jobs arrived, neither started nor ended
	freeCPU    float64 // totalCPU - runCPU - heldIdle
	util       []float64
	tenantUtil [][]float64
	runArea    float64
	tenantArea []float64 // per tenant: vCPU·s run in the measured window
	tmplRun    []float64 // per template: vCPUs running now
	tmplArea   []float64 // per template: vCPU·s run in the measured window
	idleArea   float64
	freeWait   float64
	// staleLeased is the vCPUs of leases whose holder crashed, until they
	// are swept (k8s-lease); staleArea its integral.
	staleLeased float64
	staleArea   float64

	tenantJobs []int // jobs running per tenant now
	tenantPeak []int // most jobs running at once per tenant

	start  []time.Duration // per job; -1 before it starts
	failed []string        // per job; "" unless it failed
	ended  int
	fails  map[string]int

	gitlabRequests int
	emptyAnswers   int
	peakOver       int // quota-margin: most pods rejected within one refresh interval
	overshoot      int // quota-margin with a pods quota: most pods past hard − margin
}

func newMeter(s *Scenario, jobs []Job, totalCPU int64) *meter {
	nb := int((s.Duration.Duration + s.Bucket.Duration - 1) / s.Bucket.Duration)
	m := &meter{window: s.Duration.Duration, from: s.Warmup.Duration, bucket: s.Bucket.Duration, totalCPU: float64(totalCPU),
		freeCPU: float64(totalCPU), util: make([]float64, nb), tenantCPU: make([]float64, len(s.Tenants)),
		start: make([]time.Duration, len(jobs)), failed: make([]string, len(jobs)), fails: map[string]int{}}
	ti := map[string]int{}
	for i, t := range s.Tenants {
		ti[t.Name] = i
	}
	for _, j := range s.Jobs {
		m.tmplCPU = append(m.tmplCPU, float64(j.CPUs))
		m.tenantOf = append(m.tenantOf, ti[j.Tenant])
	}
	m.tmplRun = make([]float64, len(s.Jobs))
	m.tmplArea = make([]float64, len(s.Jobs))
	m.tenantArea = make([]float64, len(s.Tenants))
	m.tenantJobs = make([]int, len(s.Tenants))
	m.tenantPeak = make([]int, len(s.Tenants))
	m.tenantUtil = make([][]float64, len(s.Tenants))
	for i := range m.tenantUtil {
		m.tenantUtil[i] = make([]float64, nb)
	}
	for i := range m.start {
		m.start[i] = -1
	}
	return m
}

// advance integrates the current levels from m.last to t.
func (m *meter) advance(t time.Duration) {
	end := min(t, m.window)
	for m.last < end {
		b := int(m.last / m.bucket)
		be := min(time.Duration(b+1)*m.bucket, end)
		if m.last < m.from && be > m.from {
			be = m.from // split the bucket at the warmup's end
		}
		dt := (be - m.last).Seconds()
		m.util[b] += m.runCPU * dt
		for i, c := range m.tenantCPU {
			if c != 0 {
				m.tenantUtil[i][b] += c * dt
			}
		}
		if m.last >= m.from {
			m.runArea += m.runCPU * dt
			m.idleArea += m.heldIdle * dt
			m.staleArea += m.staleLeased * dt
			if m.waiting > 0 {
				m.freeWait += m.freeCPU * dt
			}
			for i, c := range m.tenantCPU {
				m.tenantArea[i] += c * dt
			}
			for i, c := range m.tmplRun {
				m.tmplArea[i] += c * dt
			}
		}
		m.last = be
	}
	if t > m.last {
		m.last = t
	}
}

func (m *meter) arrived(t time.Duration, _ int) {
	m.advance(t)
	m.waiting++
}

// hold and unhold count vCPUs set aside on a node but not running a job
// (reservations, claimed-but-not-started pulls).
func (m *meter) hold(t time.Duration, cpus int64) {
	m.advance(t)
	m.heldIdle += float64(cpus)
	m.freeCPU -= float64(cpus)
}

func (m *meter) unhold(t time.Duration, cpus int64) {
	m.advance(t)
	m.heldIdle -= float64(cpus)
	m.freeCPU += float64(cpus)
}

// started marks job j (of template tmpl) running from t.
func (m *meter) started(t time.Duration, j, tmpl int) {
	m.advance(t)
	if m.start[j] >= 0 || m.failed[j] != "" {
		return
	}
	m.start[j] = t
	m.waiting--
	c := m.tmplCPU[tmpl]
	m.runCPU += c
	m.freeCPU -= c
	m.tmplRun[tmpl] += c
	tn := m.tenantOf[tmpl]
	m.tenantCPU[tn] += c
	m.tenantJobs[tn]++
	m.tenantPeak[tn] = max(m.tenantPeak[tn], m.tenantJobs[tn])
}

// finished marks a running job done at t.
func (m *meter) finished(t time.Duration, j, tmpl int) {
	m.advance(t)
	c := m.tmplCPU[tmpl]
	m.runCPU -= c
	m.freeCPU += c
	m.tmplRun[tmpl] -= c
	m.tenantCPU[m.tenantOf[tmpl]] -= c
	m.tenantJobs[m.tenantOf[tmpl]]--
	m.ended++
}

// kill ends job j (of template tmpl) at t with reason, running or not: a
// running job stops running and counts as failed, not started.
func (m *meter) kill(t time.Duration, j, tmpl int, reason string) {
	if m.start[j] < 0 {
		m.fail(t, j, reason)
		return
	}
	if m.failed[j] != "" {
		return
	}
	m.finished(t, j, tmpl)
	m.failed[j] = reason
	m.fails[reason]++
}

// stale adds d vCPUs of leases held by a crashed manager (d < 0: swept).
func (m *meter) stale(t time.Duration, d int64) {
	m.advance(t)
	m.staleLeased += float64(d)
}

// fail ends a job that never ran.
func (m *meter) fail(t time.Duration, j int, reason string) {
	m.advance(t)
	if m.start[j] >= 0 || m.failed[j] != "" {
		return
	}
	m.failed[j] = reason
	m.fails[reason]++
	m.waiting--
	m.ended++
}

func (m *meter) close(t time.Duration) { m.advance(t) }
