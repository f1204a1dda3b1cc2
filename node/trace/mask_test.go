package trace

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/clock"
	"pgregory.net/rapid"
)

type collect struct{ bytes.Buffer }

func (c *collect) write(p []byte) error { c.Write(p); return nil }
func (c *collect) mask() error          { c.WriteString(Masked); return nil }

// feed writes text to f split at the given cut points, then flushes.
func feed(f filter, text string, cuts []int) {
	prev := 0
	for _, c := range cuts {
		if c > prev && c < len(text) {
			_ = f.write([]byte(text[prev:c]))
			prev = c
		}
	}
	_ = f.write([]byte(text[prev:]))
	_ = f.flush()
}

// FuzzPhraseMasker checks that no masked value survives whatever the write
// splits: the streamed output equals the one-piece reference, which masks
// every byte of every occurrence (overlapping ones too).
//
// spec: TRACE-02, TRACE-09
func FuzzPhraseMasker(f *testing.F) {
	f.Add("secret", "my secret is secretsecret, sec", uint8(3), uint8(7))
	f.Add("aa", "aaaaa", uint8(1), uint8(2))
	f.Add("abab", "abababab ab", uint8(2), uint8(5))
	f.Add("x", "", uint8(0), uint8(0))
	f.Add("glpat-xyz", "token glpat-xyz\n", uint8(9), uint8(11))
	f.Fuzz(func(t *testing.T, secret, text string, a, b uint8) {
		if strings.TrimSpace(secret) != secret || secret == "" {
			return
		}
		var got collect
		m := newPhraseMasker(&got, []string{secret})
		cuts := []int{int(a) % (len(text) + 1), int(b) % (len(text) + 1)}
		if cuts[0] > cuts[1] {
			cuts[0], cuts[1] = cuts[1], cuts[0]
		}
		feed(m, text, cuts)
		want := referencePhrases(text, []string{secret})
		if got.String() != want {
			t.Fatalf("mask(%q in %q, cuts %v) = %q, want %q", secret, text, cuts, got.String(), want)
		}
	})
}

// TestMaskersSplitIndependent: for any phrases, prefixes and splits, the
// whole masking pipeline gives the same bytes as one write.
//
// spec: TRACE-02, TRACE-05
func TestMaskersSplitIndependent(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		alpha := rapid.SampledFrom([]rune("abgl-pt_?&=x \n\r"))
		word := rapid.StringOfN(alpha, 1, 6, -1)
		phrases := rapid.SliceOfN(word, 0, 3).Draw(t, "phrases")
		prefixes := rapid.SliceOfN(rapid.StringOfN(rapid.SampledFrom([]rune("abx-")), 2, 4, -1), 0, 3).Draw(t, "prefixes")
		text := rapid.StringOfN(alpha, 0, 80, -1).Draw(t, "text")
		cuts := rapid.SliceOfN(rapid.IntRange(0, len(text)), 0, 10).Draw(t, "cuts")
		run := func(cuts []int) string {
			var out bytes.Buffer
			tr := New(&out, Options{MaskPhrases: phrases, TokenPrefixes: prefixes, LimitBytes: math.MaxInt32})
			s := tr.Stream(1, Stdout)
			prev := 0
			for _, c := range cuts {
				if c > prev {
					_, _ = s.Write([]byte(text[prev:c]))
					prev = c
				}
			}
			_, _ = s.Write([]byte(text[prev:]))
			_ = s.Close()
			return out.String()
		}
		whole := run(nil)
		if got := run(cuts); got != whole {
			t.Fatalf("split output %q != whole output %q", got, whole)
		}
		for _, p := range UniquePhrases(phrases) {
			if !strings.Contains(Masked, p) && strings.Contains(whole, p) && !strings.Contains(text, p) {
				t.Fatalf("masking created %q", p)
			}
		}
	})
}

// BenchmarkMaskStamp measures the whole per-stream pipeline (three masked
// values, the default token prefixes, URL parameters, timestamps) on
// typical 80-byte log lines written 32 KiB at a time.
func BenchmarkMaskStamp(b *testing.B) {
	var sb strings.Builder
	for i := 0; sb.Len() < 32<<10; i++ {
		fmt.Fprintf(&sb, "step %05d: compiling package github.com/example/project/internal/mod%03d ok\n", i, i%1000)
	}
	chunk := []byte(sb.String())
	tr := New(io.Discard, Options{
		Clock:       clock.NewFake(time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)),
		Timestamps:  true,
		LimitBytes:  math.MaxInt64,
		MaskPhrases: []string{"s3cr3t-value-1", "another-secret-token", "p@ssw0rd!"},
	})
	s := tr.Stream(StreamWork, Stdout)
	b.SetBytes(int64(len(chunk)))
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.Write(chunk); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzStream feeds arbitrary job output through a whole stream (sanitiser,
// maskers, stamper, limit) at arbitrary write splits: it must not panic,
// and a masked value (letters only, so no stamp or marker can spell it)
// must never reach the trace.
//
// spec: TRACE-01, TRACE-02, TRACE-09
func FuzzStream(f *testing.F) {
	f.Add([]byte("hello secret world\n"), "secret", uint16(3), uint16(9), true)
	f.Add([]byte("a\rb\r\nsec\xffret\nglpat-abc ?private_token=x\n"), "secret", uint16(1), uint16(14), false)
	f.Add([]byte("no newline sec"), "secrets", uint16(12), uint16(13), true)
	f.Fuzz(func(t *testing.T, data []byte, secret string, a, b uint16, ts bool) {
		if len(secret) < 4 || strings.Contains(Masked, secret) {
			return
		}
		for _, c := range []byte(secret) {
			if c < 'a' || c > 'z' {
				return
			}
		}
		var out bytes.Buffer
		tr := New(&out, Options{
			Clock:       clock.NewFake(time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)),
			Timestamps:  ts,
			MaskPhrases: []string{secret},
			LimitBytes:  1 << 16,
		})
		s := tr.Stream(StreamWork, Stderr)
		i, j := min(int(a), len(data)), min(int(b), len(data))
		if i > j {
			i, j = j, i
		}
		for _, part := range [][]byte{data[:i], data[i:j], data[j:]} {
			if _, err := s.Write(part); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(out.Bytes(), []byte(secret)) {
			t.Fatalf("secret %q in trace %q (input %q)", secret, out.Bytes(), data)
		}
		if int64(out.Len()) != tr.Len() {
			t.Fatalf("Len() = %d, wrote %d", tr.Len(), out.Len())
		}
	})
}

var headerRe = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z 01[OE][ +]`)

// TestStamperFraming: whatever the writes, every entry starts with a valid
// header and ends with '\n', and stripping the headers and newlines gives
// back the input without its newlines (the stamper adds or drops nothing
// else).
//
// spec: TRACE-01, TRACE-04
func TestStamperFraming(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		writes := rapid.SliceOfN(rapid.StringOfN(rapid.SampledFrom([]rune("ab\r\n")), 0, 12000, -1), 0, 6).Draw(t, "writes")
		var out bytes.Buffer
		tr := New(&out, Options{Clock: clock.NewFake(time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)), Timestamps: true, LimitBytes: math.MaxInt32})
		s := tr.Stream(StreamWork, Stdout)
		var in strings.Builder
		for _, w := range writes {
			_, _ = s.Write([]byte(w))
			in.WriteString(w)
		}
		_ = s.Close()
		var payload strings.Builder
		for _, e := range strings.SplitAfter(out.String(), "\n") {
			if e == "" {
				continue
			}
			if !headerRe.MatchString(e) || !strings.HasSuffix(e, "\n") {
				t.Fatalf("bad entry %q", e)
			}
			payload.WriteString(e[StampLen:])
		}
		strip := func(s string) string { return strings.ReplaceAll(s, "\n", "") }
		if strip(payload.String()) != strip(in.String()) {
			t.Fatalf("payload differs from input")
		}
	})
}
