package demo

import (
	"bytes"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/testlog"
)

// TestDemoRuns runs `vk demo` as a new user would and checks what it
// promises: every job ends as expected, a summary, the traces written.
//
// spec: RELAY-12, FAIL-02, NODE-09
func TestDemoRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo takes up to a minute")
	}
	for _, b := range []string{"git", "bash"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Skip(b + " not installed")
		}
	}
	// --hub-addr: the hub listens where it is told.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hubAddr := ln.Addr().String()
	ln.Close()
	var out bytes.Buffer
	start := time.Now()
	err = Run(t.Context(), Options{Dir: t.TempDir(), Log: testlog.New(t), HubAddr: hubAddr}, &out)
	t.Logf("demo output:\n%s", out.String())
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if d := time.Since(start); d > time.Minute {
		t.Errorf("the demo took %v, want under a minute", d)
	}
	for _, want := range []string{"hub     https://" + hubAddr + " ", "JOB", "TENANT", "RESULT", "failed (script_failure)", "Traces", "All 20 jobs ended as expected"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// TestCommandFlags pins `vk demo`'s flags and their defaults.
func TestCommandFlags(t *testing.T) {
	c := Command()
	if c.Use != "demo" {
		t.Errorf("Use = %q, want demo", c.Use)
	}
	for _, tc := range []struct{ name, def string }{{"keep", "false"}, {"hub-addr", ""}, {"dir", ""}} {
		f := c.Flags().Lookup(tc.name)
		if f == nil {
			t.Errorf("no --%s flag", tc.name)
			continue
		}
		if f.DefValue != tc.def {
			t.Errorf("--%s default %q, want %q", tc.name, f.DefValue, tc.def)
		}
	}
	if err := c.Flags().Parse([]string{"--keep", "--hub-addr", "127.0.0.1:8443"}); err != nil {
		t.Fatal(err)
	}
	if v, _ := c.Flags().GetString("hub-addr"); v != "127.0.0.1:8443" {
		t.Errorf("--hub-addr parsed as %q", v)
	}
	if err := c.Args(c, []string{"extra"}); err == nil {
		t.Error("demo accepted a positional argument")
	}
}
