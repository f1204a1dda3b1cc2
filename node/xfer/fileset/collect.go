package fileset

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// Entry is one selected file system object.
type Entry struct {
	// Path is the slash-separated path relative to the root, never empty,
	// never starting with "/" or containing "..".
	Path string
	// Mode is the Lstat mode: a regular file, a directory or a symlink.
	Mode fs.FileMode
	// Size is the byte size of a regular file, 0 otherwise.
	Size int64
	// Link is the target of a symlink, "" otherwise.
	Link string
}

// Spec says what to select. The zero value selects nothing.
type Spec struct {
	// Paths are glob patterns relative to the root ("**" allowed). "." or
	// "" selects the whole root.
	Paths []string
	// Exclude are glob patterns of entries to drop (with what lies below).
	Exclude []string
	// Untracked adds the files `git ls-files --others` lists in the root.
	Untracked bool
}

// Collect walks root and returns the entries spec selects, sorted by path,
// each directory before its contents, plus warnings worth a trace line
// (patterns that matched nothing, paths outside root). Errors reading the
// tree are returned as is; a failing `git ls-files` is wrapped.
func Collect(ctx context.Context, root string, spec Spec) ([]Entry, []string, error) {
	pats, all, warnings, err := compilePatterns(spec)
	if err != nil {
		return nil, nil, err
	}
	c := &collector{root: root, spec: spec, pats: pats, all: all, selected: map[string]bool{}, matched: make([]bool, len(pats))}
	if spec.Untracked {
		if c.untracked, err = gitUntracked(ctx, root); err != nil {
			return nil, nil, err
		}
	}
	if err := filepath.WalkDir(root, c.visit); err != nil {
		return nil, nil, err
	}
	for i, ok := range c.matched {
		if !ok {
			warnings = append(warnings, fmt.Sprintf("%s: no matching files. Ensure that the artifact path is relative to the working directory", pats[i]))
		}
	}
	return withParents(c.out), warnings, nil
}

// compilePatterns checks spec's patterns and returns the clean path
// patterns, whether one selects the whole root, and warnings for paths
// outside the root.
func compilePatterns(spec Spec) (pats []string, all bool, warnings []string, err error) {
	for _, p := range spec.Paths {
		c := cleanPattern(p)
		if outsideTree(p) {
			warnings = append(warnings, fmt.Sprintf("%s: not a subpath of the project directory, skipped", p))
			continue
		}
		if c == "" {
			all = true
			continue
		}
		if _, err := Match(c, "x"); err != nil {
			return nil, false, nil, fmt.Errorf("%w: %q", ErrBadPattern, p)
		}
		pats = append(pats, c)
	}
	for _, p := range spec.Exclude {
		if _, err := Match(p, "x"); err != nil {
			return nil, false, nil, fmt.Errorf("%w: exclude %q", ErrBadPattern, p)
		}
	}
	return pats, all, warnings, nil
}

// collector is Collect's walk.
type collector struct {
	root      string
	spec      Spec
	pats      []string
	all       bool            // a pattern selects the whole root
	untracked map[string]bool // git's untracked files; nil unless asked
	selected  map[string]bool // rel path → taken (dirs expand below)
	matched   []bool          // per pattern: it matched something
	out       []Entry
}

func (c *collector) visit(p string, d fs.DirEntry, err error) error {
	if err != nil {
		return err
	}
	rel, _ := filepath.Rel(c.root, p)
	if rel == "." {
		return nil
	}
	rel = filepath.ToSlash(rel)
	if excluded(rel, c.spec.Exclude) {
		if d.IsDir() {
			return filepath.SkipDir
		}
		return nil
	}
	take := c.all || c.selected[path.Dir(rel)] || c.untracked[rel]
	for i, pat := range c.pats {
		if ok, _ := Match(pat, rel); ok {
			take, c.matched[i] = true, true
		}
	}
	if d.IsDir() && !take && !c.all && c.untracked == nil && !c.reaches(rel) {
		return filepath.SkipDir // no pattern can reach below
	}
	if !take {
		return nil
	}
	c.selected[rel] = true
	info, err := d.Info()
	if err != nil {
		return err
	}
	e := Entry{Path: rel, Mode: info.Mode()}
	switch {
	case info.Mode().IsRegular():
		e.Size = info.Size()
	case info.Mode()&fs.ModeSymlink != 0:
		if e.Link, err = os.Readlink(p); err != nil {
			return err
		}
	case info.IsDir():
	default:
		return nil // sockets, devices, fifos are never archived
	}
	c.out = append(c.out, e)
	return nil
}

// reaches reports whether a pattern may match below directory rel.
func (c *collector) reaches(rel string) bool {
	for _, pat := range c.pats {
		if MatchPrefix(pat, rel) {
			return true
		}
	}
	return false
}

// withParents adds the directories above selected entries that were not
// selected themselves (so an archive recreates them) and sorts.
func withParents(in []Entry) []Entry {
	have := make(map[string]bool, len(in))
	for _, e := range in {
		have[e.Path] = true
	}
	out := in
	for _, e := range in {
		for d := path.Dir(e.Path); d != "." && !have[d]; d = path.Dir(d) {
			have[d] = true
			out = append(out, Entry{Path: d, Mode: fs.ModeDir | 0o755})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

func excluded(rel string, patterns []string) bool {
	for _, p := range patterns {
		for r := rel; r != "."; r = path.Dir(r) {
			if ok, _ := Match(p, r); ok {
				return true
			}
		}
	}
	return false
}

// ErrGit is returned (wrapped) when `git ls-files` fails.
var ErrGit = errors.New("fileset: git ls-files failed")

func gitUntracked(ctx context.Context, root string) (map[string]bool, error) {
	cmd := exec.CommandContext(ctx, "git", "ls-files", "--others", "-z")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%w: %v: %s", ErrGit, err, bytes.TrimSpace(stderr.Bytes()))
	}
	m := map[string]bool{}
	for _, f := range bytes.Split(b, []byte{0}) {
		if len(f) > 0 {
			m[strings.TrimSuffix(string(f), "/")] = true
		}
	}
	return m, nil
}
