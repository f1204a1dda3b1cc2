package trace

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/need"
)

// fixtures is shared/fixtures/gitlab beside the checkout.
const fixtures = "../../../shared/fixtures/gitlab"

// stepClock returns start on the first Now and step later on every call.
type stepClock struct {
	mu   sync.Mutex
	next time.Time
	step time.Duration
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.next
	c.next = c.next.Add(c.step)
	return t
}
func (c *stepClock) NewTimer(time.Duration) clock.Timer          { panic("unused") }
func (c *stepClock) AfterFunc(time.Duration, func()) clock.Timer { panic("unused") }

func readFixture(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtures, name))
	if err != nil {
		need.Missingf(t, "fixture %s not available (../shared/fixtures beside the checkout): %v", name, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

// spec: TRACE-01, TRACE-04
func TestTimestamperUpstreamCases(t *testing.T) {
	var fx struct {
		StreamNumber int    `json:"stream_number"`
		StreamType   string `json:"stream_type"`
		Clock        struct {
			First string `json:"first"`
		} `json:"clock"`
		Writes   []string `json:"writes"`
		Expected []string `json:"expected_with_timestamps"`
	}
	readFixture(t, "timestamper_cases.json", &fx)
	first, err := time.Parse(time.RFC3339Nano, fx.Clock.First)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	tr := New(&out, Options{Clock: &stepClock{next: first, step: time.Hour}, Timestamps: true})
	s := tr.Stream(uint8(fx.StreamNumber), StreamType(fx.StreamType[0]))
	for _, w := range fx.Writes {
		if n, err := s.Write([]byte(w)); n != len(w) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", w, n, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(strings.Join(fx.Expected, ""), out.String()); diff != "" {
		t.Errorf("stamped output (-want +got):\n%s", diff)
	}
	if got := tr.Len(); got != int64(out.Len()) {
		t.Errorf("Len() = %d, want %d", got, out.Len())
	}
}

// spec: TRACE-05, TRACE-09
func TestTokenMaskUpstreamCases(t *testing.T) {
	var cases []struct {
		Name     string   `json:"name"`
		Extra    []string `json:"extra_prefixes"`
		Writes   []string `json:"writes"`
		Expected string   `json:"expected"`
	}
	readFixture(t, "token_mask_cases.json", &cases)
	if len(cases) == 0 {
		t.Fatal("no cases")
	}
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			var out bytes.Buffer
			tr := New(&out, Options{TokenPrefixes: tc.Extra})
			s := tr.Stream(StreamWork, Stdout)
			for _, w := range tc.Writes {
				if _, err := s.Write([]byte(w)); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if got := out.String(); got != tc.Expected {
				t.Errorf("masked =\n%q\nwant\n%q", got, tc.Expected)
			}
		})
	}
}

// TestPhraseMasking ports gitlab-runner's masker TestMasking table: '|'
// separates writes.
//
// spec: TRACE-09
func TestPhraseMasking(t *testing.T) {
	tests := []struct {
		input    string
		values   []string
		expected string
	}{
		{"empty secrets have no affect", []string{""}, "empty secrets have no affect"},
		{"no escaping at all", nil, "no escaping at all"},
		{"secrets", []string{"secrets"}, "[MASKED]"},
		{"secret|s", []string{"secrets"}, "[MASKED]"},
		{"s|ecrets", []string{"secrets"}, "[MASKED]"},
		{"secretssecrets", []string{"secrets"}, "[MASKED][MASKED]"},
		{"ssecrets", []string{"secrets"}, "s[MASKED]"},
		{"s|secrets", []string{"secrets"}, "s[MASKED]"},
		{"at the start of the buffer", []string{"at"}, "[MASKED] the start of the buffer"},
		{"in the middle of the buffer", []string{"middle"}, "in the [MASKED] of the buffer"},
		{"at the end of the buffer", []string{"buffer"}, "at the end of the [MASKED]"},
		{"all values are masked", []string{"all", "values", "are", "masked"}, "[MASKED] [MASKED] [MASKED] [MASKED]"},
		{"prefixed and suffixed: xfoox ybary ffoo barr ffooo bbarr", []string{"foo", "bar"},
			"prefixed and suffixed: x[MASKED]x y[MASKED]y f[MASKED] [MASKED]r f[MASKED]o b[MASKED]r"},
		{"prefix|ed, su|ffi|xed |and split|:| xfo|ox y|bary ffo|o ba|rr ffooo b|barr", []string{"foo", "bar"},
			"prefixed, suffixed and split: x[MASKED]x y[MASKED]y f[MASKED] [MASKED]r f[MASKED]o b[MASKED]r"},
		{"sp|lit al|l val|ues ar|e |mask|ed", []string{"split", "all", "values", "are", "masked"},
			"[MASKED] [MASKED] [MASKED] [MASKED] [MASKED]"},
		{"prefix_mask mask prefix_|mask prefix_ma|sk mas|k", []string{"mask", "prefix_mask"},
			"[MASKED] [MASKED] [MASKED] [MASKED] [MASKED]"},
		{"large secret: " + strings.Repeat("_", 8000) + "|" + strings.Repeat("_", 8000),
			[]string{strings.Repeat("_", 8000*2)}, "large secret: [MASKED]"},
		{"overlap: this is the en| foobar", []string{"this is the end", "en foobar", "en"},
			"overlap: this is the [MASKED]"},
	}
	for _, tc := range tests {
		name := tc.input
		if len(name) > 40 {
			name = name[:40]
		}
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			tr := New(&out, Options{MaskPhrases: tc.values, LimitBytes: 1 << 20})
			s := tr.Stream(StreamWork, Stdout)
			for _, part := range strings.Split(tc.input, "|") {
				n, err := s.Write([]byte(part))
				if err != nil || n != len(part) {
					t.Fatalf("Write(%q) = %d, %v", part, n, err)
				}
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if got := out.String(); got != tc.expected {
				t.Errorf("masked = %q, want %q", got, tc.expected)
			}
		})
	}
}

// TestURLParamMasking ports gitlab-runner's urlsanitizer TestMasking table;
// '|' separates writes.
//
// spec: TRACE-09
func TestURLParamMasking(t *testing.T) {
	tests := []struct{ in, want string }{
		{"no escaping at all http://example.org/?test=foobar", "no escaping at all http://example.org/?test=foobar"},
		{"multiple: &private_token=hello &?x-amz-security-token=hello &?x-amz-security-token=hello ?x-amz-security?x-amz-security-token=hello",
			"multiple: &private_token=[MASKED] &?x-amz-security-token=[MASKED] &?x-amz-security-token=[MASKED] ?x-amz-security?x-amz-security-token=[MASKED]"},
		{"above known key size: http://example.org/?this-is-a-really-really-long-key-name=foobar",
			"above known key size: http://example.org/?this-is-a-really-really-long-key-name=foobar"},
		{"http://example.com/?private_token=deadbeef sensitive URL at the start", "http://example.com/?private_token=[MASKED] sensitive URL at the start"},
		{"a sensitive URL at the end http://example.com/?authenticity_token=deadbeef", "a sensitive URL at the end http://example.com/?authenticity_token=[MASKED]"},
		{"a sensitive URL http://example.com/?rss_token=deadbeef in the middle", "a sensitive URL http://example.com/?rss_token=[MASKED] in the middle"},
		{"a sensitive URL http://example.com/?X-AMZ-sigNATure=deadbeef with mixed case", "a sensitive URL http://example.com/?X-AMZ-sigNATure=[MASKED] with mixed case"},
		{"a sensitive URL http://example.com/?param=second&x-amz-credential=deadbeef second param",
			"a sensitive URL http://example.com/?param=second&x-amz-credential=[MASKED] second param"},
		{"a sensitive URL http://example.com/?rss_token=hide&x-amz-credential=deadbeef both params",
			"a sensitive URL http://example.com/?rss_token=[MASKED]&x-amz-credential=[MASKED] both params"},
		{"a long sensitive URL http://example.com/?x-amz-credential=" + strings.Repeat("abcdefghijklmnopqrstuvwxyz0123456789", 3),
			"a long sensitive URL http://example.com/?x-amz-credential=[MASKED]"},
		{"a really long sensitive URL http://example.com/?x-amz-credential=" + strings.Repeat("0", 8*1024) + " that is still scrubbed",
			"a really long sensitive URL http://example.com/?x-amz-credential=[MASKED] that is still scrubbed"},
		{"spl|it sensit|ive UR|L http://example.com/?x-amz-cred|ential=abcdefghij|klmnopqrstuvwxyz01234567",
			"split sensitive URL http://example.com/?x-amz-credential=[MASKED]"},
		{"newline: http://example.com/?x-amz-credential=abc\nhttp://example.com/?x-amz-credential=abc",
			"newline: http://example.com/?x-amz-credential=[MASKED]\nhttp://example.com/?x-amz-credential=[MASKED]"},
		{"control character: http://example.com/?x-amz-credential=abc\bhttp://example.com/?x-amz-credential=abc",
			"control character: http://example.com/?x-amz-credential=[MASKED]\bhttp://example.com/?x-amz-credential=[MASKED]"},
		{"rss_token=notmasked http://example.com/?rss_token=!@#$A&x-amz-credential=abc&test=test",
			"rss_token=notmasked http://example.com/?rss_token=[MASKED]&x-amz-credential=[MASKED]&test=test"},
		{"query string with no value: http://example.com/?x-amz-credential=&private_token=gitlab",
			"query string with no value: http://example.com/?x-amz-credential=[MASKED]&private_token=[MASKED]"},
		{"invalid URL with double &: http://example.com/?x-amz-credential=abc&&private_token=gitlab",
			"invalid URL with double &: http://example.com/?x-amz-credential=[MASKED]&&private_token=[MASKED]"},
		{"invalid URL with double ?: http://example.com/?x-amz-credential=abc??private_token=gitlab",
			"invalid URL with double ?: http://example.com/?x-amz-credential=[MASKED]??private_token=[MASKED]"},
		{"split on &: http://example.com/|&|x-amz-cre|dential=abc", "split on &: http://example.com/&x-amz-credential=[MASKED]"},
		{"split on ?: http://example.com/|?|x-amz-cre|dential=abc", "split on ?: http://example.com/?x-amz-credential=[MASKED]"},
		{"split after ?: http://example.com/|?||x-amz-cre|dential=abc", "split after ?: http://example.com/?x-amz-credential=[MASKED]"},
		{"interweaved tokens: ?|one ?x-amz-credential=abc two=three ?|one=two &token &x-amz-credential=abc =token ?=",
			"interweaved tokens: ?one ?x-amz-credential=[MASKED] two=three ?one=two &token &x-amz-credential=[MASKED] =token ?="},
		{"terminated before mask: ?x", "terminated before mask: ?x"},
		{"terminated before mask: ?x|-", "terminated before mask: ?x-"},
		{"terminated before mask: ?x-|", "terminated before mask: ?x-"},
		{"terminated before mask: ?x-amz-credential=", "terminated before mask: ?x-amz-credential=[MASKED]"},
		{"terminated before mask: ?x-amz-credential=|", "terminated before mask: ?x-amz-credential=[MASKED]"},
	}
	for _, tc := range tests {
		var got collect
		m := newURLMasker(&got)
		for _, part := range strings.Split(tc.in, "|") {
			_ = m.write([]byte(part))
		}
		_ = m.flush()
		if got.String() != tc.want {
			t.Errorf("mask(%q) =\n%q\nwant\n%q", tc.in, got.String(), tc.want)
		}
	}
}

// spec: TRACE-05
func TestEffectiveTokenPrefixes(t *testing.T) {
	got := EffectiveTokenPrefixes(nil)
	want := []string{"gldt-", "glft-", "glrt-", "glcbt-", "glimt-", "gloas-", "glpat-", "glptt-",
		"glrtr-", "gltok-", "glffct-", "glsoat-", "glagent-", "_gitlab_session="}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("EffectiveTokenPrefixes(nil) (-want +got):\n%s", diff)
	}
	if got := EffectiveTokenPrefixes([]string{" a- ", "b-", "a-"}); len(got) != MaxTokenPrefixes || got[0] != "a-" || got[1] != "b-" {
		t.Errorf("EffectiveTokenPrefixes(a-, b-) = %v", got)
	}
}

// spec: TRACE-02, TRACE-08, NODE-10
func TestLimitCountsStampsAndAppendsNotice(t *testing.T) {
	start := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	var out bytes.Buffer
	const limit = 100
	tr := New(&out, Options{Clock: clock.NewFake(start), Timestamps: true, LimitBytes: limit})
	s := tr.Stream(StreamWork, Stdout)
	line := "0123456789012345678901234567\n" // 29 bytes + 32 stamp = 61
	for range 3 {
		if _, err := s.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
	}
	_ = s.Close()
	entry := "2026-11-30T03:00:00.000000Z 01O " + line
	want := (entry + entry)[:limit] + LimitNotice(limit)
	if got := out.String(); got != want {
		t.Errorf("trace = %q\nwant %q", got, want)
	}
	if !tr.Truncated() {
		t.Error("Truncated() = false")
	}
	if got := tr.Len(); got != int64(len(want)) {
		t.Errorf("Len() = %d, want %d", got, len(want))
	}
}

// spec: TRACE-08
func TestLimitNeverSplitsUTF8(t *testing.T) {
	var out bytes.Buffer
	tr := New(&out, Options{LimitBytes: 5})
	s := tr.Stream(StreamWork, Stdout)
	_, _ = s.Write([]byte("abcdé\n")) // é is 2 bytes at offset 4..5
	_ = s.Close()
	if want := "abcd" + LimitNotice(5); out.String() != want {
		t.Errorf("trace = %q, want %q", out.String(), want)
	}
	if LimitNotice(4194304) != "\n\x1b[33;1mJob's log exceeded limit of 4194304 bytes.\nJob execution will continue but no more output will be collected.\x1b[0;m\n" {
		t.Error("LimitNotice text differs from gitlab-runner's")
	}
}

// spec: TRACE-01
func TestRunnerLinesAndSections(t *testing.T) {
	start := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	var out bytes.Buffer
	tr := New(&out, Options{Clock: clock.NewFake(start), Timestamps: true, Sections: true})
	tr.Println("Running with vk")
	tr.SectionStart("prepare_script", SectionOptions{})
	tr.Title("Preparing environment")
	tr.SectionEnd("prepare_script")
	tr.Warningln("w")
	tr.Errorln("Job failed: exit code 1")
	tr.SectionStart("step_script_0", SectionOptions{Collapsed: true, HideDuration: true})
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	ts := "2026-11-30T03:00:00.000000Z "
	want := ts + "00O \x1b[0KRunning with vk\x1b[0;m\n" +
		ts + "00O section_start:1796007600:prepare_script\r\x1b[0K\n" +
		ts + "00O+\x1b[0K\x1b[36;1mPreparing environment\x1b[0;m\x1b[0;m\n" +
		ts + "00O section_end:1796007600:prepare_script\r\x1b[0K\n" +
		ts + "00O+\x1b[0;33mWARNING: w\x1b[0;m\n" +
		ts + "00O \x1b[31;1mERROR: Job failed: exit code 1\x1b[0;m\n" +
		ts + "00O section_start:1796007600:step_script_0[hide_duration=true,collapsed=true]\r\x1b[0K\n"
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if _, err := tr.Runner().Write([]byte("x")); err == nil {
		t.Error("write after Close succeeded")
	}
}

// spec: TRACE-02
func TestMaskBeforeStampAcrossStreams(t *testing.T) {
	var out bytes.Buffer
	tr := New(&out, Options{Clock: clock.NewFake(time.Unix(0, 0)), Timestamps: true, MaskPhrases: []string{"hunter2"}})
	o, e := tr.Stream(StreamWork, Stdout), tr.Stream(StreamWork, Stderr)
	_, _ = o.Write([]byte("pw hun"))
	_, _ = e.Write([]byte("err hunter2\n"))
	_, _ = o.Write([]byte("ter2 ok\n"))
	_ = o.Close()
	_ = e.Close()
	got := out.String()
	if strings.Contains(got, "hunter2") {
		t.Fatalf("secret leaked: %q", got)
	}
	want := "1970-01-01T00:00:00.000000Z 01E err [MASKED]\n" +
		"1970-01-01T00:00:00.000000Z 01O pw [MASKED] ok\n"
	if got != want {
		t.Errorf("trace = %q, want %q", got, want)
	}
}

func TestInvalidUTF8Replaced(t *testing.T) {
	var out bytes.Buffer
	s := New(&out, Options{}).Stream(StreamWork, Stdout)
	_, _ = s.Write([]byte("a\xffb\xc3"))
	_, _ = s.Write([]byte("\xa9c\xe2"))
	_ = s.Close()
	if want := "a\uFFFDbéc\uFFFD"; out.String() != want {
		t.Errorf("got %q, want %q", out.String(), want)
	}
}

// spec: TRACE-05
func TestSectionsOffDropsMarkers(t *testing.T) {
	var out bytes.Buffer
	tr := New(&out, Options{Clock: clock.NewFake(time.Unix(0, 0))})
	tr.SectionStart("get_sources", SectionOptions{})
	tr.Title("Getting source from Git repository")
	tr.SectionEnd("get_sources")
	_ = tr.Close()
	if want := "\x1b[0K\x1b[36;1mGetting source from Git repository\x1b[0;m\x1b[0;m\n"; out.String() != want {
		t.Errorf("trace = %q, want %q", out.String(), want)
	}
}
