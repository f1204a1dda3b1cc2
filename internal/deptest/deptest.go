// Package deptest checks a package's dependency fence: which packages it
// may, and may not, import transitively. It asks `go list -deps`, so the
// answer is the compiler's, not a guess from source text.
package deptest

import (
	"os/exec"
	"strings"
	"testing"
)

// Deps returns every package pkg depends on (transitively, itself
// included), as `go list -deps` prints them, excluding test files.
func Deps(t testing.TB, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", pkg).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, ee.Stderr)
		}
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

// Packages returns the packages a `go list` pattern matches (such as
// "example.com/m/relay/..."), test-only packages included.
func Packages(t testing.TB, pattern string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", pattern).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list %s: %v\n%s", pattern, err, ee.Stderr)
		}
		t.Fatalf("go list %s: %v", pattern, err)
	}
	return strings.Fields(string(out))
}

// IsStdlib reports whether an import path belongs to the standard library
// (no dot in its first element).
func IsStdlib(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

// StdlibOnly fails t when pkg depends on anything outside the standard
// library other than itself and the packages under allowPrefixes.
func StdlibOnly(t testing.TB, pkg string, allowPrefixes ...string) {
	t.Helper()
	for _, d := range Deps(t, pkg) {
		if IsStdlib(d) || d == pkg || hasAnyPrefix(d, allowPrefixes) {
			continue
		}
		t.Errorf("%s imports %s, which is not in the standard library", pkg, d)
	}
}

// Forbid fails t when pkg depends on any of the listed packages (exact
// import paths) or any package under the listed prefixes ending in "/".
func Forbid(t testing.TB, pkg string, forbidden ...string) {
	t.Helper()
	for _, d := range Deps(t, pkg) {
		for _, f := range forbidden {
			if d == f || (strings.HasSuffix(f, "/") && strings.HasPrefix(d, f)) {
				t.Errorf("%s depends on %s, which it must not", pkg, d)
			}
		}
	}
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
