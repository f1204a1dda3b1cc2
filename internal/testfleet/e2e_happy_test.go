package testfleet_test

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/demo"
	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/testfleet"
	"github.com/vk-ci/vk/internal/testfleet/fleettest"
	"github.com/vk-ci/vk/proto/client"
)

// checkTraces asserts that every job's GitLab trace is byte-identical to
// the output the hub stored from the node (API-39), and returns how many
// bytes were compared (fleettest.CheckTraces).
func checkTraces(t *testing.T, ctx context.Context, tn *testfleet.Tenant, pl gitlabfake.Pipeline) int {
	t.Helper()
	return fleettest.CheckTraces(t, ctx, tn, pl)
}

// zipNames lists the files of a zip archive.
func zipNames(t *testing.T, data []byte) []string {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatalf("artifact is not a zip: %v", err)
	}
	var out []string
	for _, f := range zr.File {
		out = append(out, f.Name)
	}
	sort.Strings(out)
	return out
}

// handoffs returns, per job, the time from GitLab handing the job out (the
// 201 that made it running) to the relay committing it with PUT
// state=running, which it sends only once the node accepted the job
// (GL-08): the fleet's hand-off overhead.
func handoffs(t *testing.T, tn *testfleet.Tenant, pl gitlabfake.Pipeline) []time.Duration {
	commits := map[string]time.Time{}
	for _, r := range tn.GitLab.RequestsTo(gitlabfake.RouteUpdateJob) {
		var body struct {
			State string `json:"state"`
		}
		if json.Unmarshal(r.Body, &body) != nil || body.State != "running" {
			continue
		}
		if _, seen := commits[r.Path]; !seen {
			commits[r.Path] = r.At
		}
	}
	var out []time.Duration
	for name, id := range pl.Jobs {
		handed := tn.FirstAt(id, gitlabfake.StateRunning)
		committed, ok := commits[fmt.Sprintf("/api/v4/jobs/%d", id)]
		if handed.IsZero() || !ok {
			continue
		}
		d := committed.Sub(handed)
		if d > time.Second {
			t.Logf("slow hand-off: %s/%s #%d took %v", tn.Spec.Name, name, id, d)
		}
		out = append(out, d)
	}
	return out
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p*float64(len(s)) + 0.5)
	if i >= len(s) {
		i = len(s) - 1
	}
	if i > 0 && p < 1 {
		i--
	}
	return s[i]
}

// TestHappyPath runs the demo's sample (two tenants, 20 jobs, three stages)
// on a two-node fleet with a real registry: every job ends in its expected
// state, each GitLab trace equals the node's output as the hub stored it,
// the build's artifact reached GitLab and was used by later stages, and a
// second run of the pipelines restores the cache.
//
// spec: RELAY-11, RELAY-12, API-15, API-39, NODE-13, GL-08, GL-14, FAIL-01, FAIL-02, XFER-01, XFER-06, XFER-07
func TestHappyPath(t *testing.T) {
	samples := demo.Sample()
	f := newFleet(t, demo.FleetOptions(samples, true))
	ctx := timeout(t, 3*time.Minute)

	var all []time.Duration
	for run := 1; run <= 2; run++ {
		loaded, err := demo.Load(f, samples)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range loaded {
			got, err := l.Tenant.WaitFinished(ctx, l.Pipeline)
			if err != nil {
				t.Fatal(err)
			}
			for name, want := range l.Sample.Want {
				if got[name] != want {
					ji, _ := l.Tenant.GitLab.Job(l.Pipeline.Jobs[name])
					t.Errorf("run %d %s/%s = %s (%s), want %s; trace:\n%s", run, l.Sample.Name, name, got[name], ji.FailureReason, want, ji.Trace)
				}
			}
			broken, _ := l.Tenant.GitLab.Job(l.Pipeline.Jobs[demo.FailingJob])
			if l.Sample.Name == "web" && (broken.FailureReason != "script_failure" || broken.ExitCode != 3) {
				t.Errorf("%s: failure %q exit %d, want script_failure exit 3", demo.FailingJob, broken.FailureReason, broken.ExitCode)
			}
			n := checkTraces(t, ctx, l.Tenant, l.Pipeline)
			t.Logf("run %d %s: %d jobs, %d trace bytes identical to the hub's output", run, l.Sample.Name, len(l.Pipeline.Jobs), n)

			// The build's artifact reached GitLab, and the test stage
			// used it (test.sh fails without dist/greet).
			build, _ := l.Tenant.GitLab.Job(l.Pipeline.Jobs[demo.CacheJob])
			if len(build.Artifacts) == 0 {
				t.Errorf("%s build uploaded no artifact", l.Sample.Name)
			} else if names := zipNames(t, build.Artifacts[0].Data); !contains(names, "dist/greet") {
				t.Errorf("%s build artifact holds %v, want dist/greet", l.Sample.Name, names)
			}
			wantCache := "deps: cache miss"
			if run == 2 {
				wantCache = "deps: cache hit"
			}
			if !strings.Contains(string(build.Trace), wantCache) {
				t.Errorf("run %d %s build trace lacks %q:\n%s", run, l.Sample.Name, wantCache, build.Trace)
			}
			all = append(all, handoffs(t, l.Tenant, l.Pipeline)...)
		}
	}
	if len(all) == 0 {
		t.Fatal("no hand-off measured: no PUT state=running seen")
	}
	// The relays queued reservations and never asked /v1/capacity
	// (API-15): the hub's request counter, as Prometheus scrapes it.
	reqs := hubRequests(t, f)
	if reqs[client.RouteReserve] == 0 || reqs[client.RouteSubmit] == 0 {
		t.Errorf("hub request counts %v lack reservations or submissions: the metric is not what this test reads", reqs)
	}
	if n := reqs[client.RouteCapacity]; n != 0 {
		t.Errorf("the relays called %s %v times; vk-gitlab queues reservations instead (API-15)", client.RouteCapacity, n)
	}
	t.Logf("hand-off (GitLab 201 → node accepted, committed): n=%d p50=%v p99=%v max=%v",
		len(all), percentile(all, 0.5), percentile(all, 0.99), percentile(all, 1))
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// hubRequests scrapes the hub's /metrics over its TLS listener and sums
// vk_hub_requests_total by route.
func hubRequests(t *testing.T, f *testfleet.Fleet) map[string]float64 {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(f.Hub().CAPEM()) {
		t.Fatal("hub CA: no certificate")
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}}}
	resp, err := hc.Get("https://" + f.Hub().Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d, %v", resp.StatusCode, err)
	}
	out := map[string]float64{}
	re := regexp.MustCompile(`^vk_hub_requests_total\{(.*)\} (\S+)$`)
	route := regexp.MustCompile(`route="([^"]*)"`)
	for _, line := range strings.Split(string(body), "\n") {
		m := re.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		r := route.FindStringSubmatch(m[1])
		v, err := strconv.ParseFloat(m[2], 64)
		if r == nil || err != nil {
			t.Fatalf("metrics line %q", line)
		}
		out[r[1]] += v
	}
	return out
}
