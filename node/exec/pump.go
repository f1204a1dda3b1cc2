package exec

import (
	"io"
	"os"
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
