package exec

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestChownTreeChangesLinksNotTargets(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files away")
	}
	const uid, gid = 54321, 54322
	root := filepath.Join(t.TempDir(), "tree")
	outside := filepath.Join(t.TempDir(), "outside")
	for _, d := range []string{root, filepath.Join(root, "sub")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(root, "sub", "file"), outside} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(root, "link")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	if err := ChownTree(root, uid, gid); err != nil {
		t.Fatal(err)
	}
	owner := func(p string) (uint32, uint32) {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		return st.Uid, st.Gid
	}
	for _, p := range []string{root, filepath.Join(root, "sub"), filepath.Join(root, "sub", "file"), link} {
		if u, g := owner(p); u != uid || g != gid {
			t.Errorf("%s owned by %d:%d, want %d:%d", p, u, g, uid, gid)
		}
	}
	if u, _ := owner(outside); u == uid {
		t.Error("ChownTree followed a symlink out of the tree")
	}
	if err := ChownTree(filepath.Join(root, "missing"), uid, gid); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ChownTree of a missing tree = %v, want ErrNotExist", err)
	}
}
