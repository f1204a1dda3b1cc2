package ocitest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/vk-ci/vk/internal/deptest"
	"github.com/vk-ci/vk/internal/registrytest"
)

// LayerE writes the entries in order with the documented defaults (0644
// files, 0755 directories, bodies, links, owners), and the same files
// give the same bytes.
func TestLayerE(t *testing.T) {
	files := []File{
		{Name: "etc/", Typ: tar.TypeDir},
		{Name: "etc/motd", Body: "hi\n"},
		{Name: "bin/sh", Typ: tar.TypeSymlink, Link: "busybox"},
		{Name: "home/u/", Typ: tar.TypeDir, UID: 1000, GID: 1000, Mode: 0o700},
		{Name: "bin/tool", Body: "#!/bin/sh\n", Mode: 0o755},
	}
	b, err := LayerE(files)
	if err != nil {
		t.Fatal(err)
	}
	again, err := LayerE(files)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, again) {
		t.Error("LayerE of the same files gave different bytes")
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var got []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		got = append(got, fmt.Sprintf("%s %c %o %d:%d %q %q", h.Name, h.Typeflag, h.Mode, h.Uid, h.Gid, h.Linkname, body))
	}
	want := []string{
		`etc/ 5 755 0:0 "" ""`,
		`etc/motd 0 644 0:0 "" "hi\n"`,
		`bin/sh 2 644 0:0 "busybox" ""`,
		`home/u/ 5 700 1000:1000 "" ""`,
		`bin/tool 0 755 0:0 "" "#!/bin/sh\n"`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("layer entries:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A tar entry that cannot be written is an error, not a panic or a
// silent skip.
func TestLayerEError(t *testing.T) {
	if _, err := LayerE([]File{{Name: "x", Typ: tar.TypeXHeader}}); err == nil {
		t.Error("LayerE accepted a PAX header entry, which tar cannot write by hand")
	}
}

// fakeTB records what the wrappers do with a TB.
type fakeTB struct {
	fatal, skip string
}

func (f *fakeTB) Helper()                        {}
func (f *fakeTB) Fatal(args ...any)              { f.fatal = fmt.Sprint(args...) }
func (f *fakeTB) Fatalf(format string, a ...any) { f.fatal = fmt.Sprintf(format, a...) }
func (f *fakeTB) Skipf(format string, a ...any)  { f.skip = fmt.Sprintf(format, a...) }
func (f *fakeTB) Errorf(format string, a ...any) {}

var _ TB = (*fakeTB)(nil)
var _ TB = (testing.TB)(nil)

// The TB wrappers fail the test on the error their E form returns.
func TestWrappersFail(t *testing.T) {
	var tb fakeTB
	Layer(&tb, []File{{Name: "x", Typ: tar.TypeXHeader}})
	if tb.fatal == "" {
		t.Error("Layer did not fail the test on a bad entry")
	}
	// A port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host := ln.Addr().String()
	ln.Close()
	tb = fakeTB{}
	Push(&tb, host, "x/y:v1", Host(), nil, mustLayer(t))
	if !strings.Contains(tb.fatal, "ocitest: push") {
		t.Errorf("Push to a closed port: fatal %q, want an ocitest push error", tb.fatal)
	}
	tb = fakeTB{}
	PushIndex(&tb, host, "x/y:v1", nil)
	if !strings.Contains(tb.fatal, "ocitest: push index") {
		t.Errorf("PushIndex to a closed port: fatal %q", tb.fatal)
	}
	if _, err := PushE(context.Background(), host, "x/y:v1", Host(), nil, []byte("not gzip")); err == nil {
		t.Error("PushE accepted a layer that is not gzip")
	}
}

func mustLayer(t *testing.T) []byte {
	b, err := LayerE([]File{{Name: "a", Body: "a"}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// BaseFilesE returns the busybox + bash rootfs; BaseFiles skips (not
// fails) where busybox-static or bash is missing.
func TestBaseFiles(t *testing.T) {
	files, err := BaseFilesE()
	if errors.Is(err, ErrNoBusybox) || errors.Is(err, ErrNoBash) {
		var tb fakeTB
		BaseFiles(&tb)
		if tb.skip == "" || tb.fatal != "" {
			t.Errorf("BaseFiles on a host lacking a part: skip %q fatal %q, want a skip", tb.skip, tb.fatal)
		}
		t.Skipf("host lacks a part: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range files {
		names[f.Name] = true
	}
	for _, want := range []string{"bin/busybox", "bin/bash", "bin/sh", "bin/httpd", "bin/wget", "etc/passwd", "etc/group", "tmp/"} {
		if !names[want] {
			t.Errorf("base rootfs lacks %s", want)
		}
	}
	bb, err := os.ReadFile(Busybox)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if f.Name == "bin/busybox" && f.Body != string(bb) {
			t.Error("bin/busybox is not the host's busybox")
		}
	}
}

// PushE puts a manifest the registry serves under the tag, naming the
// config (with the platform and runtime config) and the layer; PushIndexE
// an index over it.
func TestPushE(t *testing.T) {
	reg := registrytest.New(t)
	ctx := t.Context()
	layer := mustLayer(t)
	plat := Platform{OS: "linux", Architecture: "arm", Variant: "v7"}
	md, err := PushE(ctx, reg.Addr, "ns/img:v2", plat, map[string]any{"Env": []string{"A=1"}}, layer)
	if err != nil {
		t.Fatal(err)
	}
	var man struct {
		Config struct{ Digest string }
		Layers []struct{ Digest string }
	}
	getJSON(t, reg.URL()+"/v2/ns/img/manifests/v2", "application/vnd.oci.image.manifest.v1+json", &man)
	if len(man.Layers) != 1 || man.Config.Digest == "" {
		t.Fatalf("manifest %+v, want one layer and a config", man)
	}
	var conf struct {
		OS, Architecture, Variant string
		Config                    struct{ Env []string }
		RootFS                    struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	getJSON(t, reg.URL()+"/v2/ns/img/blobs/"+man.Config.Digest, "", &conf)
	if conf.OS != "linux" || conf.Architecture != "arm" || conf.Variant != "v7" || len(conf.Config.Env) != 1 || len(conf.RootFS.DiffIDs) != 1 {
		t.Errorf("config %+v", conf)
	}
	if err := PushIndexE(ctx, reg.Addr, "ns/img:multi", map[Platform]ocispec.Descriptor{plat: md}); err != nil {
		t.Fatal(err)
	}
	var idx struct {
		Manifests []struct {
			Digest   string
			Platform struct{ Architecture string }
		}
	}
	getJSON(t, reg.URL()+"/v2/ns/img/manifests/multi", "application/vnd.oci.image.index.v1+json", &idx)
	if len(idx.Manifests) != 1 || idx.Manifests[0].Digest != md.Digest.String() || idx.Manifests[0].Platform.Architecture != "arm" {
		t.Errorf("index %+v, want the manifest %s for arm", idx, md.Digest)
	}
}

func getJSON(t *testing.T, url, accept string, v any) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// The package does not import "testing", so cmd/vk (through the demo)
// does not link it.
func TestNoTestingImport(t *testing.T) {
	deptest.Forbid(t, "github.com/vk-ci/vk/internal/ocitest", "testing")
}

func TestSplitTag(t *testing.T) {
	for _, tc := range []struct{ in, repo, tag string }{
		{"a/b:v1", "a/b", "v1"},
		{"a/b", "a/b", "latest"},
		{"127.0.0.1:5000/a/b", "127.0.0.1:5000/a/b", "latest"},
		{"127.0.0.1:5000/a/b:t", "127.0.0.1:5000/a/b", "t"},
	} {
		if r, tg := SplitTag(tc.in); r != tc.repo || tg != tc.tag {
			t.Errorf("SplitTag(%q) = %q, %q; want %q, %q", tc.in, r, tg, tc.repo, tc.tag)
		}
	}
}
