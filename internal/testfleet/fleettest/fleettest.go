// Package fleettest is what the end-to-end test packages built on
// internal/testfleet share: starting a fleet for a test (skipping, or
// failing under CI=true, when a host binary is missing), bounding its
// waits, and checking that GitLab's traces equal the hub's stored output
// byte for byte.
//
// It exists because the fleet's tests are split over packages — go test
// gives each package 600 s, and internal/testfleet alone takes most of
// that, so the microVM tests live in internal/testfleet/vmfleet and
// internal/testfleet/vmfaults, each a few minutes of guest boots — and a
// helper in one package's _test.go cannot be imported by another. The
// fleet itself (package testfleet) stays free of the testing package: the
// demo runs it too.
package fleettest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/need"
	"github.com/vk-ci/vk/internal/testfleet"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/relay/loop"
)

// NeedBinaries skips t (fails it under CI=true) when a real component it
// runs is not installed.
func NeedBinaries(t testing.TB, bins ...string) {
	t.Helper()
	for _, b := range bins {
		if _, err := exec.LookPath(b); err != nil {
			need.Missingf(t, "%s not installed (apt-get install -y %s)", b, b)
		}
	}
}

// Readme is the repository every test pipeline checks out: one file.
var Readme = map[string]string{"README.md": "e2e\n"}

// BuildVK builds the real vk binary into t's temporary directory, for a
// node run as a child process (testfleet.NodeSpec.Binary); the Go build
// cache makes it quick after the first time.
func BuildVK(t testing.TB) string {
	t.Helper()
	gotool, err := exec.LookPath("go")
	if err != nil {
		need.Missingf(t, "the go tool is not on PATH: the test builds vk to run its node as a child process")
	}
	bin := filepath.Join(t.TempDir(), "vk")
	if out, err := exec.Command(gotool, "build", "-o", bin, "github.com/vk-ci/vk/cmd/vk").CombinedOutput(); err != nil {
		t.Fatalf("go build vk: %v\n%s", err, out)
	}
	return bin
}

// Start starts a fleet for t and closes it when t ends, skipping only
// when a component is not wired yet (testfleet.ErrNotWired) or a binary
// is missing. o.Log defaults to t's log, o.Dir to a temporary directory.
func Start(t testing.TB, o testfleet.Options) *testfleet.Fleet {
	t.Helper()
	NeedBinaries(t, "git", "bash")
	if o.Caches {
		NeedBinaries(t, testfleet.RegistryBinary)
	}
	if o.Log == nil {
		o.Log = testlog.New(t)
	}
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	f, err := testfleet.Start(ctx, o)
	if errors.Is(err, testfleet.ErrNotWired) {
		t.Skipf("component not wired yet: %v", err)
	}
	if err != nil {
		t.Fatalf("testfleet.Start: %v", err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Logf("fleet close: %v", err)
		}
	})
	return f
}

// Timeout bounds a test's waits on the fleet: a context ending after d
// or with t.
func Timeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// CheckTraces asserts that every job's GitLab trace is byte-identical to
// the output the hub stored from the node (API-39), skipping jobs GitLab
// skipped, and returns how many bytes were compared.
func CheckTraces(t testing.TB, ctx context.Context, tn *testfleet.Tenant, pl gitlabfake.Pipeline) int {
	t.Helper()
	bad, total := TraceMismatches(ctx, tn, pl)
	for _, m := range bad {
		t.Error(m.What)
	}
	return total
}

// Mismatch is a job whose GitLab trace is not the hub's output.
type Mismatch struct {
	Job  int64  // GitLab's job ID
	What string // the difference, in words
}

// TraceMismatches compares every job's GitLab trace of pl with the hub's
// output ([TraceMatches]) and lists the jobs that differ (or whose output
// the hub cannot read), and how many trace bytes it compared.
func TraceMismatches(ctx context.Context, tn *testfleet.Tenant, pl gitlabfake.Pipeline) (bad []Mismatch, total int) {
	for name, id := range pl.Jobs {
		if tn.GitLab.JobState(id) == gitlabfake.StateSkipped {
			continue
		}
		got := tn.GitLab.Trace(id)
		want, ok, err := tn.HubOutput(ctx, id)
		switch {
		case err != nil || !ok:
			bad = append(bad, Mismatch{id, fmt.Sprintf("%s/%s (#%d): hub output: ok=%v err=%v", tn.Spec.Name, name, id, ok, err)})
			continue
		case !TraceMatches(got, want):
			bad = append(bad, Mismatch{id, fmt.Sprintf("%s/%s (#%d): GitLab trace (%d bytes) differs from the hub's output (%d bytes); first difference at byte %d",
				tn.Spec.Name, name, id, len(got), len(want), FirstDiff(got, want))})
		}
		total += len(got)
	}
	return bad, total
}

// TraceMatches reports whether GitLab's trace got is the hub's output
// want, byte for byte, allowing only the relay's wait lines before it:
// while a job taken from GitLab waits for a node, the relay writes lines
// beginning [loop.WaitNoteText] at the head of its trace (relay/loop,
// waitnote.go), which are not the node's output. A trace is then those
// whole lines and the output after them.
func TraceMatches(got, want []byte) bool {
	if bytes.Equal(got, want) {
		return true
	}
	preface, ok := bytes.CutSuffix(got, want)
	if !ok || !bytes.HasSuffix(preface, []byte("\n")) {
		return false
	}
	for _, line := range bytes.SplitAfter(preface, []byte("\n")) {
		if len(line) > 0 && !bytes.Contains(line, []byte(loop.WaitNoteText)) {
			return false
		}
	}
	return true
}

// FirstDiff is the offset of the first byte where a and b differ (the
// shorter one's length when one is a prefix of the other).
func FirstDiff(a, b []byte) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// StripANSI removes the terminal colour sequences (ESC [ … final byte)
// a job's trace carries, so tests can look for plain text in it.
func StripANSI(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == 0x1b && i+1 < len(s) && s[i+1] == '[' {
			j := i + 2
			for j < len(s) && !(s[j] >= '@' && s[j] <= '~') {
				j++
			}
			i = j
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
