package regproxy

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

// spec: XFER-22
func TestEnv(t *testing.T) {
	cases := []struct {
		name string
		in   []Namespace
		want []string
	}{
		{"none", nil, []string{"VK_REGISTRY=http://registry.vk", "VK_REGISTRY_NAMESPACES="}},
		{"one", []Namespace{{"tenants/acme/ci-cache/42", "rw"}},
			[]string{"VK_REGISTRY=http://registry.vk", "VK_REGISTRY_NAMESPACES=tenants/acme/ci-cache/42=rw"}},
		{"several in order, rights canonical", []Namespace{{"acme/app", "lwr"}, {"acme/base", "r"}, {"files/acme", "rrl"}},
			[]string{"VK_REGISTRY=http://registry.vk", "VK_REGISTRY_NAMESPACES=acme/app=rwl acme/base=r files/acme=rl"}},
		{"invalid left out", []Namespace{{"", "r"}, {"a b", "r"}, {"a=b", "r"}, {"ok", "rx"}, {"none", ""}, {"good", "w"}},
			[]string{"VK_REGISTRY=http://registry.vk", "VK_REGISTRY_NAMESPACES=good=w"}},
	}
	for _, tc := range cases {
		if d := cmp.Diff(tc.want, Env(tc.in)); d != "" {
			t.Errorf("%s: Env(%v) (-want +got):\n%s", tc.name, tc.in, d)
		}
	}
}

// spec: XFER-22
func TestNamespaceValidate(t *testing.T) {
	for _, n := range []Namespace{{"", "r"}, {"a b", "r"}, {"a\tb", "r"}, {"a\nb", "r"}, {"a=b", "r"}, {"a", ""}, {"a", "R"}, {"a", "rwx"}, {"a", "read"}} {
		if err := n.Validate(); !errors.Is(err, ErrBadNamespace) {
			t.Errorf("%+v.Validate() = %v, want ErrBadNamespace", n, err)
		}
	}
	for _, n := range []Namespace{{"a", "r"}, {"tenants/acme/*", "rwl"}, {"x", "lw"}} {
		if err := n.Validate(); err != nil {
			t.Errorf("%+v.Validate() = %v, want nil", n, err)
		}
	}
}

// spec: XFER-22
func TestEnvRoundTrip(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ns := rapid.SliceOfN(rapid.Custom(func(rt *rapid.T) Namespace {
			return Namespace{
				Prefix: rapid.StringMatching(`[a-z0-9/ =._*-]{0,12}`).Draw(rt, "prefix"),
				Rights: rapid.StringMatching(`[rwlx]{0,4}`).Draw(rt, "rights"),
			}
		}), 0, 6).Draw(rt, "namespaces")
		env := Env(ns)
		if len(env) != 2 || env[0] != "VK_REGISTRY=http://registry.vk" || !strings.HasPrefix(env[1], "VK_REGISTRY_NAMESPACES=") {
			rt.Fatalf("Env = %q", env)
		}
		// Parsing the variable as a step would gives back exactly the
		// valid namespaces, in order, with the same set of rights.
		var got []Namespace
		if v := strings.TrimPrefix(env[1], "VK_REGISTRY_NAMESPACES="); v != "" {
			for _, f := range strings.Split(v, " ") {
				prefix, rights, ok := strings.Cut(f, "=")
				if !ok || strings.Contains(rights, "=") {
					rt.Fatalf("field %q is not <prefix>=<rights>", f)
				}
				got = append(got, Namespace{prefix, rights})
			}
		}
		var want []Namespace
		for _, n := range ns {
			if n.Validate() == nil {
				want = append(want, Namespace{n.Prefix, n.rights()})
			}
		}
		if d := cmp.Diff(want, got); d != "" {
			rt.Fatalf("round trip (-want +got):\n%s", d)
		}
		for _, n := range got {
			for _, c := range n.Rights {
				if !strings.ContainsRune("rwl", c) {
					rt.Fatalf("right %q outside rwl", c)
				}
			}
		}
	})
}

// spec: XFER-23
func TestEnabledOnlyForSwitch(t *testing.T) {
	for mode, want := range map[string]bool{
		"switch": true,
		"":       false, "none": false, "host": false, "nat": false, "bridge": false,
		"Switch": false, " switch": false, "switch ": false, "switched": false,
	} {
		if got := Enabled(mode); got != want {
			t.Errorf("Enabled(%q) = %v, want %v", mode, got, want)
		}
	}
}
