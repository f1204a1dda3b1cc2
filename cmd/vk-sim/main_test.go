package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vk-ci/vk/sim"
)

func TestRunCommand(t *testing.T) {
	html := filepath.Join(t.TempDir(), "r.html")
	c := command("run", "", false)
	var out bytes.Buffer
	c.SetOut(&out)
	c.SetArgs([]string{"../../sim/scenarios/rollout.toml", "--seed", "3", "--html", html})
	if err := c.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"scenario rollout  seed 3", "quota-margin/m=0", "decisions/s"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	b, err := os.ReadFile(html)
	if err != nil || !bytes.Contains(b, []byte("<svg")) {
		t.Fatalf("html report: %v, %d bytes", err, len(b))
	}
}

// compare without --policies compares every known policy; with it, only
// those named.
func TestComparePolicies(t *testing.T) {
	c := command("compare", "", true)
	var all bytes.Buffer
	c.SetOut(&all)
	c.SetArgs([]string{"../../sim/scenarios/rollout.toml"})
	if err := c.Execute(); err != nil {
		t.Fatalf("compare without --policies: %v", err)
	}
	for _, p := range sim.PolicyNames {
		if !strings.Contains(all.String(), p) {
			t.Errorf("compare without --policies left out %s:\n%s", p, all.String())
		}
	}
	c = command("compare", "", true)
	var out bytes.Buffer
	c.SetOut(&out)
	c.SetArgs([]string{"../../sim/scenarios/rollout.toml", "--policies", "vk,quota-margin"})
	if err := c.Execute(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "accept-then-wait") || !strings.Contains(out.String(), "quota-margin/m=8") {
		t.Fatalf("wrong policies:\n%s", out.String())
	}
}

// goals runs every goal scenario of --dir on every seed and prints one
// Markdown table row per figure, each policy a column and vk's count of
// seeds meeting the goal at the end; a bad seed list is refused.
func TestGoalsCommand(t *testing.T) {
	dir := t.TempDir()
	tiny := `duration = "20m"
warmup = "5m"
drain = "10m"
[[nodes]]
count = 2
cpus = 32
mem_gib = 128
[[tenants]]
name = "a"
[[tenants]]
name = "b"
weight = 3
[[jobs]]
name = "v2"
tenant = "a"
cpus = 2
mem_gib = 8
per_hour = 300
runtime = { kind = "shifted-exp", shift = "1m", mean = "2m" }
[[jobs]]
name = "v32"
tenant = "b"
cpus = 32
mem_gib = 128
per_hour = 4
runtime = { kind = "fixed", value = "5m" }
`
	for _, name := range sim.GoalScenarios {
		if err := os.WriteFile(filepath.Join(dir, name+".toml"), []byte("name = \""+name+"\"\n"+tiny), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c := goalsCommand()
	var out, errs bytes.Buffer
	c.SetOut(&out)
	c.SetErr(&errs)
	c.SetArgs([]string{"--dir", dir, "--seeds", "1,2", "--policies", "vk,pull-fifo,greedy-backfill"})
	if err := c.Execute(); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{"seeds 1, 2", "| scenario | figure | goal | vk | pull-fifo | greedy-backfill | vk met |",
		"| reference-090 | 32-vCPU p99 wait | ≤ 300 s |", "| sizes-backlogged | Jain's index over share/weight | ≥ 0.99 |", "/2 |"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "\n| "); n != len(sim.Metrics)+1 {
		t.Errorf("%d table rows, want a header and %d figures:\n%s", n, len(sim.Metrics), got)
	}
	if !strings.Contains(errs.String(), "reference-110 seed 2 done") {
		t.Errorf("no progress on stderr: %q", errs.String())
	}
	c = goalsCommand()
	c.SetOut(new(bytes.Buffer))
	c.SetArgs([]string{"--dir", dir, "--seeds", "1,x"})
	if err := c.Execute(); err == nil || !strings.Contains(err.Error(), "--seeds") {
		t.Fatalf("bad seeds: %v", err)
	}
}
