package vmproto

import (
	"io"
	"sync"
)

// chunk is the largest raw payload a sender puts in one frame.
const chunk = 32 << 10

// wire writes whole frames to one stream; it is safe for concurrent use
// (a frame is never interleaved with another).
type wire struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
	err error // the first write error; every later send returns it
}

func (w *wire) send(f Frame) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	w.buf = AppendFrame(w.buf[:0], f)
	if _, err := w.w.Write(w.buf); err != nil {
		w.err = err
		return err
	}
	return nil
}

// streamWriter turns writes into raw frames of one kind on one stream,
// at most [chunk] bytes each.
type streamWriter struct {
	w      *wire
	kind   Kind
	stream uint32
}

func (s streamWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		c := p[:min(len(p), chunk)]
		if err := s.w.send(Frame{Kind: s.kind, Stream: s.stream, Payload: c}); err != nil {
			return n, err
		}
		n += len(c)
		p = p[len(c):]
	}
	return n, nil
}
