package demo

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/need"
	"github.com/vk-ci/vk/internal/pglaunch"
)

// TestMain lets `vk demo --ha` re-execute this test binary as its
// leading hub, as it re-executes vk.
func TestMain(m *testing.M) {
	RunChildIfAsked()
	os.Exit(m.Run())
}

// TestDemoHA runs `vk demo --ha`: two hubs on a private PostgreSQL, the
// leader a child process SIGKILLed mid-pipeline; the standby takes
// over within the lease's bound and every job still ends as the sample
// expects, each handed out by GitLab once.
//
// spec: BS-10, BS-12, BS-13, BS-15, DECISIONS 16
func TestDemoHA(t *testing.T) {
	// Not skipped in -short: it takes about 35 s.
	for _, b := range []string{"git", "bash"} {
		if _, err := exec.LookPath(b); err != nil {
			need.Binary(t, b, b)
		}
	}
	if pglaunch.BinDir() == "" {
		need.Missingf(t, "PostgreSQL server binaries not found (install the Debian package postgresql)")
	}
	var out bytes.Buffer
	dir := filepath.Join(t.TempDir(), "demo")
	start := time.Now()
	err := Run(t.Context(), Options{Dir: dir, HA: true}, &out)
	t.Logf("demo output:\n%s", out.String())
	if err != nil {
		b, _ := os.ReadFile(filepath.Join(dir, "fleet.log"))
		t.Fatalf("Run: %v\nfleet.log:\n%s", err, b)
	}
	t.Logf("the demo took %v", time.Since(start).Round(time.Second))
	for _, want := range []string{"standby https://", "SIGKILL to hub-a", "hub-b leads (epoch 2)", "All 20 jobs ended as expected", "Failover: hub-a (process "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	m := regexp.MustCompile(`hub-b led ([0-9.]+) s later`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatal("no failover time printed")
	}
	// The lease (5 s) expires at most a TTL after the last renew; the
	// standby tries every third of it: 10 s is the goal's bound.
	if s, _ := strconv.ParseFloat(m[1], 64); s <= 0 || s > 10 {
		t.Errorf("failover took %s s, want within 10 s", m[1])
	}
	// The leader ran from a configuration in the fleet's state.
	if _, err := os.Stat(filepath.Join(dir, "fleet", "hub", "hub.toml")); err != nil {
		t.Errorf("the leader's configuration is not in the fleet's state: %v", err)
	}
}

// --ha refuses to combine with --containers or --microvm, before
// anything starts.
func TestDemoHAExcludes(t *testing.T) {
	for _, o := range []Options{{HA: true, Containers: true, containersCheck: func() error { return nil }}, {HA: true, MicroVM: true,
		microvmCheck: func() (string, error) { return "/bin/true", nil }}} {
		err := Run(t.Context(), Options{Dir: t.TempDir(), HA: o.HA, Containers: o.Containers, MicroVM: o.MicroVM,
			containersCheck: o.containersCheck, microvmCheck: o.microvmCheck}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), "--ha") {
			t.Errorf("Run(%+v) = %v, want a refusal naming --ha", o, err)
		}
	}
}
