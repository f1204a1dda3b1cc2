// Package ocitest builds small OCI images for the tests of the container
// executor (node/exec/oci), the node agent and the end-to-end fleet
// (internal/testfleet), and pushes them to a real plain-HTTP registry
// (internal/registrytest, or the fleet's docker-registry): layers from
// literal files, and a busybox + bash rootfs copied from the host.
package ocitest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/registry/remote"
)

// File is one entry of a test layer. Typ is a tar type flag (0 regular);
// Mode 0 means 0644 (0755 for directories).
type File struct {
	Name, Body, Link string
	Typ              byte
	Mode             int64
	UID, GID         int
}

// Layer returns a gzip-compressed tar of files, in order.
func Layer(t testing.TB, files []File) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, f := range files {
		h := &tar.Header{Name: f.Name, Typeflag: f.Typ, Mode: f.Mode, Linkname: f.Link, Uid: f.UID, Gid: f.GID, ModTime: time.Unix(1700000000, 0)}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if h.Typeflag == tar.TypeDir {
				h.Mode = 0o755
			}
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(f.Body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(f.Body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Busybox is the host's static busybox.
const Busybox = "/usr/bin/busybox"

// applets linked to busybox in the test rootfs.
var applets = []string{"sh", "echo", "cat", "ls", "sleep", "ps", "id", "hostname", "mount", "head", "tail",
	"dd", "true", "false", "env", "grep", "uname", "nc", "httpd", "wget", "kill", "mkdir", "rm", "printf",
	"seq", "yes", "touch", "test", "wc", "tr", "sed", "stat", "ip"}

// BaseFiles is a busybox-static rootfs with /bin/bash and the shared
// libraries ldd names for it, /etc/passwd with root and builder (1000),
// and /etc/group. It skips the test when busybox-static or bash is
// missing.
func BaseFiles(t testing.TB) []File {
	t.Helper()
	bb, err := os.ReadFile(Busybox)
	if err != nil {
		t.Skipf("ocitest: %s missing (apt-get install -y busybox-static): %v", Busybox, err)
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skipf("ocitest: bash missing: %v", err)
	}
	bashReal, _ := filepath.EvalSymlinks(bash)
	files := []File{
		{Name: "bin/", Typ: tar.TypeDir}, {Name: "etc/", Typ: tar.TypeDir}, {Name: "tmp/", Typ: tar.TypeDir, Mode: 0o1777},
		{Name: "root/", Typ: tar.TypeDir, Mode: 0o700}, {Name: "home/", Typ: tar.TypeDir},
		{Name: "home/builder/", Typ: tar.TypeDir, UID: 1000, GID: 1000},
		{Name: "bin/busybox", Body: string(bb), Mode: 0o755},
		{Name: "etc/passwd", Body: "root:x:0:0:root:/root:/bin/sh\nbuilder:x:1000:1000:builder:/home/builder:/bin/sh\n"},
		{Name: "etc/group", Body: "root:x:0:\nbuilder:x:1000:\nextra:x:2000:builder\n"},
	}
	for _, a := range applets {
		files = append(files, File{Name: "bin/" + a, Typ: tar.TypeSymlink, Link: "busybox"})
	}
	b, err := os.ReadFile(bashReal)
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, File{Name: "bin/bash", Body: string(b), Mode: 0o755})
	out, err := exec.Command("ldd", bashReal).Output()
	if err != nil {
		t.Fatalf("ldd %s: %v", bashReal, err)
	}
	dirs := map[string]bool{}
	var libs []File
	for _, m := range regexp.MustCompile(`(/[^\s]+\.so[^\s]*)`).FindAllString(string(out), -1) {
		real, err := filepath.EvalSymlinks(m)
		if err != nil {
			continue
		}
		lb, err := os.ReadFile(real)
		if err != nil {
			t.Fatal(err)
		}
		for d := filepath.Dir(m); d != "/"; d = filepath.Dir(d) {
			dirs[d[1:]+"/"] = true
		}
		libs = append(libs, File{Name: m[1:], Body: string(lb), Mode: 0o755})
	}
	var ds []string
	for d := range dirs {
		ds = append(ds, d)
	}
	sort.Strings(ds)
	for _, d := range ds {
		files = append(files, File{Name: d, Typ: tar.TypeDir})
	}
	return append(files, libs...)
}

// Platform is an image platform.
type Platform struct{ OS, Architecture, Variant string }

// Host is linux/amd64-style platform of this machine.
func Host() Platform { return Platform{OS: "linux", Architecture: hostArch()} }

// Push pushes a single-platform image of layers (gzip tars) and the given
// runtime config ("Env", "Entrypoint", "Cmd", "User", …) to the
// plain-HTTP registry at host as repo:tag, returning the manifest.
func Push(t testing.TB, host, repoTag string, plat Platform, cfg map[string]any, layers ...[]byte) ocispec.Descriptor {
	t.Helper()
	ctx := context.Background()
	repoName, tag := SplitTag(repoTag)
	repo := repository(t, host, repoName)
	push := func(mt string, b []byte) ocispec.Descriptor {
		d := ocispec.Descriptor{MediaType: mt, Digest: digest.FromBytes(b), Size: int64(len(b))}
		if err := repo.Push(ctx, d, bytes.NewReader(b)); err != nil {
			t.Fatalf("ocitest: push %s: %v", mt, err)
		}
		return d
	}
	var diffIDs []string
	var lds []ocispec.Descriptor
	for _, l := range layers {
		zr, err := gzip.NewReader(bytes.NewReader(l))
		if err != nil {
			t.Fatal(err)
		}
		var raw bytes.Buffer
		if _, err := raw.ReadFrom(zr); err != nil {
			t.Fatal(err)
		}
		diffIDs = append(diffIDs, digest.FromBytes(raw.Bytes()).String())
		lds = append(lds, push(ocispec.MediaTypeImageLayerGzip, l))
	}
	if cfg == nil {
		cfg = map[string]any{}
	}
	conf := map[string]any{
		"os": plat.OS, "architecture": plat.Architecture, "config": cfg,
		"rootfs": map[string]any{"type": "layers", "diff_ids": diffIDs},
	}
	if plat.Variant != "" {
		conf["variant"] = plat.Variant
	}
	cb, _ := json.Marshal(conf)
	man := ocispec.Manifest{MediaType: ocispec.MediaTypeImageManifest, Config: push(ocispec.MediaTypeImageConfig, cb), Layers: lds}
	man.SchemaVersion = 2
	mb, _ := json.Marshal(man)
	md := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromBytes(mb), Size: int64(len(mb))}
	if err := repo.PushReference(ctx, md, bytes.NewReader(mb), tag); err != nil {
		t.Fatalf("ocitest: push manifest: %v", err)
	}
	return md
}

// PushIndex pushes an image index over manifests already in the
// repository, one per platform.
func PushIndex(t testing.TB, host, repoTag string, entries map[Platform]ocispec.Descriptor) {
	t.Helper()
	repoName, tag := SplitTag(repoTag)
	repo := repository(t, host, repoName)
	idx := ocispec.Index{MediaType: ocispec.MediaTypeImageIndex}
	idx.SchemaVersion = 2
	for p, d := range entries {
		d.Platform = &ocispec.Platform{OS: p.OS, Architecture: p.Architecture, Variant: p.Variant}
		idx.Manifests = append(idx.Manifests, d)
	}
	b, _ := json.Marshal(idx)
	d := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageIndex, Digest: digest.FromBytes(b), Size: int64(len(b))}
	if err := repo.PushReference(context.Background(), d, bytes.NewReader(b), tag); err != nil {
		t.Fatalf("ocitest: push index: %v", err)
	}
}

func repository(t testing.TB, host, name string) *remote.Repository {
	repo, err := remote.NewRepository(host + "/" + name)
	if err != nil {
		t.Fatal(err)
	}
	repo.PlainHTTP = true
	return repo
}

// SplitTag splits "repo:tag" ("latest" when absent).
func SplitTag(s string) (string, string) {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == ':' {
			return s[:i], s[i+1:]
		}
		if s[i] == '/' {
			break
		}
	}
	return s, "latest"
}
