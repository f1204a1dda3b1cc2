package trace

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"pgregory.net/rapid"
)

// item is one element of the reference masker's output: a byte of text, or
// a mask (isMask).
type item struct {
	b      byte
	isMask bool
}

// referenceMask is the masking the trace must perform, written for clarity
// over one piece of text (no streaming): masked values first (every byte of
// every occurrence, overlapping ones included, one mask per occurrence of
// the greedy cover), then URL parameters, then token prefixes. Masks are
// opaque to later stages, but a value run goes on after one, as
// gitlab-runner's sanitisers let an upstream "[MASKED]" through. It returns
// the text with masks spelled [Masked].
func referenceMask(text string, phrases, prefixes []string) string {
	its := refPhrases(text, UniquePhrases(phrases))
	its = refValues(its, func(its []item, i int) int {
		if its[i].isMask || (its[i].b != '?' && its[i].b != '&') {
			return 0
		}
		for _, k := range URLParams {
			key := k + "="
			if i+1+len(key) <= len(its) && plainFold(its[i+1:i+1+len(key)], key) {
				return 1 + len(key)
			}
		}
		return 0
	}, &urlValue, true)
	eff := EffectiveTokenPrefixes(prefixes)
	its = refValues(its, func(its []item, i int) int {
		best := 0
		for _, p := range eff {
			if len(p) > best && i+len(p) <= len(its) && plainEq(its[i:i+len(p)], p) {
				best = len(p)
			}
		}
		return best
	}, &tokenAlphabet, false)
	return render(its)
}

// referencePhrases is referenceMask's first stage alone.
func referencePhrases(text string, phrases []string) string {
	return render(refPhrases(text, UniquePhrases(phrases)))
}

func render(its []item) string {
	var sb strings.Builder
	for _, it := range its {
		if it.isMask {
			sb.WriteString(Masked)
		} else {
			sb.WriteByte(it.b)
		}
	}
	return sb.String()
}

func refPhrases(text string, phrases []string) []item {
	type occ struct{ s, e int }
	var all []occ
	for i := 0; i < len(text); i++ { // every byte offset, not only rune starts
		for _, p := range phrases {
			if strings.HasPrefix(text[i:], p) {
				all = append(all, occ{i, i + len(p)})
			}
		}
	}
	var out []item
	for i := 0; i < len(text); {
		end := -1
		for _, o := range all {
			if o.s == i {
				end = max(end, o.e)
			}
		}
		if end < 0 {
			out = append(out, item{b: text[i]})
			i++
			continue
		}
		out = append(out, item{isMask: true})
		for {
			best := end
			for _, o := range all {
				if o.s <= end {
					best = max(best, o.e)
				}
			}
			if best == end {
				break
			}
			out = append(out, item{isMask: true})
			end = best
		}
		i = end
	}
	return out
}

func plainEq(its []item, s string) bool {
	for i, it := range its {
		if it.isMask || it.b != s[i] {
			return false
		}
	}
	return true
}

func plainFold(its []item, s string) bool {
	var b []byte
	for _, it := range its {
		if it.isMask {
			return false
		}
		b = append(b, it.b)
	}
	return bytes.EqualFold(b, []byte(s))
}

// refValues keeps each prefix (prefixAt returns its length at i, 0 for
// none) and replaces the value run after it — bytes of alphabet, masks
// passed through — with one mask, written before the run's first value
// byte (always: right after the prefix, even for an empty value).
func refValues(its []item, prefixAt func([]item, int) int, alphabet *[256]bool, always bool) []item {
	var out []item
	for i := 0; i < len(its); {
		n := prefixAt(its, i)
		if n == 0 {
			out = append(out, its[i])
			i++
			continue
		}
		out = append(out, its[i:i+n]...)
		i += n
		masked := always
		if always {
			out = append(out, item{isMask: true})
		}
		for i < len(its) && (its[i].isMask || alphabet[its[i].b]) {
			if its[i].isMask {
				out = append(out, its[i])
			} else if !masked {
				out = append(out, item{isMask: true})
				masked = true
			}
			i++
		}
	}
	return out
}

// streamMask runs text through a whole untimed stream, written in pieces cut
// at cuts.
func streamMask(text string, cuts []int, phrases, prefixes []string) string {
	var out bytes.Buffer
	tr := New(&out, Options{MaskPhrases: phrases, TokenPrefixes: prefixes, LimitBytes: math.MaxInt32})
	s := tr.Stream(StreamWork, Stdout)
	prev := 0
	for _, c := range cuts {
		if c > prev && c <= len(text) {
			_, _ = s.Write([]byte(text[prev:c]))
			prev = c
		}
	}
	_, _ = s.Write([]byte(text[prev:]))
	_ = s.Close()
	return out.String()
}

// TestMaskingMatchesReference: for generated masked values overlapping and
// touching each other, token prefixes and URL parameters, written in any
// pieces, the trace is exactly the reference masking, which leaves no byte
// of any occurrence of a masked value.
//
// spec: TRACE-02, TRACE-05, TRACE-09
func TestMaskingMatchesReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		letters := rapid.SampledFrom([]rune("ABab01-_"))
		phrases := rapid.SliceOfN(rapid.StringOfN(letters, 3, 10, -1), 0, 4).Draw(t, "phrases")
		frags := append([]string{"glsoat-", "glpat-", "glrt-", "?private_token=", "&X-Amz-Signature=", "[", " ", "\n", "\r", "A", "b", "0", "-"}, phrases...)
		for _, p := range phrases {
			if len(p) > 2 {
				frags = append(frags, p[:len(p)/2], p[len(p)/2:])
			}
		}
		parts := rapid.SliceOfN(rapid.SampledFrom(frags), 0, 24).Draw(t, "parts")
		text := strings.Join(parts, "")
		cuts := rapid.SliceOfN(rapid.IntRange(0, len(text)), 0, 8).Draw(t, "cuts")
		slicesSort(cuts)
		want := referenceMask(text, phrases, nil)
		if got := streamMask(text, cuts, phrases, nil); got != want {
			t.Fatalf("text %q phrases %q cuts %v:\n got %q\nwant %q", text, phrases, cuts, got, want)
		}
	})
}

func slicesSort(a []int) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

// TestMaskingOverlaps pins the cases gitlab-runner's trace shows: adjacent
// masked values, a masked value inside a token, and values that overlap,
// where no byte of either may remain.
//
// spec: TRACE-02, TRACE-05, TRACE-09
func TestMaskingOverlaps(t *testing.T) {
	long := strings.Repeat("x", 8190)
	cases := []struct {
		name, text string
		phrases    []string
		want       string
	}{
		{"adjacent values", "AAAAAAAABBBBBBBB\n", []string{"AAAAAAAA", "BBBBBBBB"}, "[MASKED][MASKED]\n"},
		{"value ends a token", "glsoat-XXXXSECRETVALUE\n", []string{"SECRETVALUE"}, "glsoat-[MASKED][MASKED]\n"},
		{"value inside a token", "glsoat-XXXXSECRETVALUEAAAA\n", []string{"SECRETVALUE"}, "glsoat-[MASKED][MASKED]\n"},
		{"value starts a token's value", "glsoat-SECRETVALUEAAAA end\n", []string{"SECRETVALUE"}, "glsoat-[MASKED][MASKED] end\n"},
		{"value is the whole token value", "glsoat-SECRETVALUE end\n", []string{"SECRETVALUE"}, "glsoat-[MASKED] end\n"},
		{"overlapping values", "xx12345678ABCD yy\n", []string{"12345678", "5678ABCD"}, "xx[MASKED][MASKED] yy\n"},
		{"shorter first overlaps longer", "ab12345678ABCDEFGH\n", []string{"ab123456", "345678ABCDEFGH"}, "[MASKED][MASKED]\n"},
		{"value overlapping itself", "abababababab\n", []string{"abababab"}, "[MASKED][MASKED]\n"},
		{"value in a URL parameter", "https://x/?private_token=pre-SECRETVALUE-post&a=1\n", []string{"SECRETVALUE"}, "https://x/?private_token=[MASKED][MASKED]&a=1\n"},
		{"value across the 8 KiB line bound", long + "SECRETVALUE tail\n", []string{"SECRETVALUE"}, long + "[MASKED] tail\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if ref := referenceMask(tc.text, tc.phrases, nil); ref != tc.want {
				t.Fatalf("reference = %q, want %q", ref, tc.want)
			}
			for cut := range len(tc.text) + 1 {
				if len(tc.text) > 100 && cut%97 != 0 && (cut < 8180 || cut > 8210) {
					continue
				}
				if got := streamMask(tc.text, []int{cut}, tc.phrases, nil); got != tc.want {
					t.Fatalf("cut at %d: got %q, want %q", cut, got, tc.want)
				}
			}
		})
	}
}

// TestMaskingStampedLongLine: with timestamps, a masked value that straddles
// the stamper's 8 KiB bound on a line without a newline is masked whole
// (masking comes before the line framing).
//
// spec: TRACE-02
func TestMaskingStampedLongLine(t *testing.T) {
	secret := "SECRETVALUE-0123456789"
	for _, at := range []int{8192 - 32 - 5, 8192 - 5, 8192 + 3, 2*8192 - 40} {
		var out bytes.Buffer
		tr := New(&out, Options{Timestamps: true, MaskPhrases: []string{secret}, LimitBytes: math.MaxInt32})
		s := tr.Stream(StreamWork, Stdout)
		text := strings.Repeat("y", at) + secret + strings.Repeat("z", 9000)
		for i := 0; i < len(text); i += 4096 {
			_, _ = s.Write([]byte(text[i:min(len(text), i+4096)]))
		}
		_ = s.Close()
		flat := strings.ReplaceAll(out.String(), "\n", "")
		if strings.Contains(out.String(), secret[:8]) || strings.Contains(flat, secret[len(secret)-8:]) || !strings.Contains(out.String(), Masked) {
			t.Fatalf("secret at %d not masked whole", at)
		}
	}
}

// FuzzMaskNoLeak: masked values of at least 8 bytes (GitLab's minimum for a
// masked variable; valid UTF-8, as GitLab's JSON carries them), written in
// any pieces among any output: the trace is
// the reference masking and contains none of them.
//
// spec: TRACE-02, TRACE-09
func FuzzMaskNoLeak(f *testing.F) {
	f.Add("glsoat-XXXX", "AAAAAAAA", "BBBBBBBB", uint16(3), uint16(9))
	f.Add("12345678ABCD", "12345678", "5678ABCD", uint16(1), uint16(10))
	f.Add("abababababab", "abababab", "babababa", uint16(4), uint16(5))
	f.Add("?private_token=s3cr3t-v4lue&x", "s3cr3t-v4lue", "cr3t-v4l", uint16(20), uint16(21))
	f.Fuzz(func(t *testing.T, text, v1, v2 string, a, b uint16) {
		var phrases []string
		for _, v := range []string{v1, v2} {
			if len(v) < 8 || !utf8.ValidString(v) || strings.TrimSpace(v) != v || strings.ContainsAny(v, "[MASKED]") {
				return
			}
			phrases = append(phrases, v)
		}
		// The masked values also appear next to and inside the text.
		text = v1 + text + v2 + v1[:len(v1)/2] + v2 + text[:len(text)/2] + v1
		if !utf8.ValidString(text) {
			return // the stream's UTF-8 repair is FuzzStream's
		}
		i, j := int(a)%(len(text)+1), int(b)%(len(text)+1)
		if i > j {
			i, j = j, i
		}
		got := streamMask(text, []int{i, j}, phrases, nil)
		if want := referenceMask(text, phrases, nil); got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
		for _, v := range phrases {
			if strings.Contains(got, v) {
				t.Fatalf("masked value %q survived in %q", v, got)
			}
		}
	})
}
