package schedtest

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/vk-ci/vk/sched"
)

// GiB is 2^30 bytes.
const GiB = int64(1) << 30

// ParseSize parses sizes as config writes them: "16G", "512M", "1T",
// "1024" (bytes). Suffixes are binary.
func ParseSize(s string) (int64, error) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, strings.TrimSuffix(s, "G")
	case strings.HasSuffix(s, "T"):
		mult, s = 1<<40, strings.TrimSuffix(s, "T")
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("schedtest: bad size %q", s)
	}
	return v * mult, nil
}

// Node returns a ready NodeReport with cpus vCPUs, memGiB and diskGiB, in
// the given pools.
func Node(id sched.NodeID, cpus, memGiB, diskGiB int64, pools ...string) sched.NodeReport {
	return sched.NodeReport{Node: id, Capacity: sched.Resources{MemBytes: memGiB * GiB, DiskBytes: diskGiB * GiB, CPUs: cpus},
		Pools: pools, State: sched.NodeReady}
}

// Envelope returns an envelope of cpus, memGiB and diskGiB.
func Envelope(cpus, memGiB, diskGiB int64) sched.Resources {
	return sched.Resources{MemBytes: memGiB * GiB, DiskBytes: diskGiB * GiB, CPUs: cpus}
}

// Runner returns a RunnerInfo for a runner of tenant on pool with env.
func Runner(id sched.RunnerID, tenant sched.TenantID, pool string, env sched.Resources) sched.RunnerInfo {
	return sched.RunnerInfo{Runner: id, Tenant: tenant, Placement: sched.Placement{Pool: pool, Envelope: env}, RequestConcurrency: 4}
}

// Tenant returns a policy entry with weight and cap (0 = none).
func Tenant(weight, cap int) sched.TenantPolicy { return sched.TenantPolicy{Weight: weight, Cap: cap} }

// ConnectRelay steps RelayUp, the inventory and a first empty heartbeat, so
// the relay's runners may queue and be served.
func (h *Harness) ConnectRelay(id sched.RelayID, concurrent int, runners ...sched.RunnerInfo) {
	h.Step(sched.RelayUp{Relay: id, Session: uint64(len(h.Log) + 1)})
	h.Step(sched.RelayInventory{Relay: id, Concurrent: concurrent, Runners: runners})
	h.Step(sched.RelayHeartbeat{Relay: id})
}
