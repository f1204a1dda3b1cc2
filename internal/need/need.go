// Package need lets a test say that it needs a part of the host (a binary,
// root, a cgroup hierarchy, a browser) and skip, saying which, where that
// part is missing.
//
// On a developer's machine a missing part is a skip. Under CI (the
// environment variable CI is "true", as the CI runner sets it) it is a
// failure instead: .ci/run installs every part the tests need, so a test
// that would skip there means a missing install step, and a green run must
// not hide it. Set VK_ALLOW_SKIP=1 to get skips under CI all the same.
package need

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// Strict reports whether a missing part fails the test instead of skipping
// it: under CI, unless VK_ALLOW_SKIP is set.
func Strict() bool {
	return os.Getenv("CI") == "true" && os.Getenv("VK_ALLOW_SKIP") == ""
}

// Missingf ends the test because a part of the host is missing: a skip on
// a developer's machine, a failure under CI. The message should name what
// to install.
func Missingf(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if Strict() {
		tb.Fatalf("missing under CI, where .ci/run should have installed it: %s", msg)
		return
	}
	tb.Skip(msg)
}

// Binary ends the test unless each named program is on PATH; pkg is the
// Debian package that provides them.
func Binary(tb testing.TB, pkg string, names ...string) {
	tb.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			Missingf(tb, "%s not installed (apt-get install -y %s)", n, pkg)
		}
	}
}

// Root ends the test unless it runs as root.
func Root(tb testing.TB, why string) {
	tb.Helper()
	if os.Geteuid() != 0 {
		Missingf(tb, "needs root: %s", why)
	}
}
