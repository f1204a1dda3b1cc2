package artifacts

// Ports of gitlab-runner's helpers/archives zip tests (TRACE-09 part):
// archive a tree with files, dirs and symlinks, extract it, compare; refuse
// unsafe names; overwrite what is there.

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vk-ci/vk/node/xfer/fileset"
	"github.com/vk-ci/vk/node/xfer/internal/treetest"
)

func archiveTree(t *testing.T, dir string, paths ...string) []byte {
	t.Helper()
	es, _, err := fileset.Collect(context.Background(), dir, fileset.Spec{Paths: paths})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteZip(context.Background(), &buf, dir, es); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func extractBytes(t *testing.T, b []byte, dir string) error {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return err
	}
	_, err = extractZip(context.Background(), zr, &fileset.Extractor{Root: dir})
	return err
}

// spec: TRACE-09
func TestZipRoundTrip(t *testing.T) {
	src := t.TempDir()
	files := map[string]string{
		"a.txt":           "a",
		"dir/b.txt":       "bb",
		"dir/deep/c.bin":  string([]byte{0, 1, 2, 255}),
		"dir/rel-link":    "->b.txt",
		"abs-link":        "->/etc/hostname",
		"dangling":        "->does/not/exist",
		"dir/empty/.keep": "",
	}
	treetest.Write(t, src, files)
	os.Chmod(filepath.Join(src, "a.txt"), 0o755)
	b := archiveTree(t, src, ".")
	dst := t.TempDir()
	if err := extractBytes(t, b, dst); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(files, treetest.Read(t, dst)); d != "" {
		t.Errorf("round trip (-want +got):\n%s", d)
	}
	if fi, _ := os.Stat(filepath.Join(dst, "a.txt")); fi.Mode().Perm() != 0o755 {
		t.Errorf("a.txt mode = %v, want 0755", fi.Mode())
	}
}

// spec: TRACE-09
func TestZipExtractOverwrites(t *testing.T) {
	dst := t.TempDir()
	treetest.Write(t, dst, map[string]string{"f": "old", "l": "->f"})
	b := makeZip(t, zipEntry{"f", 0o644, "new"}, zipEntry{"l", fs.ModeSymlink | 0o777, "g"})
	if err := extractBytes(t, b, dst); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[string]string{"f": "new", "l": "->g"}, treetest.Read(t, dst)); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

// spec: TRACE-09, XFER-25
func TestZipExtractRefusesUnsafe(t *testing.T) {
	tests := []struct {
		name    string
		entries []zipEntry
	}{
		{"dotdot", []zipEntry{{"../x", 0o644, "x"}}},
		{"nested dotdot", []zipEntry{{"a/../../x", 0o644, "x"}}},
		{"absolute", []zipEntry{{"/x", 0o644, "x"}}},
		{"through symlink", []zipEntry{{"link", fs.ModeSymlink | 0o777, ".."}, {"link/x", 0o644, "x"}}},
		{"through abs symlink", []zipEntry{{"link", fs.ModeSymlink | 0o777, "/tmp"}, {"link/x", 0o644, "x"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			dst := filepath.Join(parent, "root")
			os.Mkdir(dst, 0o755)
			err := extractBytes(t, makeZip(t, tc.entries...), dst)
			if !errors.Is(err, fileset.ErrUnsafePath) {
				t.Errorf("extract = %v, want ErrUnsafePath", err)
			}
			if _, err := os.Lstat(filepath.Join(parent, "x")); err == nil {
				t.Error("wrote outside the root")
			}
		})
	}
}

// spec: XFER-25
func TestZipExtractCapped(t *testing.T) {
	b := makeZip(t, zipEntry{"a", 0o644, "0123456789"}, zipEntry{"b", 0o644, "0123456789"})
	zr, _ := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	_, err := extractZip(context.Background(), zr, &fileset.Extractor{Root: t.TempDir(), MaxBytes: 15})
	if !errors.Is(err, fileset.ErrTooLarge) {
		t.Errorf("extract = %v, want ErrTooLarge", err)
	}
}

// FuzzExtractZip feeds arbitrary bytes to the zip extractor: it may fail but
// must never write outside its root.
func FuzzExtractZip(f *testing.F) {
	f.Add(makeZip(f, zipEntry{"a/b", 0o644, "x"}))
	f.Add(makeZip(f, zipEntry{"../a", 0o644, "x"}))
	f.Add(makeZip(f, zipEntry{"l", fs.ModeSymlink | 0o777, "/"}, zipEntry{"l/etc/x", 0o644, "x"}))
	f.Add(makeZip(f, zipEntry{"d/", fs.ModeDir | 0o755, ""}, zipEntry{"d", 0o644, "x"}))
	f.Add([]byte("PK\x03\x04garbage"))
	f.Fuzz(func(t *testing.T, b []byte) {
		parent := t.TempDir()
		root := filepath.Join(parent, "root")
		os.Mkdir(root, 0o755)
		zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		extractZip(context.Background(), zr, &fileset.Extractor{Root: root, MaxBytes: 1 << 20})
		ents, _ := os.ReadDir(parent)
		if len(ents) != 1 {
			t.Fatalf("parent holds %d entries, want only root", len(ents))
		}
	})
}
