package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// record then replay: the scenario's own run, under its policy and under
// a candidate file, in text and HTML; the same seed gives the same text.
// spec: BS-18
func TestRecordAndReplay(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "run.vktrace")
	rec := recordCommand()
	var trace bytes.Buffer
	rec.SetOut(&trace)
	rec.SetArgs([]string{"../../sim/scenarios/tenant-flood.toml"})
	if err := rec.Execute(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tr, trace.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	cand := filepath.Join(dir, "cand.toml")
	if err := os.WriteFile(cand, []byte("version = 1\n[tenants.quiet]\nweight = 4\n[tenants.flood]\nweight = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func() string {
		c := replayCommand()
		var out, errOut bytes.Buffer
		c.SetOut(&out)
		c.SetErr(&errOut)
		c.SetArgs([]string{tr, "--policy", cand, "--html", filepath.Join(dir, "r.html")})
		if err := c.Execute(); err != nil {
			t.Fatalf("%v\n%s", err, errOut.String())
		}
		return out.String()
	}
	a, b := run(), run()
	if a != b {
		t.Fatalf("two replays differ:\n%s\n---\n%s", a, b)
	}
	for _, want := range []string{"in force", "candidate", "quiet", "flood", "utilization", "candidate against the policy in force"} {
		if !strings.Contains(a, want) {
			t.Errorf("report lacks %q:\n%s", want, a)
		}
	}
	page, err := os.ReadFile(filepath.Join(dir, "r.html"))
	if err != nil || !bytes.Contains(page, []byte("<svg")) {
		t.Fatalf("html: %v", err)
	}
}
