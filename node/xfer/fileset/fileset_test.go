package fileset

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

// spec: XFER-02
func TestMatch(t *testing.T) {
	tests := []struct {
		pat, name string
		want      bool
	}{
		{"*.txt", "a.txt", true},
		{"*.txt", "d/a.txt", false},
		{"**/*.txt", "a.txt", true},
		{"**/*.txt", "d/e/a.txt", true},
		{"d/**", "d", true},
		{"d/**", "d/e/f", true},
		{"d/**/f", "d/f", true},
		{"d/**/f", "d/x/y/f", true},
		{"d/**/f", "d/x/y/g", false},
		{"./d/", "d", true},
		{"d\\e", "d/e", true},
		{"[ab]?", "bc", true},
		{"[", "x", false},
	}
	for _, tc := range tests {
		got, _ := Match(tc.pat, tc.name)
		if got != tc.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tc.pat, tc.name, got, tc.want)
		}
	}
	if _, err := Match("[", "x"); !errors.Is(err, ErrBadPattern) {
		t.Errorf("Match([) err = %v, want ErrBadPattern", err)
	}
}

// MatchPrefix must never prune a directory below which Match would match.
func TestMatchPrefixSound(t *testing.T) {
	seg := rapid.SampledFrom([]string{"a", "b", "ab", "*", "?", "**", "a*"})
	rapid.Check(t, func(t *rapid.T) {
		pat := strings.Join(rapid.SliceOfN(seg, 1, 4).Draw(t, "pat"), "/")
		name := strings.Join(rapid.SliceOfN(rapid.SampledFrom([]string{"a", "b", "ab"}), 1, 5).Draw(t, "name"), "/")
		if ok, _ := Match(pat, name); !ok {
			return
		}
		parts := strings.Split(name, "/")
		for i := 1; i <= len(parts); i++ {
			if !MatchPrefix(pat, strings.Join(parts[:i], "/")) {
				t.Fatalf("MatchPrefix(%q, %q) = false but %q matches", pat, strings.Join(parts[:i], "/"), name)
			}
		}
	})
}

func tree(t *testing.T, files ...string) string {
	dir := t.TempDir()
	for _, f := range files {
		p := filepath.Join(dir, f)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if strings.HasSuffix(f, ".lnk") {
			os.Symlink("target", p)
			continue
		}
		os.WriteFile(p, []byte(f), 0o644)
	}
	return dir
}

func paths(es []Entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Path)
	}
	return out
}

// spec: XFER-02
func TestCollect(t *testing.T) {
	dir := tree(t, "a/x.go", "a/b/y.go", "a/b/z.txt", "c/w.lnk", "top.txt", "a/tmp/t.go")
	tests := []struct {
		name string
		spec Spec
		want []string
		warn int
	}{
		{"dir brings contents", Spec{Paths: []string{"a/b"}}, []string{"a", "a/b", "a/b/y.go", "a/b/z.txt"}, 0},
		{"glob", Spec{Paths: []string{"**/*.go"}, Exclude: []string{"a/tmp"}}, []string{"a", "a/b", "a/b/y.go", "a/x.go"}, 0},
		{"symlink not followed", Spec{Paths: []string{"c"}}, []string{"c", "c/w.lnk"}, 0},
		{"no match warns", Spec{Paths: []string{"nope"}}, nil, 1},
		{"outside root refused", Spec{Paths: []string{"../etc"}}, nil, 1},
		{"everything minus excludes", Spec{Paths: []string{"."}, Exclude: []string{"**/*.go", "c"}}, []string{"a", "a/b", "a/b/z.txt", "a/tmp", "top.txt"}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			es, warns, err := Collect(context.Background(), dir, tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, paths(es)); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
			if len(warns) != tc.warn {
				t.Errorf("warnings = %q, want %d", warns, tc.warn)
			}
		})
	}
}

// spec: XFER-02
func TestCollectUntracked(t *testing.T) {
	dir := tree(t, "tracked.go", "new/file.txt", "ignored.log")
	os.WriteFile(filepath.Join(dir, ".gitignore"), []byte("*.log\n"), 0o644)
	for _, args := range [][]string{{"init", "-q"}, {"add", "tracked.go", ".gitignore"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	es, _, err := Collect(context.Background(), dir, Spec{Untracked: true})
	if err != nil {
		t.Fatal(err)
	}
	// git ls-files --others without --exclude-standard: ignored files too,
	// as gitlab-runner.
	if d := cmp.Diff([]string{"ignored.log", "new", "new/file.txt"}, paths(es)); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if _, _, err := Collect(context.Background(), t.TempDir(), Spec{Untracked: true}); !errors.Is(err, ErrGit) {
		t.Errorf("untracked outside a repo: %v, want ErrGit", err)
	}
}

// spec: XFER-25
func TestCapWriter(t *testing.T) {
	var sb strings.Builder
	w := &CapWriter{W: &sb, N: 5}
	if _, err := w.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("def")); !errors.Is(err, ErrTooLarge) {
		t.Errorf("over cap: %v, want ErrTooLarge", err)
	}
	if sb.String() != "abc" {
		t.Errorf("wrote %q", sb.String())
	}
}

// FuzzMatch checks patterns from job specs never panic and that a pattern
// always matches the literal name it is (when free of metacharacters).
func FuzzMatch(f *testing.F) {
	f.Add("a/**/b", "a/x/b")
	f.Add("[", "x")
	f.Add("**", "")
	f.Fuzz(func(t *testing.T, pat, name string) {
		Match(pat, name)
		MatchPrefix(pat, name)
		if name != "" && !strings.ContainsAny(name, "*?[\\") && cleanPattern(name) == name {
			if ok, err := Match(name, name); err == nil && !ok {
				t.Fatalf("Match(%q, itself) = false", name)
			}
		}
	})
}

func TestRoots(t *testing.T) {
	tests := []struct {
		name  string
		specs []Spec
		roots []string
		all   bool
	}{
		{"nothing", nil, nil, false},
		{"literal paths", []Spec{{Paths: []string{"build/out.bin", "dist/"}}}, []string{"build/out.bin", "dist"}, false},
		{"up to the wildcard", []Spec{{Paths: []string{"build/**/*.o", "logs/*.log", "a/b?/c"}}}, []string{"a", "build", "logs"}, false},
		{"one below another", []Spec{{Paths: []string{"a/b/c"}}, {Paths: []string{"a", "a-b/x", "a/b"}}}, []string{"a", "a-b/x"}, false},
		{"cleaned", []Spec{{Paths: []string{"./x/../y/", "\\z\\w"}}}, []string{"y", "z/w"}, false},
		{"outside the tree", []Spec{{Paths: []string{"../etc", "keep"}}}, []string{"keep"}, false},
		{"wildcard first", []Spec{{Paths: []string{"keep"}}, {Paths: []string{"*.log"}}}, nil, true},
		{"the whole tree", []Spec{{Paths: []string{"."}}}, nil, true},
		{"untracked", []Spec{{Paths: []string{"keep"}}, {Untracked: true}}, nil, true},
		{"excludes do not widen", []Spec{{Paths: []string{"a"}, Exclude: []string{"**"}}}, []string{"a"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			roots, all := Roots(tc.specs...)
			if d := cmp.Diff(tc.roots, roots); d != "" || all != tc.all {
				t.Errorf("Roots = %q, %v; want %q, %v", roots, all, tc.roots, tc.all)
			}
		})
	}
}

// Collect on a tree narrowed to Roots selects what it selects on the
// whole tree, with the same warnings.
func TestRootsSelectAsTheWholeTree(t *testing.T) {
	seg := rapid.SampledFrom([]string{"a", "b", "ab", "c.go"})
	pseg := rapid.SampledFrom([]string{"a", "b", "ab", "c.go", "*", "*.go", "a?", "**"})
	rapid.Check(t, func(rt *rapid.T) {
		files := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) string {
			return strings.Join(rapid.SliceOfN(seg, 1, 4).Draw(t, "f"), "/")
		}), 1, 8).Draw(rt, "files")
		whole, narrow := t.TempDir(), t.TempDir()
		for _, f := range files {
			// A file may not sit where another needs a directory.
			if os.MkdirAll(filepath.Join(whole, filepath.Dir(f)), 0o755) != nil || os.WriteFile(filepath.Join(whole, f), []byte(f), 0o644) != nil {
				continue
			}
		}
		var specs []Spec
		for range rapid.IntRange(1, 3).Draw(rt, "specs") {
			pats := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) string {
				return strings.Join(rapid.SliceOfN(pseg, 1, 3).Draw(t, "p"), "/")
			}), 1, 3).Draw(rt, "paths")
			specs = append(specs, Spec{Paths: pats})
		}
		roots, all := Roots(specs...)
		if all {
			return
		}
		filepath.WalkDir(whole, func(p string, d os.DirEntry, err error) error {
			rel, _ := filepath.Rel(whole, p)
			if err != nil || rel == "." || !OnRoots(filepath.ToSlash(rel), roots) {
				return err
			}
			if d.IsDir() {
				return os.MkdirAll(filepath.Join(narrow, rel), 0o755)
			}
			b, _ := os.ReadFile(p)
			return os.WriteFile(filepath.Join(narrow, rel), b, 0o644)
		})
		for _, s := range specs {
			wantE, wantW, err1 := Collect(context.Background(), whole, s)
			gotE, gotW, err2 := Collect(context.Background(), narrow, s)
			if err1 != nil || err2 != nil {
				rt.Fatalf("Collect: %v, %v", err1, err2)
			}
			if d := cmp.Diff(paths(wantE), paths(gotE)); d != "" {
				rt.Fatalf("spec %q, roots %q: entries (-whole +narrowed):\n%s", s.Paths, roots, d)
			}
			if d := cmp.Diff(wantW, gotW); d != "" {
				rt.Fatalf("spec %q, roots %q: warnings (-whole +narrowed):\n%s", s.Paths, roots, d)
			}
		}
	})
}
