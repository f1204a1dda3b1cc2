package vk

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// .ci/run runs exactly the README's test command, and its staticcheck is
// pinned to a version, never @latest, so CI's verdict does not change
// under a commit that did not change.
func TestCIScript(t *testing.T) {
	b, err := os.ReadFile(".ci/run")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?m)^(go test [^#\n]*?)\\s+#").FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md names no `go test` command")
	}
	want := string(m[1])
	if !slices.Contains(lines, want) {
		t.Errorf(".ci/run does not run the README's test command %q on a line of its own", want)
	}
	pin := regexp.MustCompile(`(?m)^staticcheck_version=(v\d+\.\d+\.\d+)$`).FindSubmatch(b)
	if pin == nil {
		t.Error(".ci/run pins no staticcheck_version=vX.Y.Z")
	}
	if strings.Contains(string(b), "@latest") {
		t.Error(".ci/run installs something @latest")
	}
	for _, step := range []string{`"$sc_bin/staticcheck" ./...`, "go vet ./...", "go test -race "} {
		found := false
		for _, l := range lines {
			if strings.HasPrefix(l, step) {
				found = true
			}
		}
		if !found {
			t.Errorf(".ci/run has no line starting %q", step)
		}
	}
}
