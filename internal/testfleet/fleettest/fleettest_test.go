package fleettest

import (
	"testing"
	"time"

	"github.com/vk-ci/vk/relay/loop"
	"github.com/vk-ci/vk/relay/translate"
)

// GitLab's trace matches the hub's output when it is the output, or the
// relay's wait lines (as the relay formats them) and then the output;
// any other difference is a mismatch.
func TestTraceMatches(t *testing.T) {
	at := time.Date(2026, 12, 3, 13, 21, 24, 0, time.UTC)
	note := func(text string) string {
		return string(translate.FormatTrace([]translate.Notice{{Level: translate.LevelInfo, Text: text}}, at, true))
	}
	wait := note(loop.WaitNoteText + "no ready node of the placement has room (position 1 of 1, no estimate of the wait yet)")
	out := "2026-12-03T13:21:31.000000Z 00O Running with vk\n2026-12-03T13:21:32.000000Z 00O Job succeeded\n"
	for _, tc := range []struct {
		name      string
		got, want string
		match     bool
	}{
		{"the output", out, out, true},
		{"wait lines, then the output", wait + wait + out, out, true},
		{"a line of another kind first", note("Preparing the job") + out, out, false},
		{"a wait line cut short", wait[:len(wait)-1] + out, out, false},
		{"output missing its end", wait + out[:len(out)-5], out, false},
		{"a wait line after the output starts", out[:30] + wait + out[30:], out, false},
		{"nothing", "", out, false},
	} {
		if got := TraceMatches([]byte(tc.got), []byte(tc.want)); got != tc.match {
			t.Errorf("%s: TraceMatches = %v, want %v", tc.name, got, tc.match)
		}
	}
}
