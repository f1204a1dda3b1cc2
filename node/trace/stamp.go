package trace

import (
	"bytes"
	"time"
)

// StampLen is the length of an entry header: a 27-byte UTC timestamp with
// microseconds, a space, two hex digits of stream number, the stream type
// and the continuation flag.
const StampLen = 32

// stampBufSize is how much of a line without a newline a stream buffers
// before emitting it with an added newline (gitlab-runner's 8 KiB).
const stampBufSize = 8 * 1024

// stamper frames a stream's bytes into timestamped entries exactly as
// gitlab-runner's timestamper does (reference §11.1 and §16): each '\n' ends
// an entry; the tail of a write that holds a '\r' is emitted whole with an
// added '\n' and makes the next entry a '+' continuation; other tails are
// buffered (stamped at their first byte) until a newline, the 8 KiB bound or
// flush.
type stamper struct {
	next   sink
	now    func() time.Time
	header [StampLen]byte
	cached int64 // unix second of the date part in header; -1 none
	buf    []byte
}

func newStamper(next sink, now func() time.Time, stream uint8, typ StreamType) *stamper {
	s := &stamper{next: next, now: now, cached: -1, buf: make([]byte, 0, 256)}
	copy(s.header[:], "0000-00-00T00:00:00.000000Z ")
	const hex = "0123456789abcdef"
	s.header[28] = hex[stream>>4]
	s.header[29] = hex[stream&0xf]
	s.header[30] = byte(typ)
	s.header[31] = ' '
	return s
}

// stampHeader fills the header with the current time and appends it to dst;
// the continuation flag is reset after each header.
func (s *stamper) stampHeader(dst []byte) []byte {
	t := s.now().UTC()
	h := &s.header
	if sec := t.Unix(); sec != s.cached {
		y, mo, d := t.Date()
		hh, mm, ss := t.Clock()
		put := func(at, v, n int) {
			for i := at + n - 1; i >= at; i-- {
				h[i] = '0' + byte(v%10)
				v /= 10
			}
		}
		put(0, y, 4)
		put(5, int(mo), 2)
		put(8, d, 2)
		put(11, hh, 2)
		put(14, mm, 2)
		put(17, ss, 2)
		s.cached = sec
	}
	us := t.Nanosecond() / 1000
	for i := 25; i >= 20; i-- {
		h[i] = '0' + byte(us%10)
		us /= 10
	}
	dst = append(dst, h[:]...)
	h[31] = ' '
	return dst
}

func (s *stamper) cont() { s.header[31] = '+' }

func (s *stamper) write(p []byte) error {
	// Whole lines.
	if i := bytes.LastIndexByte(p, '\n'); i >= 0 {
		lines := p[:i+1]
		out := s.buf // reuse: the buffered partial line already has its header
		s.buf = nil
		first := true
		for len(lines) > 0 {
			j := bytes.IndexByte(lines, '\n')
			if !(first && len(out) > 0) {
				out = s.stampHeader(out)
			}
			first = false
			out = append(out, lines[:j+1]...)
			lines = lines[j+1:]
		}
		err := s.next.write(out)
		s.buf = out[:0]
		if err != nil {
			return err
		}
		p = p[i+1:]
	}
	if len(p) == 0 {
		return nil
	}
	if bytes.IndexByte(p, '\r') >= 0 {
		if len(s.buf) == 0 {
			s.buf = s.stampHeader(s.buf)
		}
		s.buf = append(append(s.buf, p...), '\n')
		err := s.next.write(s.buf)
		s.buf = s.buf[:0]
		s.cont()
		return err
	}
	// As upstream, the bound counts the buffered header too.
	if len(s.buf)+len(p) > stampBufSize {
		if len(s.buf) == 0 {
			s.buf = s.stampHeader(s.buf)
		}
		s.buf = append(append(s.buf, p...), '\n')
		err := s.next.write(s.buf)
		s.buf = s.buf[:0]
		s.cont()
		return err
	}
	if len(s.buf) == 0 {
		s.buf = s.stampHeader(s.buf)
	}
	s.buf = append(s.buf, p...)
	return nil
}

func (s *stamper) mask() error { return s.write(maskedBytes) }

// flush emits a buffered partial line with an added '\n', keeping its stamp.
func (s *stamper) flush() error {
	if len(s.buf) == 0 {
		return nil
	}
	s.buf = append(s.buf, '\n')
	err := s.next.write(s.buf)
	s.buf = s.buf[:0]
	return err
}
