package deptest

import "testing"

func TestIsStdlib(t *testing.T) {
	for in, want := range map[string]bool{
		"fmt": true, "net/http": true, "github.com/vk-ci/vk/sched": false, "golang.org/x/sys/unix": false,
	} {
		if got := IsStdlib(in); got != want {
			t.Errorf("IsStdlib(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestDepsSeesItself(t *testing.T) {
	deps := Deps(t, "github.com/vk-ci/vk/internal/deptest")
	found := false
	for _, d := range deps {
		if d == "os/exec" {
			found = true
		}
	}
	if !found {
		t.Fatalf("Deps(deptest) = %v, want it to list os/exec", deps)
	}
}
