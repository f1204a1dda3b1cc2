package imagestore

import (
	"errors"
	"testing"
)

// Names without a registry take the node's registry and prefix; names
// with one are left alone (STAGE-08).
// spec: STAGE-08
func TestResolve(t *testing.T) {
	for _, tc := range []struct {
		rules Rules
		in    string
		want  string
	}{
		{Rules{}, "ruby:3.3", "index.docker.io/library/ruby:3.3"},
		{Rules{}, "ruby", "index.docker.io/library/ruby:latest"},
		{Rules{}, "group/app", "index.docker.io/group/app:latest"},
		{Rules{Registry: "reg.example.com"}, "ruby:3.3", "reg.example.com/ruby:3.3"},
		{Rules{Registry: "reg.example.com", Prefix: "/hub/"}, "ruby:3.3", "reg.example.com/hub/ruby:3.3"},
		{Rules{Registry: "reg.example.com", Prefix: "hub"}, "group/app:1", "reg.example.com/hub/group/app:1"},
		{Rules{Registry: "reg.example.com", Prefix: "hub"}, "other.example.com/x/y:2", "other.example.com/x/y:2"},
		{Rules{Registry: "reg.example.com", Prefix: "hub"}, "localhost/x", "localhost/x:latest"},
		{Rules{}, "127.0.0.1:5000/x/y@sha256:" + sixtyFour, "127.0.0.1:5000/x/y@sha256:" + sixtyFour},
	} {
		got, err := tc.rules.Resolve(tc.in)
		if err != nil {
			t.Errorf("%+v %q: %v", tc.rules, tc.in, err)
			continue
		}
		if got.String() != tc.want {
			t.Errorf("%+v %q = %q, want %q", tc.rules, tc.in, got, tc.want)
		}
	}
	for _, bad := range []string{"", "  ", "UPPER/case", "a b", "x@sha256:zz"} {
		if _, err := (Rules{}).Resolve(bad); !errors.Is(err, ErrBadName) {
			t.Errorf("%q: err = %v, want ErrBadName", bad, err)
		}
	}
}

const sixtyFour = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// spec: SPEC-14
func TestParsePlatform(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"linux/amd64", "linux/amd64"}, {"arm64/v8", "linux/arm64/v8"}, {"aarch64", "linux/arm64"},
		{"x86_64", "linux/amd64"}, {"LINUX/ARM/v7", "linux/arm/v7"}, {"windows/amd64", "windows/amd64"},
	} {
		p, err := ParsePlatform(tc.in)
		if err != nil || p.String() != tc.want {
			t.Errorf("%q = %v, %v; want %s", tc.in, p, err, tc.want)
		}
	}
	for _, bad := range []string{"linux/", "a/b/c/d", "/"} {
		if _, err := ParsePlatform(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if !(Platform{"linux", "arm64", ""}).matches(Platform{"linux", "arm64", "v8"}) ||
		!(Platform{"linux", "arm64", "v8"}).matches(Platform{"linux", "arm64", ""}) ||
		(Platform{"linux", "arm", "v7"}).matches(Platform{"linux", "arm", "v6"}) {
		t.Fatal("variant matching")
	}
}

// Resolve never panics and either fails with ErrBadName or yields a
// reference that resolves to itself.
func FuzzResolve(f *testing.F) {
	for _, s := range []string{"ruby:3.3", "a/b/c:d", "host:5000/x@sha256:" + sixtyFour, "", "::", "x/../y", "localhost/x"} {
		f.Add(s, "reg.example.com", "pre")
	}
	f.Fuzz(func(t *testing.T, name, registry, prefix string) {
		r, err := Rules{Registry: registry, Prefix: prefix}.Resolve(name)
		if err != nil {
			if !errors.Is(err, ErrBadName) {
				t.Fatalf("err %v is not ErrBadName", err)
			}
			return
		}
		again, err := Rules{}.Resolve(r.String())
		if err != nil || again != r {
			t.Fatalf("%q → %q → %q, %v", name, r, again, err)
		}
	})
}
