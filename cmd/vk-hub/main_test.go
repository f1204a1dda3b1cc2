package main

import (
	"bytes"
	"strings"
	"testing"
)

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

// serve --help names --config's value FILE, not a fragment of its help.
func TestServeHelp(t *testing.T) {
	out, err := run(t, "serve", "--help")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "--config FILE") || strings.Contains(out, "--config version") {
		t.Errorf("serve --help:\n%s\nwant --config FILE", out)
	}
}

// Unknown commands fail at every level.
func TestUnknownCommand(t *testing.T) {
	for _, args := range [][]string{{"bogus"}, {"nodes", "undrian", "n1"}, {"serve", "extra"}} {
		if _, err := run(t, args...); err == nil {
			t.Errorf("vk-hub %v succeeded", args)
		}
	}
}
