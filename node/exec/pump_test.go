package exec

import (
	"bytes"
	"context"
	"errors"
	"os"
	osexec "os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/clock"
)

// lockedBuf is a bytes.Buffer safe for a pump goroutine and the test.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd to count descriptors")
	}
	return len(ents)
}

func TestStartPumpedKeepsTheStreamsApart(t *testing.T) {
	var out, errb lockedBuf
	cmd := osexec.Command("sh", "-c", "echo one; echo two >&2; echo three")
	p, err := StartPumped(cmd, &out, &errb)
	if err != nil {
		t.Fatal(err)
	}
	if err := WaitOrCancel(t.Context(), cmd, func() { t.Error("cancel called without ctx ending") }); err != nil {
		t.Fatal(err)
	}
	if !p.Drain(nil, 10*time.Second) {
		t.Error("Drain timed out although the script and its pipes ended")
	}
	if got, want := out.String(), "one\nthree\n"; got != want {
		t.Errorf("stdout = %q, want %q", got, want)
	}
	if got, want := errb.String(), "two\n"; got != want {
		t.Errorf("stderr = %q, want %q", got, want)
	}
}

func TestStartPumpedFailureLeavesNothingOpen(t *testing.T) {
	before := openFDs(t)
	cmd := osexec.Command("/nonexistent/vk-no-such-binary")
	if p, err := StartPumped(cmd, &lockedBuf{}, &lockedBuf{}); err == nil || p != nil {
		t.Fatalf("StartPumped of a missing binary = %v, %v", p, err)
	}
	if after := openFDs(t); after != before {
		t.Errorf("open descriptors %d after a failed start, %d before", after, before)
	}
}

// A process that outlives the script and keeps its stdout open does not
// hold Run: Drain gives up after its wait and closes the pipes.
func TestDrainGivesUpOnHeldPipes(t *testing.T) {
	var out lockedBuf
	cmd := osexec.Command("sh", "-c", "sleep 600 & echo $!")
	p, err := StartPumped(cmd, &out, &lockedBuf{})
	if err != nil {
		t.Fatal(err)
	}
	if err := WaitOrCancel(t.Context(), cmd, func() {}); err != nil {
		t.Fatal(err)
	}
	// The orphaned sleep: reaped by init once killed.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.HasSuffix(out.String(), "\n") && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // an external process writing: polled
	}
	pid, err := strconv.Atoi(strings.TrimSpace(out.String()))
	if err != nil {
		t.Fatalf("sleep's pid %q: %v", out.String(), err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })

	fc := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	done := make(chan bool)
	go func() { done <- p.Drain(fc, 5*time.Second) }()
	deadline = time.Now().Add(10 * time.Second)
	for fc.Pending() < 1 {
		if time.Now().After(deadline) {
			t.Fatal("Drain armed no timer")
		}
		time.Sleep(time.Millisecond) // another goroutine arming a timer: polled
	}
	select {
	case <-done:
		t.Fatal("Drain returned while the pipes were held and its wait had not passed")
	default:
	}
	fc.Advance(5 * time.Second)
	if ended := <-done; ended {
		t.Error("Drain = true for pipes still held by a live process")
	}
}

func TestWaitOrCancelCancelsOnContextEnd(t *testing.T) {
	cmd := osexec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	called := false
	err := WaitOrCancel(ctx, cmd, func() {
		called = true
		_ = cmd.Process.Kill()
	})
	if !called {
		t.Error("cancel not called when ctx ended")
	}
	var ee *osexec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("WaitOrCancel = %v, want the killed sleep's exit", err)
	}
}
