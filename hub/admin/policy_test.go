package admin

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vk-ci/vk/proto/client"
	"pgregory.net/rapid"
)

func n(count int, f func(i int) string) []string {
	out := make([]string, count)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

func headrooms(count int) []Headroom {
	out := make([]Headroom, count)
	for i := range out {
		out[i] = Headroom{Pool: "linux", Mem: client.GiB, CPUs: 1, Disk: client.GiB, Slots: 1}
	}
	return out
}

func rules(count int) []Rule {
	out := make([]Rule, count)
	for i := range out {
		out[i] = Rule{Pools: []string{fmt.Sprintf("p%d", i)}}
	}
	return out
}

func withProject(r []Rule) map[string]Tenant {
	return map[string]Tenant{"a": {Projects: map[string]Project{"7": {PlacementRules: r}}}}
}

// Validation of the capacity policy: the seed's limits and the tenant
// rules of DECISIONS 11.
//
// spec: OPS-03
func TestPolicyValidate(t *testing.T) {
	tests := []struct {
		name string
		p    Policy
		want []string // substrings of the problems, in order; nil: valid
	}{
		{"empty", Policy{}, nil},
		{"64 headroom entries", Policy{Headroom: headrooms(64)}, nil},
		{"65 headroom entries", Policy{Headroom: headrooms(65)}, []string{"65 headroom entries; at most 64"}},
		{"headroom without pool or envelope", Policy{Headroom: []Headroom{{Slots: 1}}},
			[]string{"headroom[0]: pool missing", "headroom[0]: mem, cpus and disk"}},
		{"headroom zero slots", Policy{Headroom: []Headroom{{Pool: "p", Mem: 1, CPUs: 1, Disk: 1}}}, []string{"slots is 0"}},
		{"64 rules", Policy{Tenants: withProject(rules(64))}, nil},
		{"65 rules", Policy{Tenants: withProject(rules(65))}, []string{"65 placement rules; at most 64"}},
		{"256 nodes and pools", Policy{Tenants: withProject([]Rule{{Nodes: n(256, func(i int) string { return fmt.Sprint("n", i) }),
			Pools: n(256, func(i int) string { return fmt.Sprint("p", i) })}})}, nil},
		{"257 nodes", Policy{Tenants: withProject([]Rule{{Nodes: n(257, func(i int) string { return fmt.Sprint("n", i) })}})},
			[]string{"257 nodes and 0 pools; at most 256"}},
		{"257 pools", Policy{Tenants: withProject([]Rule{{Pools: n(257, func(i int) string { return fmt.Sprint("p", i) })}})},
			[]string{"0 nodes and 257 pools"}},
		{"empty rule", Policy{Tenants: withProject([]Rule{{Branches: []string{"main"}}})}, []string{"names no nodes and no pools"}},
		{"bad glob", Policy{Tenants: withProject([]Rule{{Pools: []string{"p"}, Branches: []string{"[main"}}})}, []string{"branch glob"}},
		{"weight and cap", Policy{Tenants: map[string]Tenant{"a": {Weight: 2, Cap: 5}, "b": {}}}, nil},
		{"negative weight and cap", Policy{Tenants: map[string]Tenant{"a": {Weight: -1, Cap: -2}}},
			[]string{`tenant "a": weight -1`, `tenant "a": cap -2`}},
		{"bad runner", Policy{Tenants: map[string]Tenant{"a": {Runners: []string{"norelay"}, ProductionRunners: []string{"/x"}}}},
			[]string{`runner "norelay"`, `runner "/x"`}},
		{"bad relay", Policy{Tenants: map[string]Tenant{"a": {Relays: []string{"r/x"}}}}, []string{`relay "r/x"`}},
		{"bad project keys", Policy{Tenants: map[string]Tenant{"a": {Projects: map[string]Project{"0": {}, "007": {}, "x": {}}}}},
			[]string{`project key "0"`, `project key "007"`, `project key "x"`}},
		{"shared project, same rules in another order", Policy{Tenants: map[string]Tenant{
			"a": {Projects: map[string]Project{"7": {PlacementRules: []Rule{{Pools: []string{"x", "y"}}, {Nodes: []string{"n"}}}}}},
			"b": {Projects: map[string]Project{"7": {PlacementRules: []Rule{{Nodes: []string{"n"}}, {Pools: []string{"y", "x"}}}}}},
		}}, nil},
		{"shared project, different rules", Policy{Tenants: map[string]Tenant{
			"a": {Projects: map[string]Project{"7": {PlacementRules: []Rule{{Pools: []string{"x"}}}}}},
			"b": {Projects: map[string]Project{"7": {}}},
		}}, []string{`project 7: placement rules differ between tenants "a" and "b"`}},
		{"knobs", Policy{BusySecs: -1, BackoffInitialSecs: 9, BackoffMaxSecs: 3, LeaseSecs: 601},
			[]string{"busy_secs is -1", "backoff_initial_secs 9 is above", "lease_secs 601"}},
		{"fairness drains off", Policy{FairDrainMaxWaitSecs: -1}, nil},
		{"fair drain wait below -1", Policy{FairDrainMaxWaitSecs: -2}, []string{"fair_drain_max_wait_secs is -2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Validate()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrPolicy) {
				t.Fatalf("Validate = %v, want ErrPolicy", err)
			}
			got := strings.Split(err.Error(), "\n")
			if len(got) != len(tt.want) {
				t.Fatalf("Validate listed %d problems, want %d:\n%v", len(got), len(tt.want), err)
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("problem %d = %q, want it to mention %q", i, got[i], w)
				}
			}
		})
	}
}

// The policy file is strict TOML with version = 1.
//
// spec: OPS-03
func TestDecodePolicyStrict(t *testing.T) {
	tests := []struct{ name, file, want string }{
		{"no version", "busy_secs = 3\n", "version"},
		{"other version", "version = 2\n", "version"},
		{"unknown key", "version = 1\nbusy_sec = 3\n", `unknown key "busy_sec"`},
		{"unknown tenant key", "version = 1\n[tenants.a]\nweigth = 2\n", `tenants.a.weigth`},
		{"wrong type", "version = 1\nbusy_secs = \"x\"\n", "busy_secs"},
		{"bad size", "version = 1\n[[headroom]]\npool=\"p\"\nmem=\"lots\"\ncpus=1\ndisk=\"1G\"\nslots=1\n", "mem"},
		{"invalid", "version = 1\n[tenants.a]\nweight = -1\n", "weight -1"},
	}
	for _, tt := range tests {
		_, err := DecodePolicy("p.toml", []byte(tt.file))
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "p.toml") {
			t.Errorf("%s: DecodePolicy = %v, want an error naming p.toml and %q", tt.name, err, tt.want)
		}
	}
}

// The worked example in docs/capacity-policy.md is testdata/example-policy.toml
// verbatim, and it is a valid policy that survives encode → decode.
//
// spec: OPS-03
func TestPolicyExample(t *testing.T) {
	ex, err := os.ReadFile("testdata/example-policy.toml")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/capacity-policy.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```toml\n(version = 1\n.*?)```").FindSubmatch(doc)
	if m == nil || string(m[1]) != string(ex) {
		t.Errorf("docs/capacity-policy.md's first policy block is not testdata/example-policy.toml")
	}
	p, err := LoadPolicy("testdata/example-policy.toml")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Headroom) != 2 || p.Tenants["payments"].Weight != 3 || len(p.Tenants["payments"].Projects["1234"].PlacementRules) != 2 {
		t.Errorf("example decoded to %+v", p)
	}
	b, err := EncodePolicy(p)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodePolicy("encoded", b)
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if d := cmp.Diff(p, back); d != "" {
		t.Errorf("encode/decode round trip (-want +got):\n%s", d)
	}
}

// Any valid policy survives EncodePolicy → DecodePolicy unchanged.
//
// spec: OPS-03
func TestPolicyRoundTrip(t *testing.T) {
	name := rapid.StringMatching(`[a-z][a-z0-9-]{0,8}`)
	list := rapid.SliceOfN(name, 0, 3)
	rapid.Check(t, func(t *rapid.T) {
		p := Policy{
			BusySecs:      rapid.IntRange(0, 600).Draw(t, "busy"),
			LeaseSecs:     rapid.IntRange(0, 600).Draw(t, "lease"),
			DefaultTenant: rapid.OneOf(rapid.Just(""), name).Draw(t, "default"),
		}
		for i := range rapid.IntRange(0, 3).Draw(t, "headrooms") {
			p.Headroom = append(p.Headroom, Headroom{Pool: name.Draw(t, fmt.Sprint("pool", i)), Labels: list.Draw(t, fmt.Sprint("labels", i)),
				Mem: client.Size(rapid.IntRange(1, 64).Draw(t, "mem")) * client.GiB, CPUs: rapid.IntRange(1, 64).Draw(t, "cpus"),
				Disk: client.Size(rapid.IntRange(1, 512).Draw(t, "disk")) * client.MiB, Slots: rapid.IntRange(1, 9).Draw(t, "slots")})
		}
		for i := range rapid.IntRange(0, 3).Draw(t, "tenants") {
			tn := Tenant{Weight: rapid.IntRange(0, 9).Draw(t, "w"), Cap: rapid.IntRange(0, 99).Draw(t, "cap"), Relays: list.Draw(t, "relays")}
			if rapid.Bool().Draw(t, "projects") {
				tn.Projects = map[string]Project{}
				for j := range rapid.IntRange(1, 3).Draw(t, "nproj") {
					pr := Project{Production: rapid.Bool().Draw(t, "prod")}
					for range rapid.IntRange(0, 2).Draw(t, "nrules") {
						pr.PlacementRules = append(pr.PlacementRules, Rule{Pools: []string{name.Draw(t, "rp")}, Nodes: list.Draw(t, "rn"),
							Branches: list.Draw(t, "rb")})
					}
					tn.Projects[fmt.Sprint(100*i+j+1)] = pr
				}
			}
			if p.Tenants == nil {
				p.Tenants = map[string]Tenant{}
			}
			p.Tenants[fmt.Sprint("t", i)] = tn
		}
		if err := p.Validate(); err != nil {
			t.Skip(err)
		}
		b, err := EncodePolicy(p)
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodePolicy("x", b)
		if err != nil {
			t.Fatalf("%v\n%s", err, b)
		}
		if d := cmp.Diff(p, back, cmpEmpty); d != "" {
			t.Fatalf("round trip (-want +got):\n%s\n%s", d, b)
		}
	})
}

// cmpEmpty treats nil and empty string lists alike (omitempty drops
// both). Projects maps are generated nil or non-empty: TOML cannot tell
// an empty table from an absent one, so Tenant.Projects defines both as
// "every project allowed".
var cmpEmpty = cmp.FilterValues(func(a, b []string) bool { return len(a) == 0 && len(b) == 0 }, cmp.Ignore())

// cmpEmptyMaps treats nil and empty project maps alike: TOML reads both
// as absent, and Tenant.Projects gives both the same meaning.
var cmpEmptyMaps = cmp.FilterValues(func(a, b map[string]Project) bool { return len(a) == 0 && len(b) == 0 }, cmp.Ignore())

// weight = 0 written out is refused (decoded, it would read as absent:
// weight 1); relay IDs no enrolment has are warned about.
func TestPolicyZeroWeightAndUnknownRelays(t *testing.T) {
	if _, err := DecodePolicy("p.toml", []byte("version = 1\n[tenants.web]\nweight = 0\n")); !errors.Is(err, ErrPolicy) || !strings.Contains(err.Error(), "weight = 0") {
		t.Errorf("weight = 0: %v, want ErrPolicy", err)
	}
	if _, err := DecodePolicy("p.toml", []byte("version = 1\n[tenants.web]\nweight = 2\n")); err != nil {
		t.Errorf("weight = 2: %v", err)
	}
	p := Policy{Tenants: map[string]Tenant{
		"web":  {Relays: []string{"relay-a", "relay-typo"}, Runners: []string{"relay-gone/x"}},
		"data": {ProductionRunners: []string{"relay-a/deploy", "relay-nope/deploy"}},
	}}
	got := UnknownRelays(p, []Relay{{ID: "relay-a"}, {ID: "relay-gone", Removed: true}})
	want := []string{
		`tenant "data" lists runner relay-nope/deploy, but no enrolled relay has the ID relay-nope (vk-hub relays list)`,
		`tenant "web" lists relay relay-typo, but no enrolled relay has the ID relay-typo (vk-hub relays list)`,
		`tenant "web" lists runner relay-gone/x, but no enrolled relay has the ID relay-gone (vk-hub relays list)`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("UnknownRelays =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
