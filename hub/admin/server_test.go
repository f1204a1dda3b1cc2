package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"
	"github.com/vk-ci/vk/hub/enrol"
	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/hub/store/memstore"
	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/proto/client"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

var start = time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC)

const fingerprint = "ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12"

// env is a hub's admin socket served from a memstore and a fakeBackend.
type env struct {
	sock string
	st   *memstore.Store
	be   *fakeBackend
	clk  *clock.Fake
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dir, err := os.MkdirTemp("", "vkadm") // short: unix socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	e := &env{sock: SocketPath(dir), st: memstore.New(), clk: clock.NewFake(start), be: &fakeBackend{nodes: map[string]*Node{
		"node-b": {ID: "node-b", Name: "build-2", State: "ready", Ceiling: NoCeiling, MaxConcurrency: 8,
			Capacity: client.Envelope{Mem: 128 * client.GiB, CPUs: 32, Disk: 2 * 1024 * client.GiB}, Jobs: 1, LastSeen: start.Add(-5 * time.Second)},
		"node-a": {ID: "node-a", Name: "build-1", State: "ready", Pools: []string{"linux"}, Labels: []string{"kvm", "ssd"}, Ceiling: 6,
			Capacity: client.Envelope{Mem: 64 * client.GiB, CPUs: 16, Disk: 500 * client.GiB}, Jobs: 3, Reservations: 2, LastSeen: start.Add(-2 * time.Second)},
		"node-c": {ID: "node-c", State: "unreachable", Ceiling: 0},
	}}}
	log := testlog.New(t)
	enr, err := enrol.New(enrol.Config{Store: e.st, CAPEM: []byte("ca"), Clock: e.clk, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(Config{Store: e.st, Backend: e.be, Enroller: enr, CAFingerprint: fingerprint, Clock: e.clk, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := srv.Listen(e.sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := srv.ServeOn(ctx, ln); err != nil {
			t.Errorf("ServeOn: %v", err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	return e
}

// run runs `vk-hub <args>` against the socket and returns stdout, stderr
// and the error.
func (e *env) run(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	root := &cobra.Command{Use: "vk-hub", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(Commands(func() string { return e.sock })...)
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs(args)
	err := root.ExecuteContext(t.Context())
	return out.String(), errb.String(), err
}

func (e *env) mustRun(t *testing.T, args ...string) (string, string) {
	t.Helper()
	out, errOut, err := e.run(t, args...)
	if err != nil {
		t.Fatalf("vk-hub %s: %v", strings.Join(args, " "), err)
	}
	return out, errOut
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(string(want), got); d != "" {
		t.Errorf("%s (-golden +got):\n%s", path, d)
	}
}

func lastAudit(t *testing.T, st store.Store) store.AuditEntry {
	t.Helper()
	a, err := st.ListAudit(t.Context(), 1)
	if err != nil || len(a) != 1 {
		t.Fatalf("ListAudit = %v, %v", a, err)
	}
	return a[0]
}

func TestSocketMode(t *testing.T) {
	e := newEnv(t)
	fi, err := os.Stat(e.sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %v, want a socket with 0600", e.sock, fi.Mode())
	}
	// A second hub may not take a live socket over.
	srv, _ := NewServer(Config{Store: e.st, Backend: e.be, Enroller: &enrol.Enroller{}})
	if _, err := srv.Listen(e.sock); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("Listen on a live socket = %v, want in use", err)
	}
}

func TestStaleSocketReplaced(t *testing.T) {
	dir, _ := os.MkdirTemp("", "vkadm")
	defer os.RemoveAll(dir)
	path := SocketPath(dir)
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	srv, _ := NewServer(Config{Store: memstore.New(), Backend: &fakeBackend{}, Enroller: &enrol.Enroller{}})
	ln, err := srv.Listen(path)
	if err != nil {
		t.Fatalf("Listen over a stale file = %v", err)
	}
	ln.Close()
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket file left after close: %v", err)
	}
}

func TestNoHub(t *testing.T) {
	path := filepath.Join(t.TempDir(), "admin.sock")
	root := &cobra.Command{Use: "vk-hub", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(Commands(func() string { return path })...)
	root.SetArgs([]string{"nodes", "list"})
	root.SetOut(new(bytes.Buffer))
	err := root.ExecuteContext(t.Context())
	if !errors.Is(err, ErrNoHub) || !strings.Contains(err.Error(), "is vk-hub running? looked for "+path) {
		t.Errorf("nodes list without a hub = %v", err)
	}
}

// token create prints the token alone on stdout and stores its hash.
//
// spec: AUTH-08
func TestTokenCreate(t *testing.T) {
	e := newEnv(t)
	out, errOut := e.mustRun(t, "token", "create", "--kind", "gitlab", "--ttl", "2h")
	tok := strings.TrimSuffix(out, "\n")
	if !strings.HasPrefix(tok, "vkj_gitlab_") || strings.Contains(tok, "\n") {
		t.Errorf("stdout %q, want the token alone", out)
	}
	golden(t, "token_create_stderr", errOut)
	toks, _ := e.st.ListTokens(t.Context())
	if len(toks) != 1 || toks[0].Hash != store.Sum([]byte(tok)) || !toks[0].Expires.Equal(start.Add(2*time.Hour)) {
		t.Errorf("stored tokens %+v", toks)
	}
	if a := lastAudit(t, e.st); a.Action != "token.create" || !strings.HasPrefix(a.Actor, "operator:") {
		t.Errorf("audit %+v", a)
	}
	for _, args := range [][]string{{"token", "create", "--kind", "api"}, {"token", "create", "--kind", "node", "--ttl", "999h"}} {
		if _, _, err := e.run(t, args...); err == nil {
			t.Errorf("vk-hub %v succeeded", args)
		}
	}
}

// relays list (golden) and relays remove.
func TestRelays(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	for _, p := range []store.Principal{
		{ID: "relay-aaaa", Kind: store.KindRelay, PublicKey: make([]byte, 32), Name: "ci-1.example", Created: start.Add(-48 * time.Hour)},
		{ID: "relay-bbbb", Kind: store.KindRelay, PublicKey: make([]byte, 32), Name: "ci-2.example", Created: start.Add(-24 * time.Hour)},
		{ID: "node-x", Kind: store.KindNode, PublicKey: make([]byte, 32), Created: start},
	} {
		if err := e.st.CreatePrincipal(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	e.st.RemovePrincipal(ctx, "relay-bbbb", start.Add(-time.Hour))
	out, _ := e.mustRun(t, "relays", "list")
	golden(t, "relays_list", out)

	e.mustRun(t, "relays", "remove", "relay-aaaa")
	p, _ := e.st.GetPrincipal(ctx, "relay-aaaa")
	if !p.Removed || !p.RemovedAt.Equal(start) {
		t.Errorf("after remove: %+v", p)
	}
	if d := cmp.Diff([]string{"relay-aaaa"}, e.be.removed); d != "" {
		t.Errorf("Backend.RelayRemoved calls (-want +got):\n%s", d)
	}
	if a := lastAudit(t, e.st); a.Action != "relay.remove" || a.Subject != "relay-aaaa" {
		t.Errorf("audit %+v", a)
	}
	for _, id := range []string{"relay-zzzz", "node-x"} {
		if _, _, err := e.run(t, "relays", "remove", id); !errors.Is(err, ErrNotFound) {
			t.Errorf("relays remove %s = %v, want not found", id, err)
		}
	}
}

// nodes list (golden), pools, ceiling, drain.
//
// spec: OPS-01, OPS-02
func TestNodes(t *testing.T) {
	e := newEnv(t)
	out, _ := e.mustRun(t, "nodes", "list")
	golden(t, "nodes_list", out)

	e.mustRun(t, "nodes", "pools", "node-b", "linux, gpu")
	e.mustRun(t, "nodes", "pools", "node-a", "")
	e.mustRun(t, "nodes", "ceiling", "node-b", "4")
	e.mustRun(t, "nodes", "ceiling", "node-a", "none")
	e.mustRun(t, "nodes", "drain", "node-c")
	if a := lastAudit(t, e.st); a.Action != "node.drain" || a.Subject != "node-c" {
		t.Errorf("audit %+v", a)
	}
	b, a, c := e.be.nodes["node-b"], e.be.nodes["node-a"], e.be.nodes["node-c"]
	if !cmp.Equal(b.Pools, []string{"linux", "gpu"}) || len(a.Pools) != 0 || b.Ceiling != 4 || a.Ceiling != NoCeiling || c.State != "draining" {
		t.Errorf("backend after changes: a=%+v b=%+v c=%+v", a, b, c)
	}
	e.mustRun(t, "nodes", "drain", "node-c", "--undo")
	if c.State != "ready" {
		t.Errorf("after drain --undo: %s", c.State)
	}
	e.mustRun(t, "nodes", "drain", "node-c")
	e.mustRun(t, "nodes", "undrain", "node-c")
	if c.State != "ready" {
		t.Errorf("after undrain: %s", c.State)
	}
	for _, args := range [][]string{
		{"nodes", "ceiling", "node-a", "-3"},
		{"nodes", "ceiling", "node-a", "lots"},
		{"nodes", "pools", "node-q", "linux"},
		{"nodes", "ceiling", "node-q", "1"},
		{"nodes", "drain", "node-q"},
		{"nodes", "undrain", "node-q"},
	} {
		if _, _, err := e.run(t, args...); err == nil {
			t.Errorf("vk-hub %v succeeded", args)
		}
	}
	if _, _, err := e.run(t, "nodes", "pools", "node-q", "linux"); !errors.Is(err, ErrNotFound) {
		t.Errorf("pools of an unknown node = %v, want not found", err)
	}
}

// `vk-hub queue` lists what waits, in the backend's order, with its wait
// reason (golden table); --json gives the entries as JSON; an empty queue
// says so.
func TestQueue(t *testing.T) {
	e := newEnv(t)
	out, _ := e.mustRun(t, "queue")
	if out != "KIND  ID  CLASS  TENANT  RELAY/RUNNER  PROJECT  PLACEMENT  WAITED  POSITION  EST. WAIT  REASON\n0 waiting\n" {
		t.Errorf("empty queue:\n%s", out)
	}
	est, now := int64(340), int64(0)
	e.be.queue = []Waiting{
		{Kind: WaitTicket, ID: "t-7", Tenant: "web", Relay: "relay-a", Runner: "linux", Placement: "linux mem=2G cpus=2 disk=10G",
			Reason: "waiting: tenant cap 20 reached"},
		{Kind: WaitTicket, ID: "t-9", Relay: "relay-b", Runner: "gpu", Placement: "gpu [cuda12] mem=64G cpus=16 disk=200G",
			Class: "normal", Since: start.Add(-42 * time.Second), WaitedSecs: 42, Ahead: 2, Competing: 5, EstimatedSecs: &est,
			Reason: "waiting: no ready node of the placement has room"},
		{Kind: WaitJob, ID: "job-3", Tenant: "data", Relay: "relay-b", Runner: "gpu", Instance: "gitlab.example.com", Project: 42,
			Placement: "gpu [cuda12] mem=64G cpus=16 disk=200G", Since: start.Add(-90 * time.Second), WaitedSecs: 90,
			Class: "deadline", Ahead: 0, Competing: 5, EstimatedSecs: &now,
			Reason: "waiting: project placement rules allow no node with room"},
	}
	out, _ = e.mustRun(t, "queue")
	golden(t, "queue", out)
	out, _ = e.mustRun(t, "queue", "--json")
	var got []Waiting
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("queue --json: %v\n%s", err, out)
	}
	if d := cmp.Diff(e.be.queue, got); d != "" {
		t.Errorf("queue --json (-backend +got):\n%s", d)
	}
}

// capacity-policy set validates and hands the policy to the hub; get
// prints the policy in force as a file (golden).
//
// spec: OPS-03
func TestCapacityPolicy(t *testing.T) {
	e := newEnv(t)
	// One of the example's two relays is enrolled: the other is warned of.
	if err := e.st.CreatePrincipal(t.Context(), store.Principal{ID: "relay-7k3m9q2xabcd", Kind: store.KindRelay, PublicKey: make([]byte, 32), Created: start}); err != nil {
		t.Fatal(err)
	}
	_, errOut := e.mustRun(t, "capacity-policy", "set", "testdata/example-policy.toml")
	if errOut != "capacity policy set: 2 headroom entries, 2 tenants\n"+
		"warning: tenant \"research\" lists runner relay-q4ncz8e2wxyz/ml, but no enrolled relay has the ID relay-q4ncz8e2wxyz (vk-hub relays list)\n" {
		t.Errorf("stderr %q", errOut)
	}
	want, err := LoadPolicy("testdata/example-policy.toml")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, e.be.policy); d != "" {
		t.Errorf("policy the hub got (-want +got):\n%s", d)
	}
	if a := lastAudit(t, e.st); a.Action != "policy.set" {
		t.Errorf("audit %+v", a)
	}
	out, _ := e.mustRun(t, "capacity-policy", "get")
	golden(t, "policy_get", out)

	bad := filepath.Join(t.TempDir(), "bad.toml")
	os.WriteFile(bad, []byte("version = 1\n[tenants.a]\nweight = -2\n"), 0o600)
	if _, _, err := e.run(t, "capacity-policy", "set", bad); !errors.Is(err, ErrPolicy) || !strings.Contains(err.Error(), "bad.toml") {
		t.Errorf("set of an invalid file = %v, want ErrPolicy naming the file", err)
	}
	if d := cmp.Diff(want, e.be.policy); d != "" {
		t.Errorf("an invalid file changed the policy:\n%s", d)
	}
	// The hub validates too: a client that skips the CLI's check is refused.
	if err := Dial(e.sock).SetPolicy(t.Context(), []byte("version = 1\nbogus = 1\n")); !errors.Is(err, ErrInvalid) {
		t.Errorf("hub accepted an invalid policy: %v", err)
	}
	// An empty projects table is refused here as in hub.toml and the
	// policy file, by the CLI and by the hub.
	empty := filepath.Join(t.TempDir(), "empty.toml")
	os.WriteFile(empty, []byte("version = 1\n[tenants.a]\nweight = 2\n[tenants.a.projects]\n"), 0o600)
	if _, _, err := e.run(t, "capacity-policy", "set", empty); !errors.Is(err, ErrEmptyProjects) || !strings.Contains(err.Error(), `tenant "a"`) {
		t.Errorf("set with an empty projects table = %v, want ErrEmptyProjects naming tenant a", err)
	}
	if err := Dial(e.sock).SetPolicy(t.Context(), []byte("version = 1\n[tenants.a]\nprojects = {}\n")); !errors.Is(err, ErrInvalid) {
		t.Errorf("hub accepted an empty projects table: %v", err)
	}
	if d := cmp.Diff(want, e.be.policy); d != "" {
		t.Errorf("an empty projects table changed the policy:\n%s", d)
	}
}

// projects approve/reject record the operator's decision, tell the hub,
// and list shows it (golden).
//
// spec: OPS-06
func TestProjects(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.st.PutApproval(ctx, store.Approval{Instance: "gitlab.example", Project: 42, Path: "acme/web", State: store.ApprovalPending, Updated: start.Add(-time.Hour)})
	e.st.PutApproval(ctx, store.Approval{Instance: "gitlab.example", Project: 7, Path: "acme/api", State: store.ApprovalPending, Updated: start.Add(-time.Hour)})
	e.st.PutApproval(ctx, store.Approval{Instance: "git.other", Path: "https://git.other", State: store.ApprovalPending, Updated: start.Add(-time.Hour)})
	e.mustRun(t, "projects", "approve", "gitlab.example", "42")
	e.mustRun(t, "projects", "reject", "git.other", "server")
	e.mustRun(t, "projects", "approve", "gitlab.example", "99")
	out, _ := e.mustRun(t, "projects", "list")
	golden(t, "projects_list", strings.ReplaceAll(out, lastAudit(t, e.st).Actor, "operator:test"))
	a, _ := e.st.GetApproval(ctx, "gitlab.example", 42)
	if a.State != store.ApprovalApproved || a.Path != "acme/web" || !a.Updated.Equal(start) || !strings.HasPrefix(a.By, "operator:") {
		t.Errorf("approval %+v", a)
	}
	if len(e.be.approvals) != 3 || e.be.approvals[1].Project != 0 || e.be.approvals[1].State != store.ApprovalRejected {
		t.Errorf("Backend.ApprovalChanged calls %+v", e.be.approvals)
	}
	if a := lastAudit(t, e.st); a.Action != "approval.approved" || a.Subject != "gitlab.example/99" {
		t.Errorf("audit %+v", a)
	}
	for _, args := range [][]string{{"projects", "approve", "gitlab.example", "-1"}, {"projects", "approve", "gitlab.example", "x"}} {
		if _, _, err := e.run(t, args...); err == nil {
			t.Errorf("vk-hub %v succeeded", args)
		}
	}
	// A server the hub never saw (a typo) is refused, not recorded; a URL
	// is read as its instance.
	before, _ := e.st.ListApprovals(ctx)
	if _, _, err := e.run(t, "projects", "approve", "gitlab.exmaple", "42"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "has not seen") {
		t.Errorf("approve of an unseen server = %v, want not found", err)
	}
	if after, _ := e.st.ListApprovals(ctx); len(after) != len(before) {
		t.Errorf("a refused approval was stored: %d approvals, had %d", len(after), len(before))
	}
	e.mustRun(t, "projects", "approve", "gitlab.new", "server", "--unseen")
	if a, _ := e.st.GetApproval(ctx, "gitlab.new", 0); a.State != store.ApprovalApproved {
		t.Errorf("approve --unseen: %+v", a)
	}
	e.mustRun(t, "projects", "approve", "https://gitlab.example/", "7")
	if a, _ := e.st.GetApproval(ctx, "gitlab.example", 7); a.State != store.ApprovalApproved {
		t.Errorf("approve by URL: %+v", a)
	}
}

// SO_PEERCRED reports the connecting process's user.
func TestPeerUID(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("SO_PEERCRED is Linux only")
	}
	dir, _ := os.MkdirTemp("", "vkadm")
	defer os.RemoveAll(dir)
	ln, err := net.Listen("unix", filepath.Join(dir, "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan int, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- -2
			return
		}
		defer c.Close()
		uid, err := peerUID(c)
		if err != nil {
			uid = -3
		}
		got <- uid
	}()
	c, err := net.Dial("unix", filepath.Join(dir, "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if uid := <-got; uid != os.Getuid() {
		t.Errorf("peerUID = %d, want %d", uid, os.Getuid())
	}
}

// Only root, the hub's user and AllowUIDs may use the socket; the caller
// is the actor in the audit log.
func TestPeerCheck(t *testing.T) {
	e := newEnv(t)
	for _, tt := range []struct {
		uid    int
		allow  []int
		status int
	}{
		{0, nil, http.StatusNoContent},
		{os.Getuid(), nil, http.StatusNoContent},
		{4242, nil, http.StatusForbidden},
		{4242, []int{4242}, http.StatusNoContent},
		{-1, nil, http.StatusNoContent}, // unknown off Linux: the file mode guards
	} {
		srv, err := NewServer(Config{Store: e.st, Backend: e.be, Enroller: &enrol.Enroller{}, AllowUIDs: tt.allow, Clock: e.clk})
		if err != nil {
			t.Fatal(err)
		}
		srv.peer = func(net.Conn) (int, error) { return tt.uid, nil }
		h := srv.peerCheck(srv.mux)
		r := httptest.NewRequest(http.MethodPut, "/admin/nodes/node-a/ceiling", strings.NewReader(`{"ceiling":3}`))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tt.status {
			t.Errorf("uid %d allow %v: status %d, want %d (%s)", tt.uid, tt.allow, w.Code, tt.status, w.Body)
		}
	}
}

// An unknown subcommand of a command group is an error (a non-zero exit),
// not the group's help with status 0; the group alone prints its help.
func TestUnknownSubcommand(t *testing.T) {
	e := newEnv(t)
	for _, args := range [][]string{
		{"nodes", "undrian", "node-a"},
		{"nodes", "bogus"},
		{"token", "mint"},
		{"relays", "delete", "x"},
		{"capacity-policy", "show"},
		{"projects", "allow", "gitlab.example.com", "1"},
	} {
		_, _, err := e.run(t, args...)
		if err == nil || !strings.Contains(err.Error(), "unknown command") {
			t.Errorf("vk-hub %v = %v, want an unknown command error", args, err)
		}
	}
	if out, _, err := e.run(t, "nodes"); err != nil || !strings.Contains(out, "undrain") {
		t.Errorf("vk-hub nodes = %v, output %q: want its help", err, out)
	}
}

// nodes remove marks the node removed in the store, tells the hub and
// audits; a relay's ID or an unknown one is refused.
//
// spec: OPS-01
func TestNodesRemove(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	if err := e.st.CreatePrincipal(ctx, store.Principal{ID: "node-c", Kind: store.KindNode, PublicKey: make([]byte, 32), Created: start}); err != nil {
		t.Fatal(err)
	}
	if err := e.st.CreatePrincipal(ctx, store.Principal{ID: "relay-x", Kind: store.KindRelay, PublicKey: make([]byte, 32), Created: start}); err != nil {
		t.Fatal(err)
	}
	_, errOut := e.mustRun(t, "nodes", "remove", "node-c")
	if errOut != "node node-c removed\n" {
		t.Errorf("stderr %q", errOut)
	}
	if p, err := e.st.GetPrincipal(ctx, "node-c"); err != nil || !p.Removed {
		t.Errorf("principal after remove = %+v, %v", p, err)
	}
	if _, ok := e.be.nodes["node-c"]; ok || !slices.Contains(e.be.removed, "node-c") {
		t.Errorf("the hub was not told: %v", e.be.removed)
	}
	if a := lastAudit(t, e.st); a.Action != "node.remove" || a.Subject != "node-c" {
		t.Errorf("audit %+v", a)
	}
	for _, id := range []string{"relay-x", "node-q"} {
		if _, _, err := e.run(t, "nodes", "remove", id); !errors.Is(err, ErrNotFound) {
			t.Errorf("nodes remove %s = %v, want not found", id, err)
		}
	}
}

// An error from the hub is wrapped once: no repeated "admin: not found:".
func TestErrorPrefixOnce(t *testing.T) {
	e := newEnv(t)
	_, _, err := e.run(t, "nodes", "ceiling", "node-q", "1")
	if !errors.Is(err, ErrNotFound) || strings.Count(err.Error(), "not found") != 1 {
		t.Errorf("error = %q, want one not found", err)
	}
	_, _, err = e.run(t, "nodes", "ceiling", "node-a", "-3")
	if err == nil || strings.Count(err.Error(), "admin:") > 1 {
		t.Errorf("error = %q", err)
	}
}

// A backed-off runner's standing request is counted apart: it is no
// backlog.
func TestQueueIdleSummary(t *testing.T) {
	var b bytes.Buffer
	q := []Waiting{{Kind: WaitTicket, ID: "t-1", Idle: true, Reason: "waiting: runner backed off after an empty or failed job request"},
		{Kind: WaitTicket, ID: "t-2", Reason: "waiting: tenant cap 2 reached"}}
	if err := writeQueue(&b, q); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(b.String(), "2 waiting, 1 of them runners' standing requests while GitLab has no job for them (backed off): no work waits behind those\n") {
		t.Errorf("queue output:\n%s", b.String())
	}
	b.Reset()
	writeQueue(&b, q[1:])
	if !strings.HasSuffix(b.String(), "\n1 waiting\n") {
		t.Errorf("queue output:\n%s", b.String())
	}
}
