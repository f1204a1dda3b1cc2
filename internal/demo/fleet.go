package demo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"time"

	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/testfleet"
	"github.com/vk-ci/vk/proto/client"
)

// FleetOptions returns the demo fleet for the sample: two nodes of 4 CPUs
// and 2 GiB with room for three jobs each, and one tenant (GitLab + relay)
// per sample tenant, each job reserving 1 CPU and 512 MiB, so twenty jobs
// compete for six slots and BigJob (1.5 GiB) must wait for room. caches
// starts the real registry for the build job's cache.
func FleetOptions(ts []SampleTenant, caches bool) testfleet.Options {
	o := testfleet.Options{Caches: caches}
	for i := 0; i < 2; i++ {
		o.Nodes = append(o.Nodes, testfleet.NodeSpec{Name: fmt.Sprintf("node-%d", i+1), CPUs: 4, Mem: 2 << 30, MaxConcurrency: 3})
	}
	for _, t := range ts {
		o.Tenants = append(o.Tenants, testfleet.TenantSpec{
			Name: t.Name, Weight: t.Weight,
			Envelope:           client.Envelope{CPUs: 1, Mem: 512 << 20, Disk: 1 << 30},
			RequestConcurrency: 4, Concurrent: 8,
		})
	}
	return o
}

// Loaded is one tenant's sample loaded into its GitLab.
type Loaded struct {
	Sample   SampleTenant
	Tenant   *testfleet.Tenant
	Pipeline gitlabfake.Pipeline
}

// Load creates each sample tenant's project and pipeline in its tenant's
// GitLab (matched by name). Loading twice runs the pipelines again on the
// same projects (the second run hits the cache).
func Load(f *testfleet.Fleet, ts []SampleTenant) ([]Loaded, error) {
	var out []Loaded
	for _, s := range ts {
		t := f.Tenant(s.Name)
		if t == nil {
			return nil, fmt.Errorf("demo: the fleet has no tenant %q", s.Name)
		}
		pl, err := t.CreatePipeline(s.Project, s.Files, s.Pipeline)
		if err != nil {
			return nil, fmt.Errorf("demo: %s: %w", s.Name, err)
		}
		out = append(out, Loaded{Sample: s, Tenant: t, Pipeline: pl})
	}
	return out, nil
}

// collector builds Snapshots of loaded pipelines from GitLab's and the
// hub's views.
type collector struct {
	f       *testfleet.Fleet
	loaded  []Loaded
	start   time.Time
	started map[string]time.Duration // "<tenant>/<gitlab id>" → first seen running on a node
	waits   map[string]waitSeen      // "<tenant>/<gitlab id>" → current wait reason and since when
}

type waitSeen struct {
	reason string
	since  time.Duration
}

func newCollector(f *testfleet.Fleet, loaded []Loaded, start time.Time) *collector {
	return &collector{f: f, loaded: loaded, start: start, started: map[string]time.Duration{}, waits: map[string]waitSeen{}}
}

func (c *collector) since(t time.Time) time.Duration {
	if t.IsZero() {
		return 0
	}
	d := t.Sub(c.start)
	if d <= 0 {
		d = time.Nanosecond
	}
	return d
}

// snap reads both views now. A hub that is down (or restarting) leaves
// the hub columns as they were last seen empty.
func (c *collector) snap(ctx context.Context) Snapshot {
	now := time.Now()
	s := Snapshot{Elapsed: now.Sub(c.start)}
	hubJobs, _ := c.f.Hub().Jobs(ctx)
	for _, l := range c.loaded {
		relayID := l.Tenant.Relay.ID
		names := make([]string, 0, len(l.Pipeline.Jobs))
		for n := range l.Pipeline.Jobs {
			names = append(names, n)
		}
		sort.Strings(names)
		stage := map[string]string{}
		for _, j := range l.Sample.Pipeline.Jobs {
			stage[j.Name] = j.Stage
		}
		for _, name := range names {
			id := l.Pipeline.Jobs[name]
			st := l.Tenant.GitLab.JobState(id)
			row := JobRow{Tenant: l.Sample.Name, Name: name, Stage: stage[name], GitLabID: id, State: st,
				Pending: c.since(l.Tenant.FirstAt(id, gitlabfake.StatePending))}
			for _, hj := range hubJobs {
				if hj.GitLabJobID == id && hj.Principal == relayID {
					row.HubState, row.HubStage, row.Node = string(hj.State), hj.Stage, c.f.NodeName(hj.Node)
				}
			}
			key := fmt.Sprintf("%s/%d", l.Sample.Name, id)
			if _, ok := c.started[key]; !ok && row.HubStage != "" {
				c.started[key] = now.Sub(c.start)
			}
			row.Started = c.started[key]
			if w := row.WaitReason(); c.waits[key].reason != w {
				c.waits[key] = waitSeen{w, now.Sub(c.start)}
			}
			row.WaitSince = c.waits[key].since
			if st.Finished() {
				row.Finished = c.since(l.Tenant.FirstAt(id, st))
				if st == gitlabfake.StateFailed {
					if ji, err := l.Tenant.GitLab.Job(id); err == nil {
						row.Failure = ji.FailureReason
					}
				}
			}
			s.Jobs = append(s.Jobs, row)
		}
	}
	s.Sort()
	return s
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// writeTraces writes every ended job's GitLab trace to
// <dir>/<tenant>/<gitlab id>-<name>.log and records the paths in s.
func writeTraces(dir string, loaded []Loaded, s *Snapshot) error {
	byKey := map[string]*testfleet.Tenant{}
	for _, l := range loaded {
		byKey[l.Sample.Name] = l.Tenant
	}
	for i := range s.Jobs {
		j := &s.Jobs[i]
		t := byKey[j.Tenant]
		if t == nil {
			continue
		}
		p := filepath.Join(dir, j.Tenant, fmt.Sprintf("%d-%s.log", j.GitLabID, unsafeName.ReplaceAllString(j.Name, "_")))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, t.GitLab.Trace(j.GitLabID), 0o644); err != nil {
			return err
		}
		j.TracePath = p
	}
	return nil
}
