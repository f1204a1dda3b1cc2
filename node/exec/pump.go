package exec

import (
	"context"
	"io"
	"os"
	osexec "os/exec"
	"time"

	"github.com/vk-ci/vk/internal/clock"
)

// Pump copies a script's stdout and stderr pipes to their writers, each on
// its own goroutine so the two streams stay apart (the trace stamps them
// O and E). A write error is ignored: the script must not block on a
// broken trace; the trace reports its own failure. The returned channel is
// closed once both pipes reached EOF (or failed). Backends share it.
func Pump(stdout, stderr io.Writer, outR, errR *os.File) <-chan struct{} {
	drained := make(chan struct{})
	done := make(chan struct{}, 2)
	copyTo := func(w io.Writer, r *os.File) {
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 64<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				_, _ = w.Write(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}
	go copyTo(stdout, outR)
	go copyTo(stderr, errR)
	go func() { <-done; <-done; close(drained) }()
	return drained
}

// Pumped is a started command whose stdout and stderr are pumped to
// writers by [StartPumped]. Its methods are for the goroutine that started
// it.
type Pumped struct {
	outR, errR *os.File
	drained    <-chan struct{} // closed when both pumps returned
}

// StartPumped starts cmd with its stdout and stderr on pipes that [Pump]
// copies to stdout and stderr; cmd.Stdout and cmd.Stderr are replaced. The
// caller then waits for cmd and ends the pumps with [Pumped.Drain] or
// [Pumped.Close]. On error nothing is left open and cmd did not start.
func StartPumped(cmd *osexec.Cmd, stdout, stderr io.Writer) (*Pumped, error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	err = cmd.Start()
	// The child holds its own copies of the write ends now.
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, err
	}
	return &Pumped{outR: outR, errR: errR, drained: Pump(stdout, stderr, outR, errR)}, nil
}

// Drain waits, up to wait on clk, for both streams to reach EOF — every
// process holding the pipes has exited — then closes the pipes and waits
// for the pumps to return. It reports false when the wait ran out and
// the pipes were closed under a process still holding them.
func (p *Pumped) Drain(clk clock.Clock, wait time.Duration) bool {
	t := clock.Or(clk).NewTimer(wait)
	ended := true
	select {
	case <-p.drained:
		t.Stop()
	case <-t.C():
		ended = false
	}
	p.Close()
	return ended
}

// Close closes the pipes at once and waits for the pumps to return; for a
// command that was killed before it could run. Output not yet read is
// lost.
func (p *Pumped) Close() {
	p.outR.Close()
	p.errR.Close()
	<-p.drained
}

// WaitOrCancel waits for the started cmd to exit and returns cmd.Wait's
// error. When ctx ends first it calls cancel, which must make cmd exit
// (kill it), and waits on.
func WaitOrCancel(ctx context.Context, cmd *osexec.Cmd, cancel func()) error {
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		return err
	case <-ctx.Done():
		cancel()
		return <-waited
	}
}
