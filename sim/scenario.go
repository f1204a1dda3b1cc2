package sim

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/vk-ci/vk/internal/conffile"
)

// ErrScenario is wrapped by every error [ParseScenario] and [LoadScenario]
// return for a scenario that is malformed or inconsistent.
var ErrScenario = errors.New("sim: bad scenario")

// Duration is a time.Duration written in TOML as a Go duration string
// ("150ms", "3m"). The zero value is zero.
type Duration struct{ time.Duration }

// UnmarshalText parses a Go duration string; negative durations are refused.
// (go-toml/v2 also hands it the text of a TOML integer or float, which has
// no unit and is refused with a hint.)
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		if _, nerr := strconv.ParseFloat(strings.ReplaceAll(string(b), "_", ""), 64); nerr == nil {
			return fmt.Errorf("duration %s has no unit: write a string such as \"%ss\"", b, b)
		}
		return err
	}
	if v < 0 {
		return fmt.Errorf("negative duration %q", b)
	}
	d.Duration = v
	return nil
}

// MarshalText renders the duration as time.Duration.String does.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.Duration.String()), nil }

// Scenario is a fleet, a workload and the parameters of every policy, as read
// from a TOML file (see sim/scenarios/*.toml). The zero value is not valid;
// use [ParseScenario], which fills defaults and validates.
type Scenario struct {
	// Name labels reports; Description is free text.
	Name        string `toml:"name"`
	Description string `toml:"description"` // free text shown under the title
	// Duration is the window in which jobs arrive and over which
	// utilization and share are measured. The run continues after it
	// until every job ended or Drain more time passed.
	Duration Duration `toml:"duration"`
	// Drain bounds the time after Duration spent finishing work (default
	// 2 × Duration); jobs not started by then count as unstarted.
	Drain Duration `toml:"drain"`
	// Warmup is the start of the window left out of every measurement
	// (utilization, shares, held-idle, waits of the jobs arriving in it),
	// so a run is judged in its steady state; default 0. The time series
	// still cover the whole window.
	Warmup Duration `toml:"warmup"`
	// Seed seeds the workload sample and every policy's PRNG unless a
	// --seed flag overrides it; default 1.
	Seed uint64 `toml:"seed"`
	// Bucket is the width of the time series in reports (default 1m).
	Bucket Duration `toml:"bucket"`
	// Policies lists the policies `vk-sim run` compares by default; empty
	// means all of [PolicyNames].
	Policies []string `toml:"policies"`

	// Trace names a recorded workload (CSV, see [ParseTrace]) relative to
	// the scenario file; its jobs join the sampled ones. [LoadScenario]
	// reads it; [ParseScenario] only notes the name.
	Trace string `toml:"trace"`

	Nodes    []NodeTemplate `toml:"nodes"`    // the fleet: groups of identical nodes
	Tenants  []TenantSpec   `toml:"tenants"`  // the capacity policy's tenants
	Jobs     []JobTemplate  `toml:"jobs"`     // job templates, one runner each
	GitLab   GitLabParams   `toml:"gitlab"`   // GitLab's side
	VK       VKParams       `toml:"vk"`       // the vk policy's knobs and variants
	Baseline BaselineParams `toml:"baseline"` // the baselines' knobs

	traceJobs []traceJob
	hooks     *vkHooks // set in code (hooks.go); nil from a file
}

// NodeTemplate is Count identical nodes.
type NodeTemplate struct {
	Name    string   `toml:"name"`     // label only; default "nodesN"
	Count   int      `toml:"count"`    // how many nodes, ≥ 1
	CPUs    int      `toml:"cpus"`     // vCPUs per node, ≥ 1
	MemGiB  int      `toml:"mem_gib"`  // memory per node in GiB, ≥ 1
	DiskGiB int      `toml:"disk_gib"` // default 1000
	Pool    string   `toml:"pool"`     // default "linux"
	Labels  []string `toml:"labels"`   // node labels a placement may require
	// MaxConcurrency is the node's max_concurrency (0: unlimited).
	MaxConcurrency int `toml:"max_concurrency"`
}

// TenantSpec is one tenant of the capacity policy: Weight (default 1) and Cap
// (jobs held at once; 0 means none). Baselines ignore both: they have no
// such knob (BS-27, BS-28).
type TenantSpec struct {
	Name   string `toml:"name"`   // unique, referenced by [[jobs]] tenant
	Weight int    `toml:"weight"` // fair-share weight; 0 means 1
	Cap    int    `toml:"cap"`    // jobs held at once; 0 means no cap
}

// JobTemplate is one kind of job of one tenant. Each template is one GitLab
// runner (its tags) in every policy: a vk runner with the template's
// envelope, a gitlab-runner entry (deployment) in the Kubernetes baselines.
type JobTemplate struct {
	Name    string `toml:"name"`     // unique per tenant
	Tenant  string `toml:"tenant"`   // a [[tenants]] name
	CPUs    int    `toml:"cpus"`     // envelope vCPUs, ≥ 1
	MemGiB  int    `toml:"mem_gib"`  // envelope memory in GiB, ≥ 1
	DiskGiB int    `toml:"disk_gib"` // default 10
	Pool    string `toml:"pool"`     // default "linux"
	// Count caps the number of jobs sampled (0: no cap).
	Count      int    `toml:"count"`
	Production bool   `toml:"production"` // the runner is production work (ARB-06)
	Image      string `toml:"image"`      // image for affinity (PLACE-14); "" none
	Project    string `toml:"project"`    // GitLab project path; default tenant/name
	// PerHour is the rate of a Poisson arrival process (jobs per hour).
	PerHour float64 `toml:"per_hour"`
	// Bursts are fan-outs at fixed times.
	Bursts []Burst `toml:"bursts"`
	// Pushes are fan-outs at Poisson times.
	Pushes  *Pushes `toml:"pushes"`
	Runtime Dist    `toml:"runtime"` // each job's wall time once started
	// MemoryRequest says whether this runner's pods set a memory request
	// in the Kubernetes baselines (gitlab-runner's memory_request, the
	// envelope's mem_gib); nil means true. false models a runner whose
	// pods set none: under a requests.memory quota (quota_memory, the
	// default) admission rejects every such pod and its job fails
	// (FailQuotaNoRequest, K8S-12). vk and the pull baselines ignore it.
	MemoryRequest *bool `toml:"memory_request"`
}

// setsMemoryRequest is MemoryRequest with its default.
func (j *JobTemplate) setsMemoryRequest() bool { return j.MemoryRequest == nil || *j.MemoryRequest }

// Burst is Jobs jobs arriving at once at At.
type Burst struct {
	At   Duration `toml:"at"`   // offset from the start
	Jobs int      `toml:"jobs"` // jobs arriving at once, ≥ 1
}

// Pushes are pushes arriving as a Poisson process of PerHour, or at evenly
// spaced times when Every is set, each fanning out Fanout jobs at once;
// Count caps the number of pushes (0: no cap).
type Pushes struct {
	PerHour float64  `toml:"per_hour"` // Poisson rate of pushes (when Every is zero)
	Every   Duration `toml:"every"`    // fixed spacing of pushes; zero: Poisson
	Start   Duration `toml:"start"`    // first push (Every) or start of the process
	Fanout  int      `toml:"fanout"`   // jobs per push, ≥ 1
	Count   int      `toml:"count"`    // pushes at most; 0: no cap
}

// Dist is a distribution of durations. Kind is one of:
//   - "fixed": Value;
//   - "shifted-exp": Shift + an exponential with mean Mean;
//   - "lognormal": median Median, shape Sigma;
//   - "empirical": a CDF through (Quantiles[i], Values[i]) points,
//     interpolated linearly; Quantiles rise from 0 to 1.
//
// Max, when set, clips samples (a job timeout).
type Dist struct {
	Kind      string     `toml:"kind"`      // fixed, shifted-exp, lognormal or empirical
	Value     Duration   `toml:"value"`     // fixed: the value
	Shift     Duration   `toml:"shift"`     // shifted-exp: the constant part
	Mean      Duration   `toml:"mean"`      // shifted-exp: the exponential part's mean
	Median    Duration   `toml:"median"`    // lognormal: the median
	Sigma     float64    `toml:"sigma"`     // lognormal: the shape, in [0, 5]
	Quantiles []float64  `toml:"quantiles"` // empirical: rising from 0 to 1
	Values    []Duration `toml:"values"`    // empirical: the value at each quantile, not falling
	Max       Duration   `toml:"max"`       // clip samples to this; zero: no clip
}

// GitLabParams models GitLab's side.
type GitLabParams struct {
	// RoundTrip is the time a job request takes (default lognormal,
	// median 150 ms, sigma 0.5).
	RoundTrip Dist `toml:"round_trip"`
	// LongPoll is how long GitLab (Workhorse) holds a job request open
	// when it has no job; 0 is off, Workhorse's effective default
	// (reference/gitlab-runner-api.md; the docs recommend 50 s).
	LongPoll Duration `toml:"long_poll"`
}

// DefaultRequestConcurrency is a runner's request loops when the scenario
// sets none: vk-gitlab's default (relay.DefaultRequestConcurrency; one set
// of books, TestDefaultsAreTheRelays), which the relay caps by its
// concurrent as the sim caps it by relay_concurrent.
const DefaultRequestConcurrency = 6

// VKParams are the vk policy's knobs: the relay's and the node's delays and
// the hub's capacity-policy numbers (zero: the sched defaults).
type VKParams struct {
	// RequestConcurrency is each runner's number of request loops
	// (default DefaultRequestConcurrency, at most RelayConcurrent when
	// that is set, as vk-gitlab fills it).
	RequestConcurrency int `toml:"request_concurrency"`
	// RelayConcurrent is each relay's concurrent (0: no limit).
	RelayConcurrent int `toml:"relay_concurrent"`
	// HubLatency is one relay↔hub or hub↔node message (default 2 ms).
	HubLatency Duration `toml:"hub_latency"`
	// NodeAnswer is a node's time to answer an offer or start from its
	// ledger (default 5 ms).
	NodeAnswer Duration `toml:"node_answer"`
	// SettleDelay is from a job's end to its settlement (default 1 s).
	SettleDelay Duration `toml:"settle_delay"`
	// PollEvery is the relay's long-poll period per ticket (default 50 s).
	PollEvery Duration `toml:"poll_every"`
	// HeartbeatEvery is each relay's heartbeat period (default 10 s),
	// listing its runners' request and job admissions (RSESS-04, ARB-39).
	HeartbeatEvery Duration `toml:"heartbeat_every"`
	// TickEvery is the hub driver's tick period (default 250 ms, the hub's
	// tick_ms): the Core's deadlines fire at the first tick at or after
	// them, as in the hub.
	TickEvery          Duration `toml:"tick_every"`
	ProbeLimit         int      `toml:"probe_limit"`          // sched Policy.ProbeLimit (ARB-19); 0: default
	BusySecs           int      `toml:"busy_secs"`            // sched Policy.BusySecs (ARB-18); 0: default
	BackoffInitialSecs int      `toml:"backoff_initial_secs"` // sched Policy.BackoffInitialSecs (ARB-20)
	BackoffMaxSecs     int      `toml:"backoff_max_secs"`     // sched Policy.BackoffMaxSecs (ARB-20)
	LeaseSecs          int      `toml:"lease_secs"`           // sched Policy.LeaseSecs (ARB-28)
	// PackAboveUtilization, DrainsPerPool, WideFraction and DrainMaxHold
	// are the core's wide-job knobs (BS-21, BS-22; zero: sched's
	// defaults, which pack while wide work waits or above 70 % and drain
	// for waiting wide work). A negative pack_above_utilization packs
	// only while wide work waits; a negative drains_per_pool places no
	// drains: with both, a variant shows a core that neither packs above
	// a threshold nor drains.
	PackAboveUtilization float64  `toml:"pack_above_utilization"`
	DrainsPerPool        int      `toml:"drains_per_pool"` // sched Policy.DrainsPerPool (BS-22)
	WideFraction         float64  `toml:"wide_fraction"`   // sched Policy.WideFraction (BS-20)
	DrainMaxHold         Duration `toml:"drain_max_hold"`  // sched Policy.DrainMaxHold (BS-22)
	// Variants are further runs of the vk policy with some knobs changed,
	// reported as "vk/NAME" beside "vk".
	Variants []VKVariant `toml:"variants"`
}

// VKVariant overrides some [VKParams] for one more vk run; nil fields keep
// the scenario's value.
type VKVariant struct {
	Name                 string    `toml:"name"`                   // the result is labelled "vk/NAME"
	RequestConcurrency   *int      `toml:"request_concurrency"`    // overrides VKParams.RequestConcurrency
	ProbeLimit           *int      `toml:"probe_limit"`            // overrides VKParams.ProbeLimit
	BusySecs             *int      `toml:"busy_secs"`              // overrides VKParams.BusySecs
	BackoffInitialSecs   *int      `toml:"backoff_initial_secs"`   // overrides VKParams.BackoffInitialSecs
	BackoffMaxSecs       *int      `toml:"backoff_max_secs"`       // overrides VKParams.BackoffMaxSecs
	PackAboveUtilization *float64  `toml:"pack_above_utilization"` // overrides VKParams.PackAboveUtilization
	DrainsPerPool        *int      `toml:"drains_per_pool"`        // overrides VKParams.DrainsPerPool
	WideFraction         *float64  `toml:"wide_fraction"`          // overrides VKParams.WideFraction
	DrainMaxHold         *Duration `toml:"drain_max_hold"`         // overrides VKParams.DrainMaxHold
}

// apply returns p with x's overrides.
func (x VKVariant) apply(p VKParams) VKParams {
	set := func(dst *int, v *int) {
		if v != nil {
			*dst = *v
		}
	}
	set(&p.RequestConcurrency, x.RequestConcurrency)
	set(&p.ProbeLimit, x.ProbeLimit)
	set(&p.BusySecs, x.BusySecs)
	set(&p.BackoffInitialSecs, x.BackoffInitialSecs)
	set(&p.BackoffMaxSecs, x.BackoffMaxSecs)
	set(&p.DrainsPerPool, x.DrainsPerPool)
	if x.PackAboveUtilization != nil {
		p.PackAboveUtilization = *x.PackAboveUtilization
	}
	if x.WideFraction != nil {
		p.WideFraction = *x.WideFraction
	}
	if x.DrainMaxHold != nil {
		p.DrainMaxHold = *x.DrainMaxHold
	}
	p.Variants = nil
	return p
}

// BaselineParams are the knobs of the policies fleets use today.
type BaselineParams struct {
	// Concurrent is accept-then-wait's concurrent per replica (default 10).
	Concurrent int `toml:"concurrent"`
	// PollTimeout: a taken job whose pod is not placed within it fails
	// (default 180 s, K8S-03).
	PollTimeout Duration `toml:"poll_timeout"`
	// CheckInterval is gitlab-runner's check_interval (default 3 s).
	CheckInterval Duration `toml:"check_interval"`
	// Replicas and RequestConcurrency shape each runner deployment
	// (defaults 3 and 4, K8S-07).
	Replicas           int `toml:"replicas"`
	RequestConcurrency int `toml:"request_concurrency"` // request slots per replica
	// Margins swept by quota-margin (default [0, 12, 24], K8S-10).
	Margins []int `toml:"margins"`
	// PodCreate is from a taken job to its pod reaching admission (default
	// 1 s); a bound pod counts as running at once.
	PodCreate Duration `toml:"pod_create"`
	// QuotaPods is the quota's hard pods (0: no pods quota); requests.cpu
	// and requests.memory hard are the fleet's totals (K8S-11).
	QuotaPods int `toml:"quota_pods"`
	// QuotaRefresh is the granularity at which managers see quota usage
	// change (default 1 s, K8S-05).
	QuotaRefresh Duration `toml:"quota_refresh"`
	// PollInterval is how often a host with room polls the shared queue
	// in pull-fifo and greedy-backfill (default 1 s).
	PollInterval Duration `toml:"poll_interval"`
	// RolloutAt/RolloutFor: a maxSurge 100% rollout keeps twice the
	// replicas active over [RolloutAt, RolloutAt+RolloutFor) (K8S-06).
	RolloutAt  Duration `toml:"rollout_at"`
	RolloutFor Duration `toml:"rollout_for"` // zero: no rollout
	// QuotaMemory says whether the namespace quota has a requests.memory
	// hard (nil means true, K8S-11); with it, admission rejects pods
	// without a memory request (K8S-12). requests.cpu is always checked.
	QuotaMemory *bool `toml:"quota_memory"`

	// k8s-lease (K8S-13): one Lease object per job, taken exactly (no
	// margin) before the job request, renewed by its holder every
	// LeaseRenew while the job is pending or running, deleted when the
	// request comes back empty or the job ends; a sweeper deletes, every
	// LeaseSweep, leases not renewed for LeaseDuration.

	// APILatency is one Kubernetes API call's round trip (default 10 ms):
	// a lease take delays the job request by it.
	APILatency Duration `toml:"api_latency"`
	// LeaseDuration is how long a lease lives unrenewed (default 60 s).
	LeaseDuration Duration `toml:"lease_duration"`
	// LeaseRenew is the holder's renew period (default LeaseDuration/3).
	LeaseRenew Duration `toml:"lease_renew"`
	// LeaseSweep is the sweeper's period (default 30 s).
	LeaseSweep Duration `toml:"lease_sweep"`
	// CrashAt, when set, crashes one replica of every runner deployment
	// (the first active one) at that offset in all Kubernetes baselines:
	// its jobs fail (FailManagerCrash) and their pods are deleted, its
	// leases are left unrenewed; the Deployment restarts it, knowing none
	// of them, RestartAfter later (default 30 s). Zero: no crash.
	CrashAt      Duration `toml:"crash_at"`
	RestartAfter Duration `toml:"restart_after"` // crash to restart (default 30 s)
}

// quotaMemory is QuotaMemory with its default.
func (b *BaselineParams) quotaMemory() bool { return b.QuotaMemory == nil || *b.QuotaMemory }

// LoadScenario reads and parses a scenario file, and its trace if it names
// one. Decoding errors name the file, the line and the key.
func LoadScenario(path string) (*Scenario, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	s, err := parseScenario(path, b)
	if err != nil {
		return nil, err
	}
	if s.Trace != "" {
		f, err := os.Open(filepath.Join(filepath.Dir(path), s.Trace))
		if err != nil {
			return nil, fmt.Errorf("sim: trace: %w", err)
		}
		defer f.Close()
		if err := ParseTrace(f, s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// ParseScenario decodes a scenario strictly (unknown keys are errors), fills
// defaults and validates it. Errors wrap [ErrScenario]; decoding errors name
// the line, the column and the key ("scenario:12:1: unknown key
// \"baseline.bogus\"").
func ParseScenario(b []byte) (*Scenario, error) { return parseScenario("scenario", b) }

func parseScenario(name string, b []byte) (*Scenario, error) {
	var s Scenario
	if err := conffile.Strict(name, b, &s); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrScenario, err)
	}
	s.defaults()
	if err := s.validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

func defDur(d *Duration, v time.Duration) {
	if d.Duration == 0 {
		d.Duration = v
	}
}

func defInt(p *int, v int) {
	if *p == 0 {
		*p = v
	}
}

func (s *Scenario) defaults() {
	if s.Seed == 0 {
		s.Seed = 1
	}
	defDur(&s.Bucket, time.Minute)
	defDur(&s.Drain, 2*s.Duration.Duration)
	for i := range s.Nodes {
		n := &s.Nodes[i]
		defInt(&n.DiskGiB, 1000)
		if n.Pool == "" {
			n.Pool = "linux"
		}
		if n.Name == "" {
			n.Name = fmt.Sprintf("nodes%d", i+1)
		}
	}
	for i := range s.Tenants {
		defInt(&s.Tenants[i].Weight, 1)
	}
	for i := range s.Jobs {
		j := &s.Jobs[i]
		defInt(&j.DiskGiB, 10)
		if j.Pool == "" {
			j.Pool = "linux"
		}
		if j.Project == "" {
			j.Project = j.Tenant + "/" + j.Name
		}
	}
	if s.GitLab.RoundTrip.Kind == "" {
		s.GitLab.RoundTrip = Dist{Kind: "lognormal", Median: Duration{150 * time.Millisecond}, Sigma: 0.5}
	}
	v := &s.VK
	if v.RequestConcurrency == 0 {
		v.RequestConcurrency = DefaultRequestConcurrency
		if v.RelayConcurrent > 0 {
			v.RequestConcurrency = min(v.RequestConcurrency, v.RelayConcurrent)
		}
	}
	defDur(&v.HubLatency, 2*time.Millisecond)
	defDur(&v.NodeAnswer, 5*time.Millisecond)
	defDur(&v.SettleDelay, time.Second)
	defDur(&v.PollEvery, 50*time.Second)
	defDur(&v.TickEvery, 250*time.Millisecond)
	defDur(&v.HeartbeatEvery, 10*time.Second)
	b := &s.Baseline
	defInt(&b.Concurrent, 10)
	defDur(&b.PollTimeout, 180*time.Second)
	defDur(&b.CheckInterval, 3*time.Second)
	defInt(&b.Replicas, 3)
	defInt(&b.RequestConcurrency, 4)
	if b.Margins == nil {
		b.Margins = []int{0, 12, 24}
	}
	defDur(&b.PodCreate, time.Second)
	defDur(&b.QuotaRefresh, time.Second)
	defDur(&b.PollInterval, time.Second)
	defDur(&b.APILatency, 10*time.Millisecond)
	defDur(&b.LeaseDuration, time.Minute)
	defDur(&b.LeaseRenew, b.LeaseDuration.Duration/3)
	defDur(&b.LeaseSweep, 30*time.Second)
	defDur(&b.RestartAfter, 30*time.Second)
}

func (d Dist) validate() error {
	switch d.Kind {
	case "fixed":
		if d.Value.Duration <= 0 {
			return errors.New("fixed needs a positive value")
		}
	case "shifted-exp":
		if d.Mean.Duration <= 0 {
			return errors.New("shifted-exp needs a positive mean")
		}
	case "lognormal":
		if d.Median.Duration <= 0 || !(d.Sigma >= 0 && d.Sigma <= 5) {
			return errors.New("lognormal needs a positive median and sigma in [0, 5]")
		}
	case "empirical":
		if len(d.Quantiles) < 2 || len(d.Quantiles) != len(d.Values) {
			return errors.New("empirical needs as many quantiles as values, at least 2")
		}
		if d.Quantiles[0] != 0 || d.Quantiles[len(d.Quantiles)-1] != 1 {
			return errors.New("empirical quantiles must run from 0 to 1")
		}
		for i := 1; i < len(d.Quantiles); i++ {
			if !(d.Quantiles[i] > d.Quantiles[i-1]) || d.Values[i].Duration < d.Values[i-1].Duration {
				return errors.New("empirical quantiles must rise and values must not fall")
			}
		}
	default:
		return fmt.Errorf("unknown kind %q (fixed, shifted-exp, lognormal, empirical)", d.Kind)
	}
	return nil
}

// variantLabel is "/NAME" for a variant, "" for the scenario's own vk run.
func variantLabel(name string) string {
	if name == "" {
		return ""
	}
	return "/" + name
}
