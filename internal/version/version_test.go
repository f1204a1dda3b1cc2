package version

import (
	"runtime"
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	old, oldC := Version, Commit
	t.Cleanup(func() { Version, Commit = old, oldC })
	Version, Commit = "1.2.3", "abc123"
	got := String("vk-hub")
	for _, want := range []string{"vk-hub 1.2.3", "commit abc123", runtime.Version()} {
		if !strings.Contains(got, want) {
			t.Errorf("String(vk-hub) = %q, want it to contain %q", got, want)
		}
	}
}
