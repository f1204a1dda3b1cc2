package main

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/enrol"
	"github.com/vk-ci/vk/hub/pki"
	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/hub/store/memstore"
	"github.com/vk-ci/vk/node"
)

func TestReadToken(t *testing.T) {
	tests := []struct {
		flag, stdin, want string
		err               bool
	}{
		{flag: "vkj_node_abc", want: "vkj_node_abc"},
		{flag: "-", stdin: "vkj_node_xyz\n", want: "vkj_node_xyz"},
		{flag: "-", stdin: "  vkj_node_xyz  ", want: "vkj_node_xyz"},
		{flag: "-", stdin: "", err: true},
		{flag: "", err: true},
	}
	for _, tt := range tests {
		got, err := readToken(tt.flag, strings.NewReader(tt.stdin))
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("readToken(%q, %q) = %q, %v; want %q (error %v)", tt.flag, tt.stdin, got, err, tt.want, tt.err)
		}
	}
}

func TestNodeRunNeedsJoin(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "node.toml")
	toml := "version = 1\n[node]\nstate_dir = \"" + filepath.Join(dir, "state") + "\"\nrunner = \"none\"\n[resources]\nmem = \"1G\"\ndisk = \"1G\"\ncpus = 1\n"
	if err := os.WriteFile(cfg, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := nodeCommand()
	cmd.SetArgs([]string{"run", "--config", cfg})
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	if err := cmd.Execute(); !errors.Is(err, node.ErrNotJoined) {
		t.Errorf("vk node run without join = %v, want ErrNotJoined", err)
	}
	cmd = nodeCommand()
	cmd.SetArgs([]string{"run", "--config", filepath.Join(dir, "absent.toml")})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "absent.toml") {
		t.Errorf("vk node run with a missing config = %v", err)
	}
}

// `vk node join` against the hub's real enrolment endpoint over TLS: the
// token comes from stdin, the CA is pinned with --ca, and the enrolment
// lands where `vk node run` reads it.
func TestNodeJoin(t *testing.T) {
	b, err := pki.Ensure(t.TempDir(), []string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	st := memstore.New()
	enr, err := enrol.New(enrol.Config{Store: st, CAPEM: b.CACertPEM})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	enr.Register(mux)
	srv := httptest.NewUnstartedServer(mux)
	srv.TLS = pki.ServerConfig(b.Server)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	tok, err := enr.NewToken(t.Context(), store.KindNode, 0, "operator")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, b.CACertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	join := func(token string) (string, error) {
		cmd := nodeCommand()
		var out bytes.Buffer
		cmd.SetArgs([]string{"join", srv.URL, "--token", "-", "--ca", ca, "--state-dir", state, "--name", "ci-1"})
		cmd.SetIn(strings.NewReader(token + "\n"))
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		err := cmd.Execute()
		return out.String(), err
	}
	out, err := join(tok.Text)
	if err != nil {
		t.Fatalf("join: %v\n%s", err, out)
	}
	id, err := node.LoadIdentity(state)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "useradd --system") || !strings.Contains(out, "allow_root_jobs = true") {
		t.Errorf("join output does not tell how to create the job user:\n%s", out)
	}
	if !strings.Contains(out, id.NodeID) || id.HubURL != srv.URL || !bytes.Equal(id.CAPEM, b.CACertPEM) {
		t.Errorf("join printed %q; identity %+v", out, id)
	}
	p, err := st.GetPrincipal(t.Context(), id.NodeID)
	if err != nil || !bytes.Equal(p.PublicKey, id.Key.Public().(ed25519.PublicKey)) {
		t.Errorf("hub principal %+v, %v: not the node's key", p, err)
	}
	if _, err := join(tok.Text); err == nil {
		t.Error("a second join with the same token and no --replace succeeded")
	}

	// Without --state-dir and --name, join takes both from the node's
	// config, as vk node run will.
	state2 := filepath.Join(dir, "state2")
	cfgPath := filepath.Join(dir, "node.toml")
	toml := "version = 1\n[node]\nname = \"ci-17\"\nstate_dir = \"" + state2 + "\"\n"
	if err := os.WriteFile(cfgPath, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	tok2, err := enr.NewToken(t.Context(), store.KindNode, 0, "operator")
	if err != nil {
		t.Fatal(err)
	}
	cmd := nodeCommand()
	cmd.SetArgs([]string{"join", srv.URL, "--token", "-", "--ca", ca, "--config", cfgPath})
	cmd.SetIn(strings.NewReader(tok2.Text + "\n"))
	cmd.SetOut(&bytes.Buffer{})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("join --config: %v", err)
	}
	id2, err := node.LoadIdentity(state2)
	if err != nil {
		t.Fatalf("no enrolment in the config's state_dir: %v", err)
	}
	if p, err := st.GetPrincipal(t.Context(), id2.NodeID); err != nil || p.Name != "ci-17" {
		t.Errorf("principal %+v, %v: want the config's name ci-17", p, err)
	}
}

// An unknown `vk node` subcommand fails instead of printing help with
// status 0.
func TestNodeUnknownSubcommand(t *testing.T) {
	cmd := nodeCommand()
	cmd.SetArgs([]string{"strat"})
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "unknown command") {
		t.Errorf("vk node strat = %v, want an unknown command error", err)
	}
}
