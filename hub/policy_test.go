package hub

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
	"github.com/vk-ci/vk/sched"
)

// one set of rules for the policy in hub.toml, in
// its own file and through the admin socket: the hub validates with
// admin.Policy's rules, and an empty projects table is refused rather than
// read as "every project".
//
// spec: PLACE-23, ARB-41
func TestPolicyValidationIsAdmins(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, file, body, want string
		is                     []error
	}{
		{name: "place-23 rules differ across tenants", file: "hub.toml", body: `version = 1
[capacity_policy.tenants.a.projects.7]
placement_rules = [{pools = ["x"]}]
[capacity_policy.tenants.b.projects.7]
placement_rules = [{pools = ["y"]}]
`, want: "must be identical", is: []error{ErrConfig, admin.ErrPolicy}},
		{name: "rule with no nodes or pools", file: "hub.toml", body: `version = 1
[capacity_policy.tenants.a.projects.7]
placement_rules = [{branches = ["main"]}]
`, want: "names no nodes and no pools", is: []error{ErrConfig, admin.ErrPolicy}},
		{name: "empty projects table inline", file: "hub.toml", body: `version = 1
[capacity_policy.tenants.a]
weight = 2
[capacity_policy.tenants.a.projects]
`, want: "projects table is empty", is: []error{ErrConfig, ErrEmptyProjects}},
		{name: "empty projects table in a policy file", file: "capacity.toml", body: `version = 1
[tenants.a]
projects = {}
`, want: "projects table is empty", is: []error{ErrConfig, ErrEmptyProjects}},
		{name: "knob out of range", file: "capacity.toml", body: `version = 1
pack_above_utilization = 1.5
`, want: "pack_above_utilization", is: []error{ErrConfig}},
		{name: "claim_renewals below -1", file: "capacity.toml", body: `version = 1
claim_renewals = -2
`, want: "claim_renewals", is: []error{ErrConfig}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+"-"+tc.file)
			if err := os.WriteFile(p, []byte(tc.body), 0o600); err != nil {
				t.Fatal(err)
			}
			var err error
			if tc.file == "hub.toml" {
				var c Config
				if c, err = LoadConfig(p); err == nil {
					err = c.Validate()
				}
			} else {
				_, err = LoadPolicyFile(p)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want one containing %q", err, tc.want)
			}
			for _, is := range tc.is {
				if !errors.Is(err, is) {
					t.Errorf("error %v is not %v", err, is)
				}
			}
		})
	}
	// A projects table with an entry is fine; no table is fine.
	p := filepath.Join(dir, "ok.toml")
	os.WriteFile(p, []byte("version = 1\n[tenants.a]\nweight = 2\n[tenants.b.projects.12]\nproduction = true\n"), 0o600)
	if _, err := LoadPolicyFile(p); err != nil {
		t.Fatal(err)
	}
}

// the sched knobs come from the policy TOML; claim_renewals
// defaults to the spec's 1.
//
// spec: ARB-32
func TestPolicyKnobsToSched(t *testing.T) {
	for _, tc := range []struct {
		name, body   string
		renewals     int
		pack, wide   float64
		drains       int
		hold         time.Duration
		fairWait     time.Duration // what the core is given; 0 is its default
		nilPolicyToo bool
	}{
		{name: "defaults", body: "version = 1\n", renewals: 1, nilPolicyToo: true},
		{name: "no bound", body: "version = 1\nclaim_renewals = -1\n", renewals: 0},
		{name: "all set", body: "version = 1\nclaim_renewals = 3\npack_above_utilization = 0.7\ndrains_per_pool = 1\nwide_fraction = 0.4\ndrain_max_hold_secs = 600\nfair_drain_max_wait_secs = 120\n",
			renewals: 3, pack: 0.7, drains: 1, wide: 0.4, hold: 10 * time.Minute, fairWait: 2 * time.Minute},
		{name: "no fairness drains", body: "version = 1\nfair_drain_max_wait_secs = -1\n", renewals: 1, fairWait: -time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "capacity.toml")
			os.WriteFile(p, []byte(tc.body), 0o600)
			pol, err := LoadPolicyFile(p)
			if err != nil {
				t.Fatal(err)
			}
			sp := policyToSched(&pol, newIDTable())
			if sp.ClaimRenewals != tc.renewals || sp.PackAboveUtilization != tc.pack || sp.DrainsPerPool != tc.drains ||
				sp.WideFraction != tc.wide || sp.DrainMaxHold != tc.hold {
				t.Errorf("sched policy = renewals %d pack %v drains %d wide %v hold %v", sp.ClaimRenewals, sp.PackAboveUtilization,
					sp.DrainsPerPool, sp.WideFraction, sp.DrainMaxHold)
			}
			if err := sp.Validate(); err != nil {
				t.Error(err)
			}
			if got := sp.FairDrainMaxWait; got != tc.fairWait {
				t.Errorf("fair drain max wait = %v, want %v", got, tc.fairWait)
			}
			if tc.nilPolicyToo {
				var none *PolicyConfig
				if got := policyToSched(none, newIDTable()).ClaimRenewals; got != 1 {
					t.Errorf("no policy: claim renewals %d, want 1", got)
				}
			}
		})
	}
}

// with the default policy a claimed grant covers one
// renewal before its outcome; the second answers 409. The wide-job and
// renewal knobs are set and read through the admin socket's policy like
// the rest, and claim_renewals = -1 lifts the bound.
//
// spec: ARB-32
func TestClaimRenewalsDefaultOne(t *testing.T) {
	h := newHarness(t)
	h.relayUp(1)
	h.nodeUp(dispatch.Held{})
	g := h.claimed()
	path := "/v1/reservations/" + g.Admission
	// renewAnswered renews while the node answers the hub's renew frame.
	renewAnswered := func() int {
		got := make(chan int, 1)
		go func() {
			c, _, _ := h.call("POST", path+"/renew", client.RenewRequest{})
			got <- c
		}()
		expectFrame[dispatch.Renew](h)
		h.nodeSay(&dispatch.Lease{Reservation: g.Reservation, State: dispatch.LeaseHeld, RemainingSecs: 80})
		return <-got
	}
	if c := renewAnswered(); c != http.StatusOK {
		t.Fatalf("first renew = %d, want 200", c)
	}
	h.wantErr(http.StatusConflict, client.CodeConflict, "POST", path+"/renew", client.RenewRequest{})

	// The knobs travel through the admin socket's policy: get shows them,
	// set replaces them with the rest (`vk-hub capacity-policy`).
	d := h.srv.Driver()
	want := admin.Policy{ProbeLimit: 3, ClaimRenewals: -1, DrainsPerPool: 1, PackAboveUtilization: 0.7, WideFraction: 0.25, DrainMaxHoldSecs: 600,
		FairDrainMaxWaitSecs: 120}
	if err := d.SetPolicy(t.Context(), want); err != nil {
		t.Fatal(err)
	}
	cur, err := d.Policy(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if cur.ProbeLimit != 3 || cur.ClaimRenewals != -1 || cur.DrainsPerPool != 1 || cur.PackAboveUtilization != 0.7 ||
		cur.WideFraction != 0.25 || cur.DrainMaxHoldSecs != 600 || cur.FairDrainMaxWaitSecs != 120 {
		t.Errorf("policy after SetPolicy = %+v, want %+v", cur, want)
	}
	// and reach the core itself
	r := &corePolicyReq{}
	if err := d.ask(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	inCore := r.p
	if inCore.FairDrainMaxWait != 2*time.Minute || inCore.DrainMaxHold != 10*time.Minute {
		t.Errorf("core's fair drain max wait %v, drain max hold %v; want 2m0s, 10m0s", inCore.FairDrainMaxWait, inCore.DrainMaxHold)
	}
	if got, err := d.Policy(t.Context()); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("Policy() = %+v, %v; want %+v", got, err, want)
	}
	// Now unbounded: a third renew is answered by the node again.
	if c := renewAnswered(); c != http.StatusOK {
		t.Errorf("renew under claim_renewals = -1: %d, want 200", c)
	}
	bad := admin.Policy{ClaimRenewals: -2, PackAboveUtilization: 1.5, WideFraction: -0.1, DrainsPerPool: -1}
	if err := d.SetPolicy(t.Context(), bad); !errors.Is(err, admin.ErrInvalid) {
		t.Errorf("SetPolicy(%+v) = %v, want ErrInvalid", bad, err)
	}
}

// A policy set through the admin socket wins over capacity_policy_file
// at the next start, and the hub says so in its log.
//
// spec: OPS-03
func TestIgnoredPolicyFileLogged(t *testing.T) {
	h := newHarness(t)
	file := filepath.Join(h.dir, "capacity.toml")
	if err := os.WriteFile(file, []byte("version = 1\nprobe_limit = 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.cfg.CapacityPolicyFile, h.cfg.CapacityPolicy = file, nil
	h.restart()
	if strings.Contains(h.logs.String(), "capacity_policy_file is ignored") {
		t.Fatal("ignored-file warning before any policy was set")
	}
	if err := h.srv.Driver().SetPolicy(t.Context(), admin.Policy{ProbeLimit: 5}); err != nil {
		t.Fatal(err)
	}
	h.restart()
	if !strings.Contains(h.logs.String(), "capacity_policy_file is ignored") || !strings.Contains(h.logs.String(), file) {
		t.Errorf("no warning naming %s after a restart with a stored policy; logs:\n%s", file, h.logs.String())
	}
	got, err := h.srv.Driver().Policy(t.Context())
	if err != nil || got.ProbeLimit != 5 {
		t.Errorf("policy in force = %+v, %v; want the one set", got, err)
	}
}

// corePolicyReq reads the policy the core runs under, on the owner loop.
type corePolicyReq struct{ p sched.Policy }

func (r *corePolicyReq) run(d *Driver) { r.p = d.core.Policy() }
