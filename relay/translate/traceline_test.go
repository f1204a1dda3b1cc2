package translate

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/relay/gitlab"
)

// Relay-written lines use gitlab-runner's logger format: stream 00,
// stdout, a 32-byte header unless FF_TIMESTAMPS is false, styled per level.
// spec: TRACE-07
func TestFormatTrace(t *testing.T) {
	at := time.Date(2021, 1, 1, 1, 0, 0, 20010000, time.FixedZone("CET", 3600))
	lines := []Notice{
		{Level: LevelInfo, Text: `Job triggered by policy "p".`},
		{Level: LevelWarning, Text: "cache key sanitized"},
		{Level: LevelError, Text: "first\nsecond\n"},
		{Level: LevelNotice, Text: "Skipping cache"},
	}
	const h = "2021-01-01T00:00:00.020010Z 00O "
	want := h + "\x1b[32;1mJob triggered by policy \"p\".\x1b[0;m\n" +
		h + "\x1b[0;33mWARNING: cache key sanitized\x1b[0;m\n" +
		h + "\x1b[31;1mERROR: first\x1b[0;m\n" +
		h + "\x1b[31;1mERROR: second\x1b[0;m\n" +
		h + "\x1b[0KSkipping cache\x1b[0;m\n"
	if got := string(FormatTrace(lines, at, true)); got != want {
		t.Errorf("FormatTrace =\n%q\nwant\n%q", got, want)
	}
	if len(h) != 32 {
		t.Fatalf("header is %d bytes", len(h))
	}
	plain := strings.ReplaceAll(want, h, "")
	if got := string(FormatTrace(lines, at, false)); got != plain {
		t.Errorf("FormatTrace without timestamps =\n%q\nwant\n%q", got, plain)
	}
	if got := FormatTrace(nil, at, true); len(got) != 0 {
		t.Errorf("no lines gave %q", got)
	}
}

// FF_TIMESTAMPS is read from the job's variables, on by default.
// spec: TRACE-07
func TestTimestamps(t *testing.T) {
	tests := []struct {
		vars []gitlab.Variable
		want bool
	}{
		{nil, true},
		{[]gitlab.Variable{{Key: "FF_TIMESTAMPS", Value: "false"}}, false},
		{[]gitlab.Variable{{Key: "FF_TIMESTAMPS", Value: "FALSE"}}, false},
		{[]gitlab.Variable{{Key: "FF_TIMESTAMPS", Value: "0"}}, false},
		{[]gitlab.Variable{{Key: "FF_TIMESTAMPS", Value: "true"}}, true},
		{[]gitlab.Variable{{Key: "FF_TIMESTAMPS", Value: "maybe"}}, true},
		{[]gitlab.Variable{{Key: "FF_TIMESTAMPS", Value: "false"}, {Key: "FF_TIMESTAMPS", Value: "true"}}, true},
		// Expanded first, as gitlab-runner expands feature flag values.
		{[]gitlab.Variable{{Key: "OFF", Value: "false"}, {Key: "FF_TIMESTAMPS", Value: "$OFF"}}, false},
		{[]gitlab.Variable{{Key: "OFF", Value: "false"}, {Key: "FF_TIMESTAMPS", Value: "$OFF", Raw: true}}, true},
	}
	for _, tt := range tests {
		if got := Timestamps(tt.vars); got != tt.want {
			t.Errorf("Timestamps(%v) = %v, want %v", tt.vars, got, tt.want)
		}
	}
}

// A refusal renders as gitlab-runner's job-failed error lines.
// spec: SPEC-20, SPEC-22, TRACE-07
func TestRefusalNotices(t *testing.T) {
	_, err := Translate(fixture(t, "job_response_unsupported_executor_opts.json"), testRunner)
	var re *RefusalError
	if !errors.As(err, &re) {
		t.Fatal(err)
	}
	got := string(FormatTrace(re.Notices(), time.Unix(0, 0), false))
	if !strings.HasPrefix(got, "\x1b[31;1mERROR: Job failed (system failure): Unsupported \"image\" options [blammo]") ||
		strings.Count(got, "\n") != 2 || !strings.Contains(got, "[powpow]") {
		t.Errorf("refusal lines = %q", got)
	}
	cfg := (&RefusalError{Failure: gitlab.FailureConfiguration, Message: "no secrets"}).Notices()
	if len(cfg) != 1 || cfg[0] != (Notice{Level: LevelError, Text: "Job failed: no secrets"}) {
		t.Errorf("configuration refusal = %+v", cfg)
	}
}
