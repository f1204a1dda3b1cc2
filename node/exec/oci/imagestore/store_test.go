package imagestore

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/ocitest"
	"github.com/vk-ci/vk/internal/registrytest"
	"github.com/vk-ci/vk/internal/testlog"
)

func newStore(t *testing.T, reg *registrytest.Registry, mut func(*Config)) *Store {
	t.Helper()
	cfg := Config{Root: t.TempDir(), Rules: Rules{Registry: reg.Addr, PlainHTTP: []string{reg.Addr}}, Log: testlog.New(t)}
	if mut != nil {
		mut(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func whiteoutLayers(t *testing.T) (lower, upper []byte) {
	lower = ocitest.Layer(t, []ocitest.File{
		{Name: "data/", Typ: tar.TypeDir},
		{Name: "data/a", Body: "a"},
		{Name: "data/b", Body: "b"},
		{Name: "opq/", Typ: tar.TypeDir},
		{Name: "opq/x", Body: "x"},
		{Name: "opq/sub/", Typ: tar.TypeDir},
		{Name: "opq/sub/deep", Body: "deep"},
	})
	upper = ocitest.Layer(t, []ocitest.File{
		{Name: "data/.wh.a", Typ: tar.TypeReg},
		{Name: "opq/y", Body: "y"}, // before the marker: still kept
		{Name: "opq/.wh..wh..opq", Typ: tar.TypeReg},
		{Name: "data/c", Body: "c"},
	})
	return lower, upper
}

func listTree(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel != "." {
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Whiteouts and opaque directories of an upper layer hide what lower
// layers put there; the image is unpacked once, flattened.
func TestPullWhiteouts(t *testing.T) {
	reg := registrytest.New(t)
	lower, upper := whiteoutLayers(t)
	ocitest.Push(t, reg.Addr, "test/wh:v1", ocitest.Host(), map[string]any{"Env": []string{"A=1"}, "User": "builder"}, lower, upper)
	s := newStore(t, reg, nil)
	im, err := s.Get(context.Background(), Request{Name: "test/wh:v1"})
	if err != nil {
		t.Fatal(err)
	}
	defer im.Release()
	got := strings.Join(listTree(t, im.Rootfs), " ")
	want := "data data/b data/c opq opq/y"
	if got != want {
		t.Fatalf("rootfs = %q, want %q", got, want)
	}
	if im.Config.User != "builder" || len(im.Config.Env) != 1 || !im.Pulled {
		t.Fatalf("config = %+v pulled=%v", im.Config, im.Pulled)
	}
}

// spec: FAIL-04
func TestMissingImageIsPullError(t *testing.T) {
	reg := registrytest.New(t)
	s := newStore(t, reg, nil)
	_, err := s.Get(context.Background(), Request{Name: "test/nope:v1"})
	if !errors.Is(err, ErrPull) {
		t.Fatalf("err = %v, want ErrPull", err)
	}
	// The registry's answer is in the message.
	if !strings.Contains(err.Error(), "test/nope:v1: not found") {
		t.Fatalf("err %q does not carry the registry's answer", err)
	}
}

// Pull policies: never without the image fails; if-not-present uses the
// store without contacting the registry (stopped to prove it); always
// needs the registry; [always, if-not-present] falls back.
// spec: FAIL-04
func TestPullPolicies(t *testing.T) {
	reg := registrytest.New(t)
	layer := ocitest.Layer(t, []ocitest.File{{Name: "f", Body: "1"}})
	ocitest.Push(t, reg.Addr, "test/pp:v1", ocitest.Host(), nil, layer)
	s := newStore(t, reg, nil)
	ctx := context.Background()

	if _, err := s.Get(ctx, Request{Name: "test/pp:v1", PullPolicy: []string{PullNever}}); !errors.Is(err, ErrPull) {
		t.Fatalf("never, absent: err = %v, want ErrPull", err)
	}
	im, err := s.Get(ctx, Request{Name: "test/pp:v1", PullPolicy: []string{PullIfNotPresent}})
	if err != nil || !im.Pulled {
		t.Fatalf("if-not-present, absent: %v pulled=%v", err, im != nil && im.Pulled)
	}
	im.Release()

	reg.Stop()
	for _, pp := range [][]string{{PullIfNotPresent}, {PullNever}, {PullAlways, PullIfNotPresent}} {
		im, err := s.Get(ctx, Request{Name: "test/pp:v1", PullPolicy: pp})
		if err != nil {
			t.Fatalf("%v with registry down: %v", pp, err)
		}
		if im.Pulled && pp[0] != PullAlways {
			t.Fatalf("%v contacted the registry", pp)
		}
		im.Release()
	}
	if _, err := s.Get(ctx, Request{Name: "test/pp:v1", PullPolicy: []string{PullAlways}}); !errors.Is(err, ErrPull) {
		t.Fatalf("always with registry down: err = %v, want ErrPull", err)
	}
	if _, err := s.Get(ctx, Request{Name: "test/pp:v1", PullPolicy: []string{"sometimes"}}); !errors.Is(err, ErrPolicy) || !errors.Is(err, ErrPull) {
		t.Fatalf("unknown policy: err = %v", err)
	}
}

// The platform asked for selects the index entry, and an image of another
// platform is refused.
// spec: SPEC-14
func TestPlatform(t *testing.T) {
	reg := registrytest.New(t)
	amd := ocitest.Push(t, reg.Addr, "test/multi:amd64", ocitest.Platform{OS: "linux", Architecture: "amd64"}, nil,
		ocitest.Layer(t, []ocitest.File{{Name: "arch", Body: "amd64"}}))
	arm := ocitest.Push(t, reg.Addr, "test/multi:arm64", ocitest.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}, nil,
		ocitest.Layer(t, []ocitest.File{{Name: "arch", Body: "arm64"}}))
	ocitest.PushIndex(t, reg.Addr, "test/multi:v1", map[ocitest.Platform]ocispec.Descriptor{
		{OS: "linux", Architecture: "amd64"}:                amd,
		{OS: "linux", Architecture: "arm64", Variant: "v8"}: arm,
	})
	s := newStore(t, reg, nil)
	for _, tc := range []struct{ platform, want string }{
		{"linux/amd64", "amd64"}, {"arm64/v8", "arm64"}, {"linux/aarch64", "arm64"}, {"amd64", "amd64"},
	} {
		im, err := s.Get(context.Background(), Request{Name: "test/multi:v1", Platform: tc.platform})
		if err != nil {
			t.Fatalf("%s: %v", tc.platform, err)
		}
		b, _ := os.ReadFile(filepath.Join(im.Rootfs, "arch"))
		im.Release()
		if string(b) != tc.want {
			t.Fatalf("platform %s got the %s image", tc.platform, b)
		}
	}
	if _, err := s.Get(context.Background(), Request{Name: "test/multi:v1", Platform: "linux/s390x"}); !errors.Is(err, ErrPull) || !strings.Contains(err.Error(), "s390x") {
		t.Fatalf("missing platform: err = %v", err)
	}
	if _, err := s.Get(context.Background(), Request{Name: "test/multi:arm64", Platform: "linux/amd64"}); !errors.Is(err, ErrPull) {
		t.Fatalf("single-platform mismatch: err = %v", err)
	}
}

// A mirror is tried first; a mirror that fails falls back to the origin.
// spec: STAGE-08
func TestMirrors(t *testing.T) {
	origin := registrytest.New(t)
	mirror := registrytest.New(t)
	ocitest.Push(t, origin.Addr, "test/m:v1", ocitest.Host(), nil, ocitest.Layer(t, []ocitest.File{{Name: "from", Body: "origin"}}))
	ocitest.Push(t, mirror.Addr, "test/m:v1", ocitest.Host(), nil, ocitest.Layer(t, []ocitest.File{{Name: "from", Body: "mirror"}}))
	s := newStore(t, origin, func(c *Config) {
		c.Rules.Mirrors = map[string][]string{origin.Addr: {mirror.Addr}}
		c.Rules.PlainHTTP = append(c.Rules.PlainHTTP, mirror.Addr)
	})
	read := func() string {
		im, err := s.Get(context.Background(), Request{Name: "test/m:v1"})
		if err != nil {
			t.Fatal(err)
		}
		defer im.Release()
		b, _ := os.ReadFile(filepath.Join(im.Rootfs, "from"))
		return string(b)
	}
	if got := read(); got != "mirror" {
		t.Fatalf("got %q, want the mirror's image", got)
	}
	mirror.Stop()
	if got := read(); got != "origin" {
		t.Fatalf("mirror down: got %q, want the origin's image", got)
	}
}

// The job's credentials go only to the host they name (AUTH-05): not to
// a mirror, not to another registry.
// spec: AUTH-05, SPEC-17
func TestCredentialsOnlyForTheirHost(t *testing.T) {
	f := credFunc([]Credential{{Host: "https://registry.example.com/", Username: "u", Password: "p"}, {Host: "other:5000", Username: "o", Password: "q"}})
	for _, tc := range []struct {
		host, user string
	}{
		{"registry.example.com", "u"}, {"REGISTRY.example.com", "u"}, {"other:5000", "o"},
		{"mirror.example.com", ""}, {"other", ""}, {"registry.example.com:443", ""},
	} {
		c, err := f(context.Background(), tc.host)
		if err != nil || c.Username != tc.user {
			t.Errorf("host %s: cred %q, %v; want %q", tc.host, c.Username, err, tc.user)
		}
	}
}

// GC removes images unused for IdleAfter, never one in use, and the
// references to what it removed.
func TestGC(t *testing.T) {
	reg := registrytest.New(t)
	ocitest.Push(t, reg.Addr, "test/gc:v1", ocitest.Host(), nil, ocitest.Layer(t, []ocitest.File{{Name: "f", Body: "1"}}))
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := newStore(t, reg, func(c *Config) { c.Clock = clk; c.IdleAfter = time.Hour })
	ctx := context.Background()
	im, err := s.Get(ctx, Request{Name: "test/gc:v1"})
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Hour)
	if rm, err := s.GC(ctx); err != nil || len(rm) != 0 {
		t.Fatalf("in use: removed %v, %v", rm, err)
	}
	im.Release()
	clk.Advance(59 * time.Minute)
	if rm, _ := s.GC(ctx); len(rm) != 0 {
		t.Fatalf("used 59m ago: removed %v", rm)
	}
	clk.Advance(2 * time.Minute)
	rm, err := s.GC(ctx)
	if err != nil || len(rm) != 1 || rm[0] != im.ID {
		t.Fatalf("idle: removed %v, %v; want [%s]", rm, err, im.ID)
	}
	if _, err := os.Stat(im.Rootfs); !os.IsNotExist(err) {
		t.Fatalf("rootfs still there: %v", err)
	}
	reg.Stop()
	if _, err := s.Get(ctx, Request{Name: "test/gc:v1", PullPolicy: []string{PullNever}}); !errors.Is(err, ErrPull) {
		t.Fatalf("after gc, never: err = %v, want ErrPull", err)
	}
}

// A hard link in an upper layer to a file of a lower one is made, though
// the flattened image lists the link before its target.
func TestPullHardLinkToLowerLayer(t *testing.T) {
	reg := registrytest.New(t)
	lower := ocitest.Layer(t, []ocitest.File{{Name: "bin/", Typ: tar.TypeDir}, {Name: "bin/busybox", Body: "bb"}})
	upper := ocitest.Layer(t, []ocitest.File{{Name: "bin/sh", Typ: tar.TypeLink, Link: "bin/busybox"}})
	ocitest.Push(t, reg.Addr, "test/hl:v1", ocitest.Host(), nil, lower, upper)
	s := newStore(t, reg, nil)
	im, err := s.Get(context.Background(), Request{Name: "test/hl:v1"})
	if err != nil {
		t.Fatal(err)
	}
	defer im.Release()
	a, err1 := os.Stat(filepath.Join(im.Rootfs, "bin/sh"))
	b, err2 := os.Stat(filepath.Join(im.Rootfs, "bin/busybox"))
	if err1 != nil || err2 != nil || !os.SameFile(a, b) {
		t.Fatalf("bin/sh is not a hard link to bin/busybox: %v %v", err1, err2)
	}
}

// A registry is spoken to over plain HTTP only when the rules list it,
// even on a loopback address (where go-containerregistry alone would
// choose plain HTTP): credentials never go out in the clear unasked.
func TestPlainHTTPOnlyWhenListed(t *testing.T) {
	reg := registrytest.New(t)
	ocitest.Push(t, reg.Addr, "test/tls:v1", ocitest.Host(), nil, ocitest.Layer(t, []ocitest.File{{Name: "f", Body: "1"}}))
	s := newStore(t, reg, func(c *Config) { c.Rules.PlainHTTP = nil })
	_, err := s.Get(context.Background(), Request{Name: "test/tls:v1", Credentials: []Credential{{Host: reg.Addr, Username: "u", Password: "p"}}})
	if !errors.Is(err, ErrPull) {
		t.Fatalf("pull over plain HTTP from an unlisted registry: err = %v, want ErrPull", err)
	}
	if !strings.Contains(err.Error(), "https://") {
		t.Fatalf("err %q: the pull did not try HTTPS", err)
	}
}

// fixedTransport answers every request with the same body.
type fixedTransport struct{ body []byte }

func (f fixedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Body: io.NopCloser(bytes.NewReader(f.body)), Header: http.Header{}, Request: req}, nil
}

// A manifest larger than the bound fails to read; a blob is not bound by it.
func TestManifestBound(t *testing.T) {
	big := bytes.Repeat([]byte("x"), maxManifestBytes+1)
	tr := &hostTransport{base: fixedTransport{big}, host: "r.example"}
	for _, tc := range []struct {
		path    string
		wantErr bool
	}{{"/v2/a/manifests/v1", true}, {"/v2/a/blobs/sha256:00", false}} {
		req, _ := http.NewRequest("GET", "https://r.example"+tc.path, nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.ReadAll(resp.Body)
		if (err != nil) != tc.wantErr {
			t.Fatalf("%s: read err = %v, want error %v", tc.path, err, tc.wantErr)
		}
	}
	ok := bytes.Repeat([]byte("x"), maxManifestBytes)
	req, _ := http.NewRequest("GET", "https://r.example/v2/a/manifests/v1", nil)
	resp, _ := (&hostTransport{base: fixedTransport{ok}, host: "r.example"}).RoundTrip(req)
	if b, err := io.ReadAll(resp.Body); err != nil || len(b) != maxManifestBytes {
		t.Fatalf("manifest at the bound: %d bytes, %v", len(b), err)
	}
}

// The store passes each host its job credential itself and never reads a
// docker config file from the node (go-containerregistry's default
// keychain would).
func TestNoDockerConfig(t *testing.T) {
	files, _ := filepath.Glob("*.go")
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{"DefaultKeychain", "WithAuthFromKeychain", "NewKeychainFromHelper"} {
			if strings.Contains(string(b), bad) {
				t.Errorf("%s uses %s", f, bad)
			}
		}
	}
}
