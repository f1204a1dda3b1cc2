package loadgen

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/pgtest"
)

// haFleet runs TestFailoverAtFleetSize at the size of issue 17's goal:
// 1,000 node sessions on every instance, 50 relay loops, 20 leader
// SIGKILLs at the default 5 s TTL and ingest at BS-09's rate. Off by
// default (it takes several minutes); the default run is a small fleet
// under a short TTL.
var (
	haFleet    = flag.Bool("ha.fleet", false, "TestFailoverAtFleetSize at the goal's size (1,000 nodes, 50 loops, 20 kills, 5 s TTL)")
	haKills    = flag.Int("ha.kills", 0, "leader SIGKILLs (0: 20 with -ha.fleet, else 2)")
	haNodes    = flag.Int("ha.nodes", 0, "lightweight nodes (0: 1,000 with -ha.fleet, else 60)")
	haIngest   = flag.Duration("ha.ingest", 0, "ingest window (0: 10 s with -ha.fleet, else 2 s)")
	haRate     = flag.Int("ha.rate", 0, "reports/s sent while ingest is measured (0: 4,000 with -ha.fleet, else 1,000)")
	haHubLog   = flag.Bool("ha.hublog", false, "log the hubs' output")
	haJSONPath = flag.String("ha.json", "", "write the report as JSON here")
)

// Two real hub processes on one throwaway PostgreSQL under the lease,
// lightweight nodes each holding a session to both and sending every
// report to both, relays whose loops and sessions know both instances:
// the leader is SIGKILLed again and again (alternating), and each time
// the first grant by the new leader comes within BS-12's 10 s. (The
// lease expires at most a TTL after the last renew and the standby tries
// every third of it; then the relays, which found no leader meanwhile,
// come back on their own backoff, 1 s, 2 s, 4 s…: that, not the TTL, is
// most of the rest under a short TTL.) The killed
// instance is started again as a standby and must hold every node's
// session before the next kill. Then report ingest is measured on both
// while the nodes send reports at a fixed rate.
//
// spec: BS-09, BS-10, BS-12, BS-13, BS-14, BS-15
func TestFailoverAtFleetSize(t *testing.T) {
	o := HAOptions{Nodes: 60, Relays: 2, Loops: 10, Kills: 2, TTLMillis: 1500, IngestWindow: 2 * time.Second, IngestRate: 1000}
	if *haFleet {
		o = HAOptions{Nodes: 1000, Relays: 5, Loops: 50, Kills: 20, IngestWindow: 10 * time.Second, IngestRate: 4000}
	}
	o.Kills = cmpOr(*haKills, o.Kills)
	o.Nodes = cmpOr(*haNodes, o.Nodes)
	o.IngestRate = cmpOr(*haRate, o.IngestRate)
	if *haIngest > 0 {
		o.IngestWindow = *haIngest
	}
	srv := pgtest.Start(t)
	o.DSN = srv.NewSchema(t)
	o.Dir, o.HubCommand, o.HubEnv = t.TempDir(), selfHub(t), []string{childEnv + "=1"}
	var hubLog bytes.Buffer
	o.HubLog = &hubLog
	if *haHubLog {
		o.HubLog = testWriter{t}
	}
	o.Progress = testWriter{t}
	rep, err := RunHA(t.Context(), o)
	if err != nil {
		t.Fatalf("RunHA: %v\nhub log (last 8 KiB):\n%s", err, tail(hubLog.Bytes(), 8<<10))
	}
	if len(rep.Failovers) != o.Kills {
		t.Fatalf("%d failovers measured, want %d", len(rep.Failovers), o.Kills)
	}
	ttl := time.Duration(cmpOr(o.TTLMillis, 5000)) * time.Millisecond
	const limit = 10 * time.Second // BS-12
	var first, all, elected []time.Duration
	for i, f := range rep.Failovers {
		first, all, elected = append(first, f.FirstGrant), append(all, f.AllLoops), append(elected, f.Elected)
		if f.FirstGrant <= 0 || f.FirstGrant > limit {
			t.Errorf("kill %d (%s): first grant by the new leader %v after the kill, want within %v", i+1, f.Killed, f.FirstGrant, limit)
		}
	}
	t.Logf("%d kills, %d nodes on each instance, %d loops, ttl %v: elected %s; first grant %s; all loops %s",
		len(rep.Failovers), o.Nodes, o.Loops, ttl, medWorst(elected), medWorst(first), medWorst(all))
	t.Logf("%d lifecycles completed, %d ended by a failover; errors seen: %q", rep.Lifecycles, rep.Failed, rep.Errors)
	in := rep.Ingest
	t.Logf("ingest: %d sessions, %.0f reports/s offered (%d B each) for %.1f s: standby ingested %.0f/s at %.1f µs CPU each (%.2f cores, RSS %d MiB); leader %.1f µs per report (%.2f cores)",
		in.Sessions, in.OfferedPerSec, in.ReportBytes, in.WindowSecs, in.StandbyPerSec, in.StandbyCPUPerReportUs, in.StandbyCores,
		in.StandbyRSS>>20, in.LeaderCPUPerReportUs, in.LeaderCores)
	if in.StandbyPerSec < 0.9*in.OfferedPerSec || in.StandbyCPUPerReportUs <= 0 {
		t.Errorf("the standby ingested %.0f reports/s of %.0f offered (CPU %.1f µs each)", in.StandbyPerSec, in.OfferedPerSec, in.StandbyCPUPerReportUs)
	}
	if *haJSONPath != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(*haJSONPath, b, 0o644); err != nil {
			t.Error(err)
		}
	}
}

// medWorst formats the median and the worst of d.
func medWorst(d []time.Duration) string {
	s := slices.Clone(d)
	slices.Sort(s)
	return "median " + s[len(s)/2].Round(time.Millisecond).String() + ", worst " + s[len(s)-1].Round(time.Millisecond).String()
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// testWriter logs each write as a test log line.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(b, "\n")))
	return len(b), nil
}
