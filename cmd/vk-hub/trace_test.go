package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/wtrace"
	"github.com/vk-ci/vk/sim"
	"github.com/vk-ci/vk/sim/replay"
)

// stateWithTrace is a state directory whose trace holds a simulated
// tenant-flood run that started six hours ago (no hub runs).
func stateWithTrace(t *testing.T) string {
	t.Helper()
	s, err := sim.LoadScenario("../../sim/scenarios/tenant-flood.toml")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-6 * time.Hour).Truncate(time.Millisecond)
	var buf bytes.Buffer
	if _, err := replay.WriteSimTrace(context.Background(), &buf, s, 0, start); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	td := wtrace.Config{}.WithDefaults(dir).Dir
	if err := os.MkdirAll(td, 0o700); err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(td, fmt.Sprintf("trace-%015d.vktrace", start.UnixMilli()))
	if err := os.WriteFile(name, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// trace export writes the last --since as one trace: the state in force,
// then the records from the cut on.
// spec: BS-18
func TestTraceExport(t *testing.T) {
	dir := stateWithTrace(t)
	out, err := run(t, "--state-dir", dir, "trace", "export", "--since", "2h")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	h, recs, err := wtrace.ReadAll(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	cut := time.Now().Add(-2 * time.Hour).UnixMilli()
	if h.Start < cut-60_000 || h.Start > cut+60_000 || len(recs) == 0 || recs[0].K != wtrace.KindPolicy {
		t.Fatalf("export header %+v, first record %+v", h, recs[0])
	}
}

// capacity-policy set --dry-run replays the trace under the policy in
// force and the file's and prints the deltas; it never reaches the hub
// (none runs here), so nothing changes.
// spec: BS-18
func TestPolicyDryRun(t *testing.T) {
	dir := stateWithTrace(t)
	cand := filepath.Join(t.TempDir(), "cand.toml")
	if err := os.WriteFile(cand, []byte("version = 1\n[tenants.quiet]\nweight = 4\n[tenants.flood]\nweight = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "--state-dir", dir, "capacity-policy", "set", "--dry-run", "--window", "24h", cand)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"dry run of", "in force", "candidate", "candidate against the policy in force", "quiet: share", "nothing changed"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run output lacks %q:\n%s", want, out)
		}
	}
	// without --dry-run, set still goes to the hub (and fails: none runs)
	if _, err := run(t, "--state-dir", dir, "capacity-policy", "set", cand); err == nil {
		t.Fatal("set without --dry-run succeeded with no hub")
	}
}
