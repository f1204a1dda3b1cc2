package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
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

func TestCompareNeedsPolicies(t *testing.T) {
	c := command("compare", "", true)
	c.SetOut(new(bytes.Buffer))
	c.SetArgs([]string{"../../sim/scenarios/rollout.toml"})
	if err := c.Execute(); err == nil {
		t.Fatal("compare without --policies succeeded")
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
