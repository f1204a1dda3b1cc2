package sim

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// Job is one sampled job: when it reaches GitLab's queue and how long it runs
// once started. Every policy of a run sees the same []Job.
type Job struct {
	ID       int           // index in the workload, from 0
	Arrive   time.Duration // offset from the run's start
	Template int           // index into Scenario.Jobs
	Tenant   int           // index into Scenario.Tenants
	Runtime  time.Duration // wall time once started, ≥ 1 ms
}

// seedFor derives an independent PRNG stream for one purpose of one run.
func seedFor(seed uint64, purpose string, index int) *rand.Rand {
	h := uint64(14695981039346656037)
	for i := 0; i < len(purpose); i++ {
		h ^= uint64(purpose[i])
		h *= 1099511628211
	}
	h ^= uint64(index) * 0x9e3779b97f4a7c15
	return rand.New(rand.NewPCG(seed, h))
}

// Sample draws the workload of s with seed: arrivals of every template
// within [0, Duration) and each job's runtime, plus the jobs of s's trace
// as recorded. The same (s, seed) always yields the same jobs.
func Sample(s *Scenario, seed uint64) []Job {
	tenantIdx := map[string]int{}
	for i, t := range s.Tenants {
		tenantIdx[t.Name] = i
	}
	window := s.Duration.Duration
	var jobs []Job
	for ti, t := range s.Jobs {
		rng := seedFor(seed, "arrivals", ti)
		var at []time.Duration
		if t.PerHour > 0 {
			// float time: a tiny rate must not overflow a Duration
			mean := float64(time.Hour) / t.PerHour
			for x := rng.ExpFloat64() * mean; x < float64(window); x += rng.ExpFloat64() * mean {
				at = append(at, time.Duration(x))
				if len(at) > 5_000_000 {
					break
				}
			}
		}
		for _, b := range t.Bursts {
			if b.At.Duration < window {
				for range b.Jobs {
					at = append(at, b.At.Duration)
				}
			}
		}
		if p := t.Pushes; p != nil {
			n := 0
			next := func(x time.Duration) time.Duration {
				if p.Every.Duration > 0 {
					if p.Every.Duration >= window {
						return window
					}
					return x + p.Every.Duration
				}
				gap := rng.ExpFloat64() * float64(time.Hour) / p.PerHour
				if gap >= float64(window) {
					return window // past the window: no more pushes
				}
				return x + time.Duration(gap)
			}
			x := p.Start.Duration
			if p.Every.Duration == 0 {
				x = next(x)
			}
			for ; x < window && (p.Count == 0 || n < p.Count); x = next(x) {
				for range p.Fanout {
					at = append(at, x)
				}
				n++
			}
		}
		slices.Sort(at)
		if t.Count > 0 && len(at) > t.Count {
			at = at[:t.Count]
		}
		rt := seedFor(seed, "runtimes", ti)
		for _, a := range at {
			jobs = append(jobs, Job{Arrive: a, Template: ti, Tenant: tenantIdx[t.Tenant], Runtime: t.Runtime.Sample(rt)})
		}
	}
	for _, tj := range s.traceJobs {
		jobs = append(jobs, Job{Arrive: tj.arrive, Template: tj.template, Tenant: tenantIdx[s.Jobs[tj.template].Tenant], Runtime: tj.runtime})
	}
	slices.SortStableFunc(jobs, func(a, b Job) int {
		return cmp.Or(cmp.Compare(a.Arrive, b.Arrive), cmp.Compare(a.Template, b.Template))
	})
	for i := range jobs {
		jobs[i].ID = i
	}
	return jobs
}

// Sample draws one duration (at least 1 ms) from d using rng.
func (d Dist) Sample(rng *rand.Rand) time.Duration {
	var v float64
	switch d.Kind {
	case "fixed":
		v = float64(d.Value.Duration)
	case "shifted-exp":
		v = float64(d.Shift.Duration) + rng.ExpFloat64()*float64(d.Mean.Duration)
	case "lognormal":
		v = float64(d.Median.Duration) * math.Exp(d.Sigma*rng.NormFloat64())
	case "empirical":
		u := rng.Float64()
		i, _ := slices.BinarySearch(d.Quantiles, u)
		if i == 0 {
			i = 1
		}
		if i >= len(d.Quantiles) {
			i = len(d.Quantiles) - 1
		}
		q0, q1 := d.Quantiles[i-1], d.Quantiles[i]
		v0, v1 := float64(d.Values[i-1].Duration), float64(d.Values[i].Duration)
		v = v0 + (v1-v0)*(u-q0)/(q1-q0)
	}
	if d.Max.Duration > 0 && v > float64(d.Max.Duration) {
		v = float64(d.Max.Duration)
	}
	if !(v < float64(1000*time.Hour)) { // NaN or absurd
		v = float64(1000 * time.Hour)
	}
	return max(time.Duration(v), time.Millisecond)
}
