// Package fileset selects the files of a job's tree that an artifact or a
// cache takes (gitlab-runner's paths / exclude / untracked rules), and
// extracts archives back into a tree safely.
//
// Selection rules (gitlab-runner helpers/file_archiver.go, restated):
//   - paths are slash-separated glob patterns relative to the build dir;
//     `*`, `?` and `[…]` match within one path segment, a segment that is
//     exactly `**` matches zero or more segments;
//   - a matched directory brings everything below it;
//   - an entry is dropped when it, or any directory above it, matches an
//     exclude pattern;
//   - untracked adds `git ls-files --others` (ignored files included, as
//     gitlab-runner does);
//   - matches outside the build dir are dropped with a warning;
//   - symbolic links are taken as links, never followed.
//
// Entries come back sorted by path with their parents listed before them, so
// archives built from them are deterministic.
package fileset

import (
	"errors"
	"path"
	"slices"
	"strings"
)

// ErrBadPattern is returned for a malformed glob pattern.
var ErrBadPattern = errors.New("fileset: bad pattern")

// Match reports whether the slash-separated relative path name matches
// pattern, where a `**` segment matches zero or more whole segments and other
// segments use [path.Match] syntax.
func Match(pattern, name string) (bool, error) {
	pattern = cleanPattern(pattern)
	return matchSegs(strings.Split(pattern, "/"), strings.Split(name, "/"))
}

func cleanPattern(p string) string {
	p = strings.ReplaceAll(p, "\\", "/")
	p = path.Clean("/" + p)
	return strings.TrimPrefix(p, "/")
}

func matchSegs(pat, name []string) (bool, error) {
	for len(pat) > 0 {
		if pat[0] == "**" {
			rest := pat[1:]
			for i := 0; i <= len(name); i++ {
				ok, err := matchSegs(rest, name[i:])
				if err != nil || ok {
					return ok, err
				}
			}
			return false, nil
		}
		if len(name) == 0 {
			return false, nil
		}
		ok, err := path.Match(pat[0], name[0])
		if err != nil {
			return false, ErrBadPattern
		}
		if !ok {
			return false, nil
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0, nil
}

// MatchPrefix reports whether some extension of name (name itself or a path
// below it) could match pattern; it lets a walk skip directories that can
// hold no match.
func MatchPrefix(pattern, name string) bool {
	pat := strings.Split(cleanPattern(pattern), "/")
	segs := strings.Split(name, "/")
	for i, s := range segs {
		if i >= len(pat) {
			return false
		}
		if pat[i] == "**" {
			return true
		}
		if ok, err := path.Match(pat[i], s); err != nil || !ok {
			return false
		}
	}
	return true
}

// Roots returns the paths below which specs can select anything: each
// path pattern's leading segments up to the first one with a wildcard,
// without repeats and without a root below another. all is true when some
// spec can select anywhere in the tree: a pattern naming the whole tree or
// starting with a wildcard, or untracked files. A tree holding only the
// roots (and the directories above them) gives [Collect] the same entries
// and warnings for specs as the whole tree does; the microvm backend
// pulls only that much out of a guest.
func Roots(specs ...Spec) (roots []string, all bool) {
	for _, s := range specs {
		if s.Untracked {
			return nil, true
		}
		for _, p := range s.Paths {
			if outsideTree(p) {
				continue // Collect skips it with a warning
			}
			var lit []string
			for _, seg := range strings.Split(cleanPattern(p), "/") {
				if seg == "" || strings.ContainsAny(seg, "*?[") {
					break
				}
				lit = append(lit, seg)
			}
			if len(lit) == 0 {
				return nil, true
			}
			roots = append(roots, strings.Join(lit, "/"))
		}
	}
	slices.Sort(roots)
	uniq := slices.Compact(roots)
	var out []string
	for _, r := range uniq {
		if !slices.ContainsFunc(uniq, func(q string) bool { return strings.HasPrefix(r, q+"/") }) {
			out = append(out, r)
		}
	}
	return out, false
}

// OnRoots reports whether the slash-separated relative path rel belongs
// in a tree narrowed to roots: it is one of them, below one, or a
// directory above one. The microvm guest agent archives exactly these
// entries when asked for roots (vmproto's archive only).
func OnRoots(rel string, roots []string) bool {
	for _, r := range roots {
		if rel == r || strings.HasPrefix(rel, r+"/") || strings.HasPrefix(r, rel+"/") {
			return true
		}
	}
	return false
}

// outsideTree reports whether path pattern p climbs out of the tree.
func outsideTree(p string) bool {
	return strings.HasPrefix(path.Clean(strings.ReplaceAll(p, "\\", "/")), "..")
}
