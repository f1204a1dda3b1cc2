package realhub

import (
	"os/exec"
	"strings"
	"testing"
)

// Only tests import realhub: it starts a hub and a node with test
// settings, which no program may ship.
func TestOnlyTestsImport(t *testing.T) {
	const self = "github.com/vk-ci/vk/internal/realhub"
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "github.com/vk-ci/vk/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		n++
		for _, imp := range f[1:] {
			if imp == self {
				t.Errorf("%s imports %s outside its tests", f[0], self)
			}
		}
	}
	if n < 20 {
		t.Fatalf("go list found only %d packages", n)
	}
}
