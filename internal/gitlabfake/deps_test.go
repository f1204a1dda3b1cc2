package gitlabfake

import (
	"os/exec"
	"strings"
	"testing"
)

// TestStdlibOnly keeps the fake free of vk packages and third-party
// modules (STYLE: internal/gitlabfake → nothing of vk).
func TestStdlibOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".", "./cmd/vk-gitlabfake").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if p != "github.com/vk-ci/vk/internal/gitlabfake" && p != "github.com/vk-ci/vk/internal/gitlabfake/cmd/vk-gitlabfake" {
			t.Errorf("gitlabfake depends on %s", p)
		}
	}
}
