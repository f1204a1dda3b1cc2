package trace

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/vk-ci/vk/internal/clock"
)

// DefaultLimitBytes is the trace limit when [Options.LimitBytes] is zero:
// gitlab-runner's default output_limit of 4 MiB (TRACE-08).
const DefaultLimitBytes = 4 << 20

// StreamType tells stdout from stderr in an entry header.
type StreamType byte

// Stream types.
const (
	Stdout StreamType = 'O'
	Stderr StreamType = 'E'
)

// Stream numbers, as gitlab-runner numbers them (TRACE-01).
const (
	StreamExecutor uint8 = 0x00 // the node's own lines (runner level)
	StreamWork     uint8 = 0x01 // the job's shell
)

// ErrClosed is returned by writes to a closed [Trace] or [Stream].
var ErrClosed = errors.New("trace: closed")

// LimitNotice returns the exact text gitlab-runner appends when a job's log
// passes limit bytes.
func LimitNotice(limit int64) string {
	return "\n" + ansiBoldYel + "Job's log exceeded limit of " + strconv.FormatInt(limit, 10) +
		" bytes.\nJob execution will continue but no more output will be collected." + ansiReset + "\n"
}

// Options configure a [Trace]. The zero value is a trace without timestamps,
// masking beyond the default token prefixes, or sections, limited to
// [DefaultLimitBytes].
type Options struct {
	// Clock stamps entries and section markers; nil means real time.
	Clock clock.Clock
	// Timestamps frames entries with gitlab-runner's 32-byte headers
	// (FF_TIMESTAMPS; callers default it to true, TRACE-03).
	Timestamps bool
	// Sections writes section_start/section_end markers
	// (features.trace_sections); false drops them.
	Sections bool
	// LimitBytes caps the trace; 0 means [DefaultLimitBytes].
	LimitBytes int64
	// MaskPhrases are the values of masked variables.
	MaskPhrases []string
	// TokenPrefixes are the job's features.token_mask_prefixes; the
	// [DefaultTokenPrefixes] are always added.
	TokenPrefixes []string
	// GlpatOnly keeps, of the default token prefixes, only glpat- (the
	// job's FF_MASK_ALL_DEFAULT_TOKENS=false); the job's TokenPrefixes
	// still apply.
	GlpatOnly bool
}

// Trace is one job's output as GitLab will store it (NODE-10): every stream
// masked, then stamped, then cut at the limit, written in order to one
// io.Writer. Its methods are safe for concurrent use; each [Stream] is fed
// by one writer at a time.
type Trace struct {
	opts     Options
	clk      clock.Clock
	prefixes []string

	rmu    sync.Mutex // guards runner
	runner *Stream

	mu        sync.Mutex // guards the fields below and writes to out
	out       io.Writer
	n         int64 // bytes written to out: the offset
	limit     int64
	truncated bool
	closed    bool
	err       error // first error from out
}

// New returns a trace writing to out.
func New(out io.Writer, o Options) *Trace {
	t := &Trace{opts: o, clk: clock.Or(o.Clock), out: out, limit: o.LimitBytes}
	if t.limit <= 0 {
		t.limit = DefaultLimitBytes
	}
	defaults := DefaultTokenPrefixes
	if o.GlpatOnly {
		defaults = GlpatOnlyTokenPrefixes
	}
	t.prefixes = effectiveTokenPrefixes(o.TokenPrefixes, defaults)
	t.runner = t.Stream(StreamExecutor, Stdout)
	return t
}

// Len returns the number of bytes written so far: the offset the next byte
// of the trace will have.
func (t *Trace) Len() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n
}

// Truncated reports whether the limit was reached (the notice was written).
func (t *Trace) Truncated() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.truncated
}

// Err returns the first error the underlying writer returned, if any.
func (t *Trace) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// write is the end of every stream's pipeline: it enforces the limit.
func (t *Trace) write(p []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	if t.truncated || t.err != nil || len(p) == 0 {
		return nil // discarded; the job goes on
	}
	if room := t.limit - t.n; int64(len(p)) > room {
		cut := int(room)
		// Back off so no UTF-8 character is split.
		for cut > 0 && cut < len(p) && !utf8.RuneStart(p[cut]) {
			cut--
		}
		t.truncated = true
		t.emitLocked(p[:cut])
		t.emitLocked([]byte(LimitNotice(t.limit)))
		return nil
	}
	t.emitLocked(p)
	return nil
}

func (t *Trace) mask() error { return t.write(maskedBytes) }

func (t *Trace) emitLocked(p []byte) {
	if t.err != nil || len(p) == 0 {
		return
	}
	n, err := t.out.Write(p)
	t.n += int64(n)
	if err != nil {
		t.err = fmt.Errorf("trace: write: %w", err)
	}
}

// Stream returns a new writer for one stream of the job: its own UTF-8
// sanitiser, maskers and line framing. Close it when the producer is done
// (a stage's process ended) to flush a partial line.
func (t *Trace) Stream(number uint8, typ StreamType) *Stream {
	s := &Stream{t: t}
	var next sink = t
	if t.opts.Timestamps {
		st := newStamper(next, t.clk.Now, number, typ)
		s.filters = append(s.filters, st)
		next = st
	}
	tm := newTokenMasker(next, t.prefixes)
	um := newURLMasker(tm)
	pm := newPhraseMasker(um, t.opts.MaskPhrases)
	// Flush order: from the head of the pipeline to its end.
	s.filters = append([]filter{pm, um, tm}, s.filters...)
	s.head = pm
	return s
}

// Runner returns the stream of the node's own lines (stream 00, stdout).
func (t *Trace) Runner() *Stream {
	t.rmu.Lock()
	defer t.rmu.Unlock()
	return t.runner
}

// NewRunnerStream closes the stream of the node's own lines and starts a
// new one, as gitlab-runner writes a job's last line with a new logger:
// the new stream's first entry is never a continuation ('+') of the line
// the old one ended with, a section end marker say.
func (t *Trace) NewRunnerStream() error {
	t.rmu.Lock()
	defer t.rmu.Unlock()
	err := t.runner.Close()
	t.runner = t.Stream(StreamExecutor, Stdout)
	return err
}

// Close flushes the runner stream and refuses later writes. Streams of the
// job must be closed before.
func (t *Trace) Close() error {
	err := t.Runner().Close()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	return errors.Join(err, t.err)
}

// Stream is one stream of a [Trace]; it implements io.WriteCloser. Writes
// always report the whole input as consumed (output past the limit is
// dropped, as gitlab-runner does); an error means the trace is closed or
// its writer failed.
type Stream struct {
	t       *Trace
	mu      sync.Mutex
	head    filter
	filters []filter // head first
	utf     []byte   // held incomplete UTF-8 sequence
	scratch []byte
	closed  bool
}

// Write masks, frames and writes p.
func (s *Stream) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, ErrClosed
	}
	if err := s.head.write(s.sanitize(p)); err != nil {
		return 0, err
	}
	return len(p), s.t.Err()
}

// sanitize replaces invalid UTF-8 bytes with U+FFFD, one per byte, holding
// back an incomplete sequence at the end of p.
func (s *Stream) sanitize(p []byte) []byte {
	if len(s.utf) == 0 && utf8.Valid(p) {
		return p
	}
	in := append(append(s.scratch[:0], s.utf...), p...)
	s.utf = s.utf[:0]
	out := make([]byte, 0, len(in)+8)
	for i := 0; i < len(in); {
		c := in[i]
		if c < utf8.RuneSelf {
			out = append(out, c)
			i++
			continue
		}
		r, size := utf8.DecodeRune(in[i:])
		if r == utf8.RuneError && size <= 1 {
			if !utf8.FullRune(in[i:]) {
				s.utf = append(s.utf, in[i:]...)
				break
			}
			out = append(out, "\uFFFD"...)
			i++
			continue
		}
		out = append(out, in[i:i+size]...)
		i += size
	}
	s.scratch = in[:0]
	return out
}

// Close flushes what the stream holds (a partial line gets an added '\n')
// and closes it. Closing twice is a no-op.
func (s *Stream) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	if len(s.utf) > 0 {
		bad := make([]byte, 0, 3*len(s.utf))
		for range s.utf {
			bad = append(bad, "\uFFFD"...)
		}
		s.utf = nil
		errs = append(errs, s.head.write(bad))
	}
	for _, f := range s.filters {
		errs = append(errs, f.flush())
	}
	errs = append(errs, s.t.Err())
	return errors.Join(errs...)
}

// Flush emits what the maskers and the line framer hold without closing the
// stream. A partial line is ended with an added '\n' like on Close.
func (s *Stream) Flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, f := range s.filters {
		errs = append(errs, f.flush())
	}
	return errors.Join(errs...)
}
