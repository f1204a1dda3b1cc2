package cache

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/vk-ci/vk/node/xfer/fileset"
	"pgregory.net/rapid"
)

func layerOf(t testing.TB, dir string) []byte {
	t.Helper()
	es, _, err := fileset.Collect(context.Background(), dir, fileset.Spec{Paths: []string{"."}})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := writeLayer(context.Background(), &buf, dir, es); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// spec: XFER-09
func TestLayerDeterministic(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		files := rapid.MapOfN(rapid.StringMatching(`[a-c]{1,3}(/[a-c]{1,3}){0,2}\.f`), rapid.String(), 1, 8).Draw(rt, "files")
		a, b := t.TempDir(), t.TempDir()
		mt := time.Date(2025, 5, 6, 7, 8, 9, 0, time.UTC)
		for _, d := range []string{a, b} {
			for p, c := range files {
				full := filepath.Join(d, p)
				os.MkdirAll(filepath.Dir(full), 0o755)
				os.WriteFile(full, []byte(c), 0o644)
				os.Chtimes(full, mt, mt)
			}
			os.Symlink("a.f", filepath.Join(d, "link"))
		}
		la := layerOf(t, a)
		if !bytes.Equal(la, layerOf(t, b)) {
			rt.Fatalf("equal trees gave different layers")
		}
		// Extract and re-archive: identical bytes (the XFER-09 probe path).
		c := t.TempDir()
		if _, err := extractLayer(context.Background(), bytes.NewReader(la), &fileset.Extractor{Root: c}); err != nil {
			rt.Fatal(err)
		}
		if !bytes.Equal(la, layerOf(t, c)) {
			rt.Fatalf("restore + archive changed the layer")
		}
	})
}

func tarZstd(t testing.TB, hdrs ...*tar.Header) []byte {
	var buf bytes.Buffer
	zw, _ := zstd.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, h := range hdrs {
		if h.Typeflag == tar.TypeReg && h.Size == 0 {
			h.Size = 1
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
		}
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

// spec: XFER-25
func TestExtractLayerRefusesUnsafe(t *testing.T) {
	tests := map[string][]*tar.Header{
		"dotdot":   {{Name: "../x", Typeflag: tar.TypeReg}},
		"absolute": {{Name: "/x", Typeflag: tar.TypeReg}},
		"via link": {{Name: "l", Typeflag: tar.TypeSymlink, Linkname: ".."}, {Name: "l/x", Typeflag: tar.TypeReg}},
	}
	for name, hdrs := range tests {
		t.Run(name, func(t *testing.T) {
			parent := t.TempDir()
			root := filepath.Join(parent, "root")
			os.Mkdir(root, 0o755)
			_, err := extractLayer(context.Background(), bytes.NewReader(tarZstd(t, hdrs...)), &fileset.Extractor{Root: root})
			if !errors.Is(err, fileset.ErrUnsafePath) {
				t.Errorf("extract = %v, want ErrUnsafePath", err)
			}
			if _, err := os.Lstat(filepath.Join(parent, "x")); err == nil {
				t.Error("wrote outside the root")
			}
		})
	}
}

// FuzzExtractLayer feeds arbitrary bytes as a cache layer: extraction may
// fail but never writes outside its root.
func FuzzExtractLayer(f *testing.F) {
	f.Add(tarZstd(f, &tar.Header{Name: "a/b", Typeflag: tar.TypeReg, Mode: 0o644}))
	f.Add(tarZstd(f, &tar.Header{Name: "../a", Typeflag: tar.TypeReg}))
	f.Add(tarZstd(f, &tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/"}, &tar.Header{Name: "l/etc/x", Typeflag: tar.TypeReg}))
	f.Add(tarZstd(f, &tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755}, &tar.Header{Name: "d/h", Typeflag: tar.TypeLink, Linkname: "/etc/passwd"}))
	f.Add([]byte("\x28\xb5\x2f\xfdgarbage"))
	f.Fuzz(func(t *testing.T, b []byte) {
		parent := t.TempDir()
		root := filepath.Join(parent, "root")
		os.Mkdir(root, 0o755)
		extractLayer(context.Background(), bytes.NewReader(b), &fileset.Extractor{Root: root, MaxBytes: 1 << 20})
		if ents, _ := os.ReadDir(parent); len(ents) != 1 {
			t.Fatalf("parent holds %d entries, want only root", len(ents))
		}
	})
}
