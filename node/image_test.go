package node

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"os"
	osexec "os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/vk-ci/vk/node/exec/oci"
)

// The container backend's own test images (node/exec/oci/internal/ocitest)
// are internal to that package, so the agent's tests build theirs here the
// same way: a busybox-static rootfs with the host's bash and the shared
// libraries it needs, pushed to a real docker-registry.

// needOCI skips the test unless the container backend can run here.
func needOCI(t *testing.T) {
	t.Helper()
	if err := oci.Available("", ""); err != nil {
		t.Skipf("container backend unavailable (needs root, cgroup v1 and runc): %v", err)
	}
	if _, err := os.Stat("/usr/bin/busybox"); err != nil {
		t.Skipf("busybox-static missing for the test image (apt-get install -y busybox-static): %v", err)
	}
}

type tarFile struct {
	name, body, link string
	typ              byte
	mode             int64
}

// testRootfsLayer is a gzip tar of busybox applets, bash with its
// libraries and extra files.
func testRootfsLayer(t *testing.T, extra ...tarFile) []byte {
	t.Helper()
	bb, err := os.ReadFile("/usr/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	bashPath, err := osexec.LookPath("bash")
	if err != nil {
		t.Skipf("bash missing: %v", err)
	}
	bashPath, _ = filepath.EvalSymlinks(bashPath)
	bash, err := os.ReadFile(bashPath)
	if err != nil {
		t.Fatal(err)
	}
	files := []tarFile{
		{name: "bin/", typ: tar.TypeDir}, {name: "etc/", typ: tar.TypeDir}, {name: "tmp/", typ: tar.TypeDir, mode: 0o1777},
		{name: "root/", typ: tar.TypeDir, mode: 0o700},
		{name: "bin/busybox", body: string(bb), mode: 0o755},
		{name: "bin/bash", body: string(bash), mode: 0o755},
		{name: "etc/passwd", body: "root:x:0:0:root:/root:/bin/sh\n"},
		{name: "etc/group", body: "root:x:0:\n"},
	}
	for _, a := range []string{"sh", "echo", "cat", "sleep", "hostname", "mkdir", "rm", "ls", "id", "true", "env", "grep"} {
		files = append(files, tarFile{name: "bin/" + a, typ: tar.TypeSymlink, link: "busybox"})
	}
	out, err := osexec.Command("ldd", bashPath).Output()
	if err != nil {
		t.Fatalf("ldd %s: %v", bashPath, err)
	}
	dirs := map[string]bool{}
	var libs []tarFile
	for _, m := range regexp.MustCompile(`(/[^\s]+\.so[^\s]*)`).FindAllString(string(out), -1) {
		real, err := filepath.EvalSymlinks(m)
		if err != nil {
			continue
		}
		b, err := os.ReadFile(real)
		if err != nil {
			t.Fatal(err)
		}
		for d := filepath.Dir(m); d != "/"; d = filepath.Dir(d) {
			dirs[d[1:]+"/"] = true
		}
		libs = append(libs, tarFile{name: m[1:], body: string(b), mode: 0o755})
	}
	var ds []string
	for d := range dirs {
		ds = append(ds, d)
	}
	sort.Strings(ds)
	for _, d := range ds {
		files = append(files, tarFile{name: d, typ: tar.TypeDir})
	}
	files = append(append(files, libs...), extra...)

	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Typeflag: f.typ, Mode: f.mode, Linkname: f.link, ModTime: time.Unix(1700000000, 0)}
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
			h.Size = int64(len(f.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(f.body)); err != nil {
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

// pushTestImage pushes a one-layer image for this host's platform to the
// plain-HTTP registry at host as repo:tag.
func pushTestImage(t *testing.T, host, repo, tag string, layer []byte) {
	t.Helper()
	ctx := context.Background()
	r, err := remote.NewRepository(host + "/" + repo)
	if err != nil {
		t.Fatal(err)
	}
	r.PlainHTTP = true
	push := func(mt string, b []byte) ocispec.Descriptor {
		d := ocispec.Descriptor{MediaType: mt, Digest: digest.FromBytes(b), Size: int64(len(b))}
		if err := r.Push(ctx, d, bytes.NewReader(b)); err != nil {
			t.Fatalf("push %s: %v", mt, err)
		}
		return d
	}
	zr, err := gzip.NewReader(bytes.NewReader(layer))
	if err != nil {
		t.Fatal(err)
	}
	var raw bytes.Buffer
	if _, err := raw.ReadFrom(zr); err != nil {
		t.Fatal(err)
	}
	cfg, _ := json.Marshal(map[string]any{
		"os": "linux", "architecture": runtime.GOARCH, "config": map[string]any{"Env": []string{"PATH=/bin"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{digest.FromBytes(raw.Bytes()).String()}},
	})
	man := ocispec.Manifest{MediaType: ocispec.MediaTypeImageManifest, Config: push(ocispec.MediaTypeImageConfig, cfg),
		Layers: []ocispec.Descriptor{push(ocispec.MediaTypeImageLayerGzip, layer)}}
	man.SchemaVersion = 2
	mb, _ := json.Marshal(man)
	md := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromBytes(mb), Size: int64(len(mb))}
	if err := r.PushReference(ctx, md, bytes.NewReader(mb), tag); err != nil {
		t.Fatalf("push manifest: %v", err)
	}
}
