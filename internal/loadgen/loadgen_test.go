package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/procstat"
)

// childEnv makes the test binary a hub: the tests start "the hub
// binary" as a child process by running themselves with it set, so the
// hub runs in its own process as it does under `vk-bench`.
const childEnv = "VK_LOADGEN_TEST_HUB"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(ServeHub(os.Args[1:], os.Stderr))
	}
	os.Exit(m.Run())
}

// selfHub is the hub command the tests start: this binary.
func selfHub(t testing.TB) []string {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return []string{exe}
}

// A short run against a real hub in a child process: every lifecycle
// makes each of its single requests once, the hub's CPU and memory are
// read, and the floor is measured. It proves the generator drives the
// real protocol end to end, not how fast the hub is.
func TestRunAgainstChildHub(t *testing.T) {
	var hubLog bytes.Buffer
	rep, err := Run(t.Context(), Options{Relays: 2, Nodes: 2, Loops: 4, Warmup: 500 * time.Millisecond,
		Duration: 500 * time.Millisecond, MinLifecycles: 20, FloorDuration: 300 * time.Millisecond, Dir: t.TempDir(),
		HubCommand: selfHub(t), HubEnv: []string{childEnv + "=1"}, HubLog: &hubLog})
	if err != nil {
		t.Fatalf("Run: %v\nhub log:\n%s", err, hubLog.String())
	}
	var text bytes.Buffer
	rep.WriteText(&text)
	t.Logf("report:\n%s", text.String())
	if rep.Lifecycles < 20 {
		t.Fatalf("%d lifecycles in %.1f s, want at least 20\nhub log:\n%s", rep.Lifecycles, rep.WindowSecs, hubLog.String())
	}
	once := map[string]bool{"reserve": true, "claim": true, "outcome": true, "submit": true, "output": true, "settle": true}
	seen := map[string]int{}
	for _, s := range rep.Steps {
		seen[s.Step] = s.Requests
		if s.P50Ms <= 0 || s.P99Ms < s.P50Ms {
			t.Errorf("%s: p50 %.3f ms, p99 %.3f ms", s.Step, s.P50Ms, s.P99Ms)
		}
	}
	for s := range once {
		if seen[s] != rep.Lifecycles {
			t.Errorf("%s: %d requests for %d lifecycles, want one each", s, seen[s], rep.Lifecycles)
		}
	}
	if seen["follow"] < rep.Lifecycles {
		t.Errorf("follow: %d requests for %d lifecycles, want at least one each", seen["follow"], rep.Lifecycles)
	}
	if rep.HubCPUPerLifeMs <= 0 || rep.HubRSS <= 0 || rep.HubMaxRSS < rep.HubRSS {
		t.Errorf("hub usage not read: cpu %.3f ms/lifecycle, rss %d, peak %d", rep.HubCPUPerLifeMs, rep.HubRSS, rep.HubMaxRSS)
	}
	if rep.GenCPUPerLifeMs <= 0 {
		t.Errorf("generator usage not read: cpu %.3f ms/lifecycle", rep.GenCPUPerLifeMs)
	}
	if rep.Floor.FreshPerSec <= 0 || rep.Floor.ResumedPerSec <= 0 || rep.Floor.KeptPerSec <= 0 || rep.Floor.CommitsPerSec <= 0 {
		t.Errorf("floor not measured: %+v", rep.Floor)
	}
	if rep.FractionOfFloor <= 0 {
		t.Errorf("fraction of floor %.3f", rep.FractionOfFloor)
	}
	var js bytes.Buffer
	if err := rep.WriteText(&text); err != nil || !strings.Contains(text.String(), "lifecycles") {
		t.Errorf("text report: %v\n%s", err, text.String())
	}
	var back Report
	if err := rep.WriteJSON(&js); err != nil || json.Unmarshal(js.Bytes(), &back) != nil || back.Lifecycles != rep.Lifecycles {
		t.Errorf("JSON report does not round-trip: %v\n%s", err, js.String())
	}
}

// A hub that exits before listening is reported with its exit, not a
// hang.
func TestStartHubReportsEarlyExit(t *testing.T) {
	_, err := StartHub(t.Context(), []string{"/bin/false"}, t.TempDir(), nil, nil)
	if err == nil || !strings.Contains(err.Error(), "exited before listening") {
		t.Fatalf("StartHub(/bin/false) = %v, want an early-exit error", err)
	}
}

// The hub's listening address is taken from its JSON log, and only
// from the "hub listening" line.
func TestScanHubLog(t *testing.T) {
	log := `{"msg":"hub CA","fingerprint_sha256":"ab"}
{"msg":"web UI listening","addr":"127.0.0.1:1"}
{"msg":"hub listening","addr":"127.0.0.1:4242","state_dir":"/x"}
{"msg":"hub listening","addr":"127.0.0.1:9"}
`
	addr := make(chan string, 2)
	var copied bytes.Buffer
	scanHubLog(strings.NewReader(log), &copied, addr)
	if got := <-addr; got != "127.0.0.1:4242" {
		t.Errorf("address %q, want 127.0.0.1:4242", got)
	}
	if len(addr) != 0 {
		t.Errorf("a second address was sent")
	}
	if copied.String() != log {
		t.Errorf("log not copied whole:\n%s", copied.String())
	}
}

// readProc reads this process's own CPU and memory from /proc.
func TestReadProc(t *testing.T) {
	u := readProc(os.Getpid())
	if u.RSS <= 0 || u.MaxRSS < u.RSS {
		t.Errorf("rss %d, peak %d", u.RSS, u.MaxRSS)
	}
	if (readProc(0) != procstat.Usage{}) {
		t.Errorf("pid 0 should read nothing")
	}
}

// BenchmarkFleet is the go test wrapper of `vk-bench`: 4 relays with
// 8 loops each and 16 nodes against a child hub, for -benchtime (as a
// duration; default 10 s here), once with the relays' connections kept
// alive (kept, hubclient's default) and once with a new connection per
// request (per-request, as before keep-alive), so one run compares them.
// It reports lifecycles/s, each step's p99 and the fraction of the floor.
func BenchmarkFleet(b *testing.B) {
	d := 10 * time.Second
	if f := flag.Lookup("test.benchtime"); f != nil {
		if v, err := time.ParseDuration(f.Value.String()); err == nil {
			d = v
		}
	}
	for _, mode := range []struct {
		name           string
		connPerRequest bool
	}{{"kept", false}, {"per-request", true}} {
		b.Run(mode.name, func(b *testing.B) {
			for b.Loop() {
				rep, err := Run(context.Background(), Options{Relays: 4, Nodes: 16, Warmup: 2 * time.Second, Duration: d,
					FloorDuration: 2 * time.Second, Dir: b.TempDir(), HubCommand: selfHub(b), HubEnv: []string{childEnv + "=1"},
					ConnPerRequest: mode.connPerRequest})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(rep.PerSec, "lifecycles/s")
				b.ReportMetric(rep.FractionOfFloor, "of-floor")
				b.ReportMetric(rep.HubCPUPerLifeMs, "hub-cpu-ms/lifecycle")
				b.ReportMetric(float64(rep.HubMaxRSS)/(1<<20), "hub-peak-MiB")
				for _, s := range rep.Steps {
					b.ReportMetric(s.P99Ms, s.Step+"-p99-ms")
				}
			}
		})
	}
}
