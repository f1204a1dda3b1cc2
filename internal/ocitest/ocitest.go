// Package ocitest builds small OCI images and pushes them to a real
// plain-HTTP registry (internal/registrytest, or the fleet's
// docker-registry): layers from literal files, and a busybox + bash rootfs
// copied from the host.
//
// Its users are the tests of the container executor (node/exec/oci), the
// node agent and the end-to-end fleet (internal/testfleet), and `vk demo
// --containers` (internal/demo), which builds its demo image with it at
// start. So it is not test-only, but it is still a harness: no production
// binary may import it other than cmd/vk through internal/demo (which
// already carries internal/testfleet).
//
// Each operation has two forms. The error-returning ones ([BaseFilesE],
// [LayerE], [PushE], [PushIndexE]) are what a program calls; the original
// ones ([BaseFiles], [Layer], [Push], [PushIndex]) are thin wrappers for
// tests that fail (or, for a host lacking busybox-static or bash, skip)
// the test on error. The wrappers take [TB], the subset of testing.TB
// they use, so that this package does not import "testing" and the demo
// does not link it into cmd/vk; *testing.T, *testing.B and testing.TB
// satisfy it.
package ocitest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/registry/remote"
)

// TB is what the test wrappers need of a testing.TB.
type TB interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
}

// Errors of [BaseFilesE]: the host lacks what the base rootfs copies.
var (
	// ErrNoBusybox means Busybox is missing or unreadable
	// (apt-get install -y busybox-static).
	ErrNoBusybox = errors.New("ocitest: busybox-static missing")
	// ErrNoBash means no bash on PATH.
	ErrNoBash = errors.New("ocitest: bash missing")
)

// File is one entry of a test layer. Typ is a tar type flag (0 regular);
// Mode 0 means 0644 (0755 for directories).
type File struct {
	Name, Body, Link string
	Typ              byte
	Mode             int64
	UID, GID         int
}

// LayerE returns a gzip-compressed tar of files, in order. Its bytes
// depend only on files (fixed modification times).
func LayerE(files []File) ([]byte, error) {
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
			return nil, fmt.Errorf("ocitest: layer entry %s: %w", f.Name, err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(f.Body)); err != nil {
				return nil, fmt.Errorf("ocitest: layer entry %s: %w", f.Name, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("ocitest: layer: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("ocitest: layer: %w", err)
	}
	return buf.Bytes(), nil
}

// Layer is [LayerE] failing t on error.
func Layer(t TB, files []File) []byte {
	t.Helper()
	b, err := LayerE(files)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Busybox is the host's static busybox.
const Busybox = "/usr/bin/busybox"

// applets linked to busybox in the test rootfs.
var applets = []string{"sh", "echo", "cat", "ls", "sleep", "ps", "id", "hostname", "mount", "head", "tail",
	"dd", "true", "false", "env", "grep", "uname", "nc", "httpd", "wget", "kill", "mkdir", "rm", "printf",
	"seq", "yes", "touch", "test", "wc", "tr", "sed", "stat", "ip"}

// BaseFilesE is a busybox-static rootfs with /bin/bash and the shared
// libraries ldd names for it, /etc/passwd with root and builder (1000),
// and /etc/group. A host without busybox-static yields [ErrNoBusybox],
// one without bash [ErrNoBash] (both wrapped).
func BaseFilesE() ([]File, error) {
	bb, err := os.ReadFile(Busybox)
	if err != nil {
		return nil, fmt.Errorf("%w: %s (apt-get install -y busybox-static): %w", ErrNoBusybox, Busybox, err)
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoBash, err)
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
		return nil, fmt.Errorf("ocitest: reading bash: %w", err)
	}
	files = append(files, File{Name: "bin/bash", Body: string(b), Mode: 0o755})
	out, err := exec.Command("ldd", bashReal).Output()
	if err != nil {
		return nil, fmt.Errorf("ocitest: ldd %s: %w", bashReal, err)
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
			return nil, fmt.Errorf("ocitest: reading %s: %w", real, err)
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
	return append(files, libs...), nil
}

// BaseFiles is [BaseFilesE] for tests: it skips t when busybox-static or
// bash is missing and fails it on any other error.
func BaseFiles(t TB) []File {
	t.Helper()
	files, err := BaseFilesE()
	switch {
	case errors.Is(err, ErrNoBusybox), errors.Is(err, ErrNoBash):
		t.Skipf("%v", err)
	case err != nil:
		t.Fatal(err)
	}
	return files
}

// Platform is an image platform.
type Platform struct{ OS, Architecture, Variant string }

// Host is linux/amd64-style platform of this machine.
func Host() Platform { return Platform{OS: "linux", Architecture: hostArch()} }

// PushE pushes a single-platform image of layers (gzip tars) and the given
// runtime config ("Env", "Entrypoint", "Cmd", "User", …; nil means none)
// to the plain-HTTP registry at host ("127.0.0.1:5000") as repo:tag,
// returning the manifest's descriptor.
func PushE(ctx context.Context, host, repoTag string, plat Platform, cfg map[string]any, layers ...[]byte) (ocispec.Descriptor, error) {
	repoName, tag := SplitTag(repoTag)
	repo, err := repository(host, repoName)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	push := func(mt string, b []byte) (ocispec.Descriptor, error) {
		d := ocispec.Descriptor{MediaType: mt, Digest: digest.FromBytes(b), Size: int64(len(b))}
		if err := repo.Push(ctx, d, bytes.NewReader(b)); err != nil {
			return d, fmt.Errorf("ocitest: push %s: %w", mt, err)
		}
		return d, nil
	}
	var diffIDs []string
	var lds []ocispec.Descriptor
	for i, l := range layers {
		zr, err := gzip.NewReader(bytes.NewReader(l))
		if err != nil {
			return ocispec.Descriptor{}, fmt.Errorf("ocitest: layer %d: %w", i, err)
		}
		var raw bytes.Buffer
		if _, err := raw.ReadFrom(zr); err != nil {
			return ocispec.Descriptor{}, fmt.Errorf("ocitest: layer %d: %w", i, err)
		}
		diffIDs = append(diffIDs, digest.FromBytes(raw.Bytes()).String())
		d, err := push(ocispec.MediaTypeImageLayerGzip, l)
		if err != nil {
			return ocispec.Descriptor{}, err
		}
		lds = append(lds, d)
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
	cb, err := json.Marshal(conf)
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("ocitest: image config: %w", err)
	}
	cd, err := push(ocispec.MediaTypeImageConfig, cb)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	man := ocispec.Manifest{MediaType: ocispec.MediaTypeImageManifest, Config: cd, Layers: lds}
	man.SchemaVersion = 2
	mb, err := json.Marshal(man)
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("ocitest: manifest: %w", err)
	}
	md := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromBytes(mb), Size: int64(len(mb))}
	if err := repo.PushReference(ctx, md, bytes.NewReader(mb), tag); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("ocitest: push manifest: %w", err)
	}
	return md, nil
}

// Push is [PushE] with a background context, failing t on error.
func Push(t TB, host, repoTag string, plat Platform, cfg map[string]any, layers ...[]byte) ocispec.Descriptor {
	t.Helper()
	d, err := PushE(context.Background(), host, repoTag, plat, cfg, layers...)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// PushIndexE pushes an image index over manifests already in the
// repository, one per platform, to the plain-HTTP registry at host as
// repo:tag.
func PushIndexE(ctx context.Context, host, repoTag string, entries map[Platform]ocispec.Descriptor) error {
	repoName, tag := SplitTag(repoTag)
	repo, err := repository(host, repoName)
	if err != nil {
		return err
	}
	idx := ocispec.Index{MediaType: ocispec.MediaTypeImageIndex}
	idx.SchemaVersion = 2
	for p, d := range entries {
		d.Platform = &ocispec.Platform{OS: p.OS, Architecture: p.Architecture, Variant: p.Variant}
		idx.Manifests = append(idx.Manifests, d)
	}
	b, err := json.Marshal(idx)
	if err != nil {
		return fmt.Errorf("ocitest: index: %w", err)
	}
	d := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageIndex, Digest: digest.FromBytes(b), Size: int64(len(b))}
	if err := repo.PushReference(ctx, d, bytes.NewReader(b), tag); err != nil {
		return fmt.Errorf("ocitest: push index: %w", err)
	}
	return nil
}

// PushIndex is [PushIndexE] with a background context, failing t on
// error.
func PushIndex(t TB, host, repoTag string, entries map[Platform]ocispec.Descriptor) {
	t.Helper()
	if err := PushIndexE(context.Background(), host, repoTag, entries); err != nil {
		t.Fatal(err)
	}
}

func repository(host, name string) (*remote.Repository, error) {
	repo, err := remote.NewRepository(host + "/" + name)
	if err != nil {
		return nil, fmt.Errorf("ocitest: repository %s/%s: %w", host, name, err)
	}
	repo.PlainHTTP = true
	return repo, nil
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
