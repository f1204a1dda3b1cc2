package translate

import (
	"strings"
	"time"

	"github.com/vk-ci/vk/proto/job"
	"github.com/vk-ci/vk/relay/gitlab"
)

// ANSI styles of gitlab-runner's logger (common/buildlogger/internal/tee.go).
const (
	ansiClear  = "\x1b[0K"
	ansiGreen  = "\x1b[32;1m"
	ansiYellow = "\x1b[0;33m"
	ansiRed    = "\x1b[31;1m"
	ansiReset  = "\x1b[0;m"
)

// stampLayout is gitlab-runner's trace timestamp: UTC, microseconds, 27
// bytes.
const stampLayout = "2006-01-02T15:04:05.000000Z"

// FormatTrace renders lines the relay writes into a job's trace itself
// (refusals, undecodable jobs, jobs it could not submit or place) as
// gitlab-runner's logger writes its own lines: styled per level, one entry
// per line of text, each stamped `<time> 00O ` (stream 00, stdout) unless
// timestamps is false, in which case no header is written (TRACE-07). at
// is the stamp of every line.
func FormatTrace(lines []Notice, at time.Time, timestamps bool) []byte {
	var b strings.Builder
	stamp := at.UTC().Format(stampLayout) + " 00O "
	for _, n := range lines {
		for _, text := range strings.Split(strings.TrimRight(n.Text, "\n"), "\n") {
			if timestamps {
				b.WriteString(stamp)
			}
			switch n.Level {
			case LevelInfo:
				b.WriteString(ansiGreen + text + ansiReset)
			case LevelWarning:
				b.WriteString(ansiYellow + "WARNING: " + text + ansiReset)
			case LevelError:
				b.WriteString(ansiRed + "ERROR: " + text + ansiReset)
			default:
				b.WriteString(ansiClear + text + ansiReset)
			}
			b.WriteByte('\n')
		}
	}
	return []byte(b.String())
}

// Notices returns the refusal as trace lines: its message as an error,
// then gitlab-runner's closing "Job failed" line.
func (e *RefusalError) Notices() []Notice {
	final := "Job failed: " + e.Message
	if e.Failure == gitlab.FailureSystem {
		final = "Job failed (system failure): " + e.Message
	}
	return []Notice{{Level: LevelError, Text: final}}
}

// Timestamps reports whether the relay stamps the lines it writes for
// this job: the job's FF_TIMESTAMPS variable, on unless set to a false
// value once expanded against the job's variables unless raw, read as
// proto/job's CiJob.Timestamps reads it (TRACE-03, TRACE-07). For a job
// that could not be decoded, use true.
func Timestamps(vars []gitlab.Variable) bool {
	var v string
	ok := false
	for i := len(vars) - 1; i >= 0 && !ok; i-- {
		if vars[i].Key == "FF_TIMESTAMPS" {
			v, ok = vars[i].Value, true
			if !vars[i].Raw {
				v = job.Expand(v, func(key string) (string, bool) { return gitlab.VariableValue(vars, key) })
			}
		}
	}
	if !ok {
		return true
	}
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "0", "f", "false":
		return false
	}
	return true
}
