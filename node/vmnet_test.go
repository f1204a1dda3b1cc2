package node

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/microvmtest"
	"github.com/vk-ci/vk/internal/ocitest"
	"github.com/vk-ci/vk/internal/registrytest"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/node/exec"
	"github.com/vk-ci/vk/node/regproxy"
	"github.com/vk-ci/vk/proto/dispatch"
	"github.com/vk-ci/vk/proto/job"
)

// manifestAnswer answers every request with a minimal OCI manifest, as a
// registry stand-in that takes whatever credential it is sent.
func manifestAnswer(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
	io.WriteString(w, `{"schemaVersion":2}`)
}

// vmnetT0 is when the fake clocks of the vmnet tests start, and when
// their starts are received unless a test says otherwise.
var vmnetT0 = time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)

// vmnetAgent is an agent with cfg's [registry] and [executor.microvm]
// net_mode, its clock fake (at vmnetT0), and backends wired as the
// microvm backend wires them (no VM is booted: the test reads the Spec
// the node builds).
func vmnetAgent(t *testing.T, reg RegistryConfig, netMode string) (*backends, *clock.Fake) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Registry = reg
	cfg.Executor.MicroVM.NetMode = netMode
	clk := clock.NewFake(vmnetT0)
	a := &Agent{cfg: cfg, clk: clk, log: testlog.New(t)}
	b := &backends{}
	a.wireVMNet(b)
	return b, clk
}

// pull sends a guest's manifest GET to h as registry.vk, returning the
// status and body.
func pull(t *testing.T, h http.Handler, repo string) (int, string) {
	t.Helper()
	if h == nil {
		t.Fatal("the job has no registry proxy")
	}
	r := httptest.NewRequest(http.MethodGet, "http://registry.vk/v2/"+repo+"/manifests/latest", nil)
	r.Header.Set("Authorization", "Bearer guest-made-up")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, w.Body.String()
}

// Under [executor.microvm] net_mode the node gives every job's Spec its
// network mode; only under "switch" a registry proxy and namespaces, the
// unset key meaning "none" (XFER-23).
//
// spec: XFER-23
func TestMicroVMSpecNetMode(t *testing.T) {
	start := &dispatch.Start{Job: "j1", Cache: &dispatch.CacheRegistry{Repository: "ci-cache/g/12", Token: "job-token"}}
	for _, tt := range []struct {
		key, want string
		proxy     bool
	}{{"", NetModeNone, false}, {NetModeNone, NetModeNone, false}, {NetModeSwitch, NetModeSwitch, true}} {
		t.Run("net_mode="+tt.key, func(t *testing.T) {
			b, _ := vmnetAgent(t, RegistryConfig{URL: "https://registry.example.com", GuestCredential: GuestCredentialJob}, tt.key)
			spec := b.microvmSpec(&job.CiJob{}, start, vmnetT0)
			if spec.NetMode != tt.want {
				t.Errorf("NetMode %q, want %q", spec.NetMode, tt.want)
			}
			if got := spec.Registry != nil; got != tt.proxy {
				t.Errorf("registry proxy present = %v, want %v", got, tt.proxy)
			}
			if !tt.proxy && spec.RegistryNamespaces != nil {
				t.Errorf("namespaces %v outside switch mode", spec.RegistryNamespaces)
			}
		})
	}
}

// Under net_mode "switch" the proxy the node builds for a job forwards
// with the start's job registry token and never with the node's own
// [registry] credential, under either guest_credential; its steps'
// namespaces are the token's cache repository. A start without a token
// gets a proxy refusing everything, with nothing sent upstream, and a
// token past its lifetime (counted by the node's clock from the start)
// is refused.
//
// spec: XFER-18, XFER-19, XFER-22
func TestSwitchProxyInjectsTheJobsToken(t *testing.T) {
	for _, mode := range []string{GuestCredentialJob, GuestCredentialNode} {
		t.Run(mode, func(t *testing.T) {
			up := &authLog{answer: manifestAnswer}
			srv := httptest.NewServer(up)
			defer srv.Close()
			b, clk := vmnetAgent(t, RegistryConfig{URL: srv.URL, Username: "vk-node", Password: Secret("node-password"),
				RepositoryPrefix: "ci-cache", GuestCredential: mode}, NetModeSwitch)

			const repo = "ci-cache/gitlab.example.com/12"
			start := &dispatch.Start{Job: "j1", Cache: &dispatch.CacheRegistry{Repository: repo, Token: "job-token", ExpiresInSecs: 600}}
			spec := b.microvmSpec(&job.CiJob{}, start, vmnetT0)
			if code, body := pull(t, spec.Registry, repo); code != http.StatusOK {
				t.Fatalf("pull with a token: %d %s", code, body)
			}
			want := []string{"GET /v2/" + repo + "/manifests/latest Bearer job-token"}
			if got := up.requests(); !slices.Equal(got, want) {
				t.Errorf("the registry saw %q, want %q", got, want)
			}
			for _, a := range up.requests() {
				if strings.Contains(a, "Basic") || strings.Contains(a, "guest-made-up") {
					t.Errorf("a forwarded request carried another credential: %q", a)
				}
			}
			if want := []regproxy.Namespace{{Prefix: repo, Rights: "rw"}}; !slices.Equal(spec.RegistryNamespaces, want) {
				t.Errorf("namespaces %v, want %v", spec.RegistryNamespaces, want)
			}

			clk.Advance(601 * time.Second)
			if code, body := pull(t, spec.Registry, repo); code != http.StatusForbidden || !strings.Contains(body, "expired") {
				t.Errorf("pull past the token's lifetime: %d %s, want 403 expired", code, body)
			}

			for name, s := range map[string]*dispatch.Start{
				"no cache registry": {Job: "j2"},
				"empty token":       {Job: "j3", Cache: &dispatch.CacheRegistry{Repository: repo}},
				"unknown start":     nil,
			} {
				spec := b.microvmSpec(&job.CiJob{}, s, vmnetT0)
				if code, body := pull(t, spec.Registry, repo); code != http.StatusForbidden || !strings.Contains(body, "no registry token") {
					t.Errorf("%s: pull %d %s, want 403 no registry token", name, code, body)
				}
				if spec.RegistryNamespaces != nil {
					t.Errorf("%s: namespaces %v, want none", name, spec.RegistryNamespaces)
				}
			}
			if n := len(up.requests()); n != 1 {
				t.Errorf("the registry saw %d requests, want only the first pull's: %q", n, up.requests())
			}
		})
	}
}

// The lifetime of a job's registry token counts from the start's
// receipt, not from when the job's executor is chosen: a start received
// at T whose guest registry proxy is built D later (the job waited for
// its size on the ledger) gets a proxy that forwards before T+lifetime
// and refuses as expired from then on, although T+D+lifetime is still
// ahead; the job's cache stages get the same expiry.
func TestSwitchProxyTokenLifetimeFromReceipt(t *testing.T) {
	up := &authLog{answer: manifestAnswer}
	srv := httptest.NewServer(up)
	defer srv.Close()
	b, clk := vmnetAgent(t, RegistryConfig{URL: srv.URL, GuestCredential: GuestCredentialJob}, NetModeSwitch)
	const (
		repo     = "ci-cache/gitlab.example.com/12"
		lifetime = 600 * time.Second
		wait     = 300 * time.Second // from the receipt to the executor's choice
	)
	start := &dispatch.Start{Job: "j1", Cache: &dispatch.CacheRegistry{Repository: repo, Token: "job-token", ExpiresInSecs: int(lifetime / time.Second)}}
	received := clk.Now()
	if c := cacheRegistry(start, received); !c.Expires.Equal(received.Add(lifetime)) {
		t.Errorf("the cache stages' token expiry %v, want the receipt plus the lifetime, %v", c.Expires, received.Add(lifetime))
	}

	clk.Advance(wait)
	spec := b.microvmSpec(&job.CiJob{}, start, received)
	if code, body := pull(t, spec.Registry, repo); code != http.StatusOK {
		t.Fatalf("pull %v after the receipt: %d %s", wait, code, body)
	}
	clk.Advance(lifetime - wait - time.Second)
	if code, body := pull(t, spec.Registry, repo); code != http.StatusOK {
		t.Fatalf("pull a second before the receipt plus the lifetime: %d %s", code, body)
	}
	clk.Advance(time.Second)
	if code, body := pull(t, spec.Registry, repo); code != http.StatusForbidden || !strings.Contains(body, "expired") {
		t.Errorf("pull at the receipt plus the lifetime: %d %s, want 403 expired", code, body)
	}
	clk.Advance(wait - 2*time.Second)
	if code, body := pull(t, spec.Registry, repo); code != http.StatusForbidden || !strings.Contains(body, "expired") {
		t.Errorf("pull just before the proxy's build plus the lifetime: %d %s, want 403 expired", code, body)
	}
	if n := len(up.requests()); n != 2 {
		t.Errorf("the registry saw %d requests, want the two before the expiry: %q", n, up.requests())
	}
}

// The one booting test of net_mode "switch" at the node (TCG): a job
// whose start carries a job registry token runs in a guest without an
// image, and its script, through registry.vk, pulls a manifest from the
// real docker-registry behind the node's guest registry proxy; its
// steps see VK_REGISTRY and the token's namespace. (That the proxy
// injects the job's token and never the node's credential is
// TestSwitchProxyInjectsTheJobsToken's; that registry.vk is the guest's
// only way out is node/exec/microvm's
// TestSwitchModeOnlyWayOutIsTheRegistryProxy.)
//
// spec: XFER-18, XFER-22, XFER-23
func TestGuestPullsThroughRegistryVK(t *testing.T) {
	agent := microvmtest.Agent(t)
	reg := registrytest.New(t)
	const repo = "ci-cache/gitlab.example.com/12"
	pushTestImage(t, reg.Addr, repo, "v1", testRootfsLayer(t, ocitest.File{Name: "etc/vk-marker", Body: "x\n"}))

	h, a := connected(t, func(c *Config) {
		c.Executor.Backend = BackendMicroVM
		c.Executor.MicroVM = MicroVMConfig{Accel: "tcg", Agent: agent, BootTimeoutSecs: 300, NetMode: NetModeSwitch}
		c.Registry = RegistryConfig{URL: reg.URL(), Username: "vk-node", Password: Secret("node-password"),
			RepositoryPrefix: "ci-cache", GuestCredential: GuestCredentialJob}
	}, Options{})
	if a.be.microvm == nil {
		t.Fatal("backend microvm: no microvm executor")
	}
	spec := testSpec(`echo "reg=$VK_REGISTRY ns=$VK_REGISTRY_NAMESPACES"`,
		`wget -q -O - --header 'Accept: application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json' `+
			`http://registry.vk/v2/`+repo+`/manifests/v1 | grep -o '"schemaVersion": *2'`)
	from := h.mark()
	h.send(&dispatch.Offer{Reservation: "r1", Envelope: env1, LeaseSecs: 90})
	if rep, _ := waitFor(h, from, func(r *dispatch.OfferReply) bool { return r.Reservation == "r1" }); rep.Reply != dispatch.ReplyAccepted {
		t.Fatalf("offer: %+v", rep)
	}
	h.send(&dispatch.Start{Job: "job-switch", Reservation: "r1", Envelope: env1, Spec: spec,
		Cache: &dispatch.CacheRegistry{Repository: repo, Token: "job-token", ExpiresInSecs: 3600}})
	r := resultWithin(t, h, from, "job-switch", 5*time.Minute)
	out := string(h.output("job-switch"))
	if r.Result.Failure != "" {
		t.Fatalf("failure %q: %s\n%s", r.Result.Failure, r.Result.Message, out)
	}
	for _, want := range []string{"O reg=http://registry.vk ns=" + repo + "=rw\n", `"schemaVersion"`} {
		if !strings.Contains(out, want) {
			t.Errorf("trace lacks %q:\n%s", want, out)
		}
	}
}

// A job chooses its network mode with VK_NET_MODE among the node's
// net_modes: its Spec gets that mode, and a switch network's proxy only
// under "switch"; a job naming a mode the node does not allow (or any
// other mode where net_modes is unset) is refused as a configuration
// error naming the variable and what is allowed; a job asking for none
// gets the node's net_mode.
//
// spec: XFER-23
func TestJobChoosesItsNetMode(t *testing.T) {
	start := &dispatch.Start{Job: "j1", Cache: &dispatch.CacheRegistry{Repository: "ci-cache/g/12", Token: "job-token"}}
	reg := RegistryConfig{URL: "https://registry.example.com", GuestCredential: GuestCredentialJob}
	asking := func(mode string) *job.CiJob {
		if mode == "" {
			return &job.CiJob{}
		}
		return &job.CiJob{Variables: []job.Variable{{Key: NetModeVar, Value: mode}}}
	}
	for _, tt := range []struct {
		name, node string
		allowed    []string
		asked      string
		want       string // "" when refused
	}{
		{"switch allowed", NetModeNone, []string{NetModeNone, NetModeSwitch}, NetModeSwitch, NetModeSwitch},
		{"none allowed on a switch node", NetModeSwitch, []string{NetModeSwitch, NetModeNone}, NetModeNone, NetModeNone},
		{"asks for nothing", NetModeNone, []string{NetModeNone, NetModeSwitch}, "", NetModeNone},
		{"asks for the node's own", NetModeSwitch, nil, NetModeSwitch, NetModeSwitch},
		{"net_modes unset", NetModeNone, nil, NetModeSwitch, ""},
		{"not listed", NetModeNone, []string{NetModeNone}, NetModeSwitch, ""},
		{"unknown mode", NetModeNone, []string{NetModeNone, NetModeSwitch}, "bridge", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Registry = reg
			cfg.Executor.MicroVM.NetMode, cfg.Executor.MicroVM.NetModes = tt.node, tt.allowed
			b := &backends{}
			(&Agent{cfg: cfg, clk: clock.NewFake(vmnetT0), log: testlog.New(t)}).wireVMNet(b)
			j := asking(tt.asked)
			mode, err := b.jobNetMode(j)
			if tt.want == "" {
				if !errors.Is(err, exec.ErrConfiguration) || !strings.Contains(err.Error(), NetModeVar+"=\""+tt.asked+"\"") {
					t.Fatalf("VK_NET_MODE=%q on a node allowing %q: err %v, want a configuration error naming it", tt.asked, tt.allowed, err)
				}
				if ex, _, _ := b.chooseMicroVM(j, start, vmnetT0); !isRefusal(ex) {
					t.Errorf("the job was not refused: executor %T", ex)
				}
				return
			}
			if err != nil || mode != tt.want {
				t.Fatalf("VK_NET_MODE=%q: mode %q err %v, want %q", tt.asked, mode, err, tt.want)
			}
			spec := b.microvmSpec(j, start, vmnetT0)
			if spec.NetMode != tt.want || (spec.Registry != nil) != (tt.want == NetModeSwitch) {
				t.Errorf("spec: mode %q, proxy %v; want %q with a proxy only under switch", spec.NetMode, spec.Registry != nil, tt.want)
			}
		})
	}
}

func isRefusal(ex exec.Executor) bool {
	_, ok := ex.(refuseExecutor)
	return ok
}
