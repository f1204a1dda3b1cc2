package imagestore

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/vk-ci/vk/internal/ocitest"
)

func apply(t testing.TB, root string, layer []byte) error {
	t.Helper()
	return extractTar(root, plain(layer))
}

// plain undoes ocitest.Layer's gzip; other bytes pass as they are.
func plain(layer []byte) io.Reader {
	if zr, err := gzip.NewReader(bytes.NewReader(layer)); err == nil {
		return zr
	}
	return bytes.NewReader(layer)
}

// Entries are confined to the rootfs: "..", absolute names, and symlinks
// (absolute or relative) already in the rootfs cannot lead a write
// outside it; an absolute symlink resolves inside the rootfs, as in a
// chroot.
func TestApplyLayerConfined(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "root")
	outside := filepath.Join(base, "outside")
	for _, d := range []string{root, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	l1 := ocitest.Layer(t, []ocitest.File{
		{Name: "abs", Typ: tar.TypeSymlink, Link: outside},
		{Name: "rel", Typ: tar.TypeSymlink, Link: "../../outside"},
		{Name: "usr/lib/", Typ: tar.TypeDir},
		{Name: "lib", Typ: tar.TypeSymlink, Link: "usr/lib"},
		{Name: "run", Typ: tar.TypeSymlink, Link: "/usr/lib"},
	})
	if err := apply(t, root, l1); err != nil {
		t.Fatal(err)
	}
	l2 := ocitest.Layer(t, []ocitest.File{
		{Name: "../../outside/dotdot", Body: "x"},
		{Name: "/outside/absname", Body: "x"},
		{Name: "abs/through-abs", Body: "x"},
		{Name: "rel/through-rel", Body: "x"},
		{Name: "lib/libfoo.so", Body: "lib"},
		{Name: "run/viaabs", Body: "abs"},
		{Name: "hard", Typ: tar.TypeLink, Link: "../../etc/passwd"},
	})
	err := apply(t, root, l2)
	ents, _ := os.ReadDir(outside)
	if len(ents) != 0 {
		t.Fatalf("wrote outside the rootfs: %v (apply err %v)", ents, err)
	}
	if err == nil {
		t.Fatal("hard link to a missing in-root target was accepted")
	}
	for _, p := range []string{"usr/lib/libfoo.so", "usr/lib/viaabs"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}

// A later layer replaces files, directories by files and files by
// directories, and keeps modes.
func TestApplyLayerReplaces(t *testing.T) {
	root := t.TempDir()
	if err := apply(t, root, ocitest.Layer(t, []ocitest.File{
		{Name: "a", Body: "old"}, {Name: "d/", Typ: tar.TypeDir}, {Name: "d/x", Body: "x"}, {Name: "f", Body: "file"},
	})); err != nil {
		t.Fatal(err)
	}
	if err := apply(t, root, ocitest.Layer(t, []ocitest.File{
		{Name: "a", Body: "new", Mode: 0o4755}, {Name: "d", Body: "now a file"}, {Name: "f/", Typ: tar.TypeDir}, {Name: "f/in", Body: "in"},
	})); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(root, "a"))
	fi, _ := os.Stat(filepath.Join(root, "a"))
	if string(b) != "new" || fi.Mode()&os.ModeSetuid == 0 || fi.Mode().Perm() != 0o755 {
		t.Fatalf("a = %q mode %v", b, fi.Mode())
	}
	if b, _ := os.ReadFile(filepath.Join(root, "d")); string(b) != "now a file" {
		t.Fatalf("d = %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "f/in")); string(b) != "in" {
		t.Fatalf("f/in = %q", b)
	}
}

// Whatever symlinks a rootfs holds, secureJoin stays inside it.
func TestSecureJoinProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		base, err := os.MkdirTemp("", "sj-")
		if err != nil {
			rt.Fatal(err)
		}
		defer os.RemoveAll(base)
		root := filepath.Join(base, "root")
		_ = os.Mkdir(root, 0o755)
		comp := rapid.SampledFrom([]string{"a", "b", "..", ".", "", "/"})
		gen := rapid.SliceOfN(comp, 1, 6)
		for i, n := 0, rapid.IntRange(0, 6).Draw(rt, "links"); i < n; i++ {
			name := rapid.SampledFrom([]string{"a", "b", "a/b", "b/a"}).Draw(rt, "at")
			target := strings.Join(gen.Draw(rt, "target"), "/")
			p := filepath.Join(root, name)
			_ = os.MkdirAll(filepath.Dir(p), 0o755)
			_ = os.Symlink(target, p)
		}
		rel := strings.Join(gen.Draw(rt, "rel"), "/")
		got, err := secureJoin(root, rel)
		if err != nil {
			return // loops are refused
		}
		if got != root && !strings.HasPrefix(got, root+"/") {
			rt.Fatalf("secureJoin(%q) = %q escapes %q", rel, got, root)
		}
	})
}

// extractTar never writes outside its rootfs, whatever the tar bytes.
func FuzzApplyLayer(f *testing.F) {
	f.Add(ocitest.Layer(f, []ocitest.File{{Name: "a", Body: "x"}, {Name: "l", Typ: tar.TypeSymlink, Link: "/"}, {Name: "l/b", Body: "y"}}))
	f.Add(ocitest.Layer(f, []ocitest.File{{Name: "../x", Body: "x"}, {Name: "d/.wh..wh..opq"}, {Name: ".wh.a"}}))
	f.Add(ocitest.Layer(f, []ocitest.File{{Name: "h", Typ: tar.TypeLink, Link: "../../x"}, {Name: "s", Typ: tar.TypeSymlink, Link: "../../.."}, {Name: "s/z", Body: "z"}}))
	f.Add([]byte("not a tar"))
	f.Fuzz(func(t *testing.T, layer []byte) {
		base := t.TempDir()
		root := filepath.Join(base, "root")
		if err := os.Mkdir(root, 0o755); err != nil {
			t.Fatal(err)
		}
		_ = extractTar(root, plain(layer))
		ents, err := os.ReadDir(base)
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) != 1 || ents[0].Name() != "root" {
			t.Fatalf("layer wrote outside its rootfs: %v", ents)
		}
	})
}
