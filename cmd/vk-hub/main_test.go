package main

import (
	"bytes"
	"os"
	"path/filepath"
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

// The operator commands find the admin socket in the state directory the
// hub's config names (--config, else $VK_HUB_CONFIG); --state-dir wins.
func TestAdminCommandsReadTheConfig(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "hub.toml")
	state := filepath.Join(dir, "from-config")
	if err := os.WriteFile(cfg, []byte("version = 1\nstate_dir = \""+state+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	looked := func(err error) string {
		if err == nil {
			return ""
		}
		_, after, _ := strings.Cut(err.Error(), "looked for ")
		return after
	}
	sock := func(d string) string { return filepath.Join(d, "admin.sock") }
	t.Setenv(configEnv, "")
	if _, err := run(t, "nodes", "list", "--config", cfg); looked(err) != sock(state) {
		t.Errorf("with --config: %v, want it to look for %s", err, sock(state))
	}
	if _, err := run(t, "--config", cfg, "nodes", "list", "--state-dir", dir); looked(err) != sock(dir) {
		t.Errorf("with --config and --state-dir: %v, want %s", err, sock(dir))
	}
	t.Setenv(configEnv, cfg)
	if _, err := run(t, "queue"); looked(err) != sock(state) {
		t.Errorf("with $%s: %v, want %s", configEnv, err, sock(state))
	}
	t.Setenv(configEnv, filepath.Join(dir, "absent.toml"))
	if _, err := run(t, "queue"); err == nil || !strings.Contains(err.Error(), "absent.toml") {
		t.Errorf("with a missing config: %v, want an error naming it", err)
	}
}
