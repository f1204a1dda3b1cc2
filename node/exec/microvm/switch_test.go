package microvm

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/node/exec"
	"github.com/vk-ci/vk/node/regproxy"
)

// The steps' registry variables exist only under net.mode "switch".
// spec: XFER-22, XFER-23
func TestSwitchEnvOnlyUnderSwitch(t *testing.T) {
	ns := []regproxy.Namespace{{Prefix: "tenants/acme", Rights: "lr"}}
	for _, mode := range []string{"", "none", "Switch", "bridge"} {
		if env := switchEnv(Spec{NetMode: mode, RegistryNamespaces: ns}); env != nil {
			t.Errorf("net.mode %q: steps get %q, want no registry variables", mode, env)
		}
	}
	want := []string{"VK_REGISTRY=http://registry.vk", "VK_REGISTRY_NAMESPACES=tenants/acme=rl"}
	if env := switchEnv(Spec{NetMode: "switch", RegistryNamespaces: ns}); !slices.Equal(env, want) {
		t.Errorf("net.mode switch: %q, want %q", env, want)
	}
}

// Under net.mode "switch" the job's VM reaches registry.vk, served by
// the node as the job's guest registry proxy, which puts the job's token
// on what it forwards to the registry; the steps get VK_REGISTRY and
// VK_REGISTRY_NAMESPACES; and nothing else is reachable, even for a job
// (root in this guest) that adds a default route: not QEMU's side of the
// network (the host's loopback, unrestricted), not the host's own
// address. (Without restrict=on this test fails: both answer.)
// spec: XFER-18, XFER-22, XFER-23
func TestSwitchModeOnlyWayOutIsTheRegistryProxy(t *testing.T) {
	e := newExecutor(t)
	registry := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "registry saw %s %s auth=%q\n", r.Method, r.URL.Path, r.Header.Get("Authorization"))
	}))
	defer registry.Close()
	// A host service on every interface, as a node's own services may be.
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	hostOnly := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "REACHED-THE-HOST")
	}))
	hostOnly.Listener.Close()
	hostOnly.Listener = ln
	hostOnly.Start()
	defer hostOnly.Close()
	targets := []string{fwdHost} // QEMU's side: the host's loopback, were the network not restricted
	if ip := hostIPv4(); ip != "" {
		targets = append(targets, ip)
	}
	proxy, err := regproxy.New(regproxy.Config{Upstream: registry.URL, Token: "job-token-123", Log: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	spec := Spec{NetMode: "switch", Registry: proxy, RegistryNamespaces: []regproxy.Namespace{{Prefix: "tenants/acme", Rights: "r"}}}
	ji, err := e.For(spec).Prepare(context.Background(), exec.PrepareRequest{ID: "switchjob", Size: exec.Size{MemMiB: 256, CPUs: 1}})
	if err != nil {
		t.Fatal(err)
	}
	j := ji.(*Job)
	defer j.Cleanup(context.Background())
	port := mustPort(t, hostOnly.URL)
	var addrs []string
	for _, a := range targets {
		addrs = append(addrs, a+":"+port)
	}
	script := `echo "$VK_REGISTRY $VK_REGISTRY_NAMESPACES"
wget -q -O - "$VK_REGISTRY/v2/tenants/acme/app/manifests/v1" --header 'Authorization: Bearer guest-made-up'
wget -q -O - http://registry.vk/elsewhere 2>&1 | head -1
# Root in the guest may add a route out; there is still none.
ip route add default via ` + fwdHost + ` 2>&1
for a in ` + strings.Join(addrs, " ") + `; do timeout 10 wget -q -O - "http://$a/" || echo "no way to $a"; done`
	var out, errb bytes.Buffer
	res, err := j.Run(context.Background(), exec.Script{Name: "s", Body: script}, &out, &errb)
	if err != nil {
		t.Fatal(err)
	}
	got := out.String()
	t.Logf("the guest's stdout:\n%s\nstderr:\n%s", got, errb.String())
	for _, want := range []string{
		"http://registry.vk tenants/acme=r\n",
		`registry saw GET /v2/tenants/acme/app/manifests/v1 auth="Bearer job-token-123"` + "\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("stdout lacks %q:\n%s\nstderr:\n%s (exit %d)", want, got, errb.String(), res.ExitCode)
		}
	}
	for _, a := range addrs {
		if !strings.Contains(got, "no way to "+a+"\n") {
			t.Errorf("the guest reached the host at %s:\n%s", a, got)
		}
	}
	if strings.Contains(got, "REACHED-THE-HOST") || strings.Contains(got, "guest-made-up") {
		t.Errorf("the guest got past the switch:\n%s", got)
	}
}

// hostIPv4 is the host's first IPv4 address other than loopback, "" when
// it has none.
func hostIPv4() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	return ""
}

func mustPort(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Port()
}
