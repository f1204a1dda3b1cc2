package ui

import (
	"encoding/json"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/job"
)

// RowFromJob makes the Jobs page's row of a store record, with Runtime
// measured to now for an unfinished job. A hub may implement
// [Backend.Jobs] as ListJobs, newest first, through it. An unreadable
// Result leaves Failure "other".
func RowFromJob(j store.Job, now time.Time) JobRow {
	row := JobRow{ID: j.ID, State: j.State, Node: j.Node, Stage: j.Stage, Tenant: j.Tenant, Relay: j.Principal,
		Runner: j.Runner, Instance: store.InstanceKey(j.Instance), Project: j.Project, GitLabJob: j.GitLabJobID,
		Created: j.Created, Updated: j.Updated}
	end := now
	if j.State == store.JobFinished {
		end = j.Updated
	}
	if !j.Created.IsZero() && end.After(j.Created) {
		row.Runtime = end.Sub(j.Created)
	}
	if len(j.Result) > 0 {
		var res client.JobResult
		if err := json.Unmarshal(j.Result, &res); err != nil {
			row.Failure = string(client.FailureOther)
		} else {
			row.Failure, row.Message = string(res.Failure), res.Message
		}
	}
	var spec job.JobSpec
	if json.Unmarshal(j.Spec, &spec) == nil && spec.GitLabCI != nil {
		ji := spec.GitLabCI.Job
		row.Name, row.CIStage, row.Pipeline, row.ProjectPath = ji.Name, ji.Stage, ji.PipelineID, ji.ProjectPath
	}
	row.Placement = PlacementKeyText(j.Placement)
	return row
}

// PlacementText is a placement as operators read it: "linux [ssd,kvm]
// mem=2G cpus=2 disk=10G".
func PlacementText(p client.Placement) string {
	out := p.Pool
	if len(p.Labels) > 0 {
		out += " [" + strings.Join(p.Labels, ",") + "]"
	}
	return out + " " + p.Envelope.String()
}

// PlacementKeyText is [PlacementText] of a job record's placement (the
// placement's JSON); the key itself when it does not parse, "" for none.
func PlacementKeyText(key string) string {
	if key == "" {
		return ""
	}
	var p client.Placement
	if err := json.Unmarshal([]byte(key), &p); err != nil {
		return key
	}
	return PlacementText(p)
}

// CleanOutput makes job output fit to show as text: ANSI escape
// sequences (CSI "ESC [ … final", OSC "ESC ] … BEL|ESC \", and two-byte
// escapes) are removed, carriage returns that redraw a line keep only the
// last drawing, other control characters but tab and newline are dropped,
// and invalid UTF-8 becomes U+FFFD. The output is untrusted: the page
// escapes what remains.
func CleanOutput(b []byte) string {
	var out strings.Builder
	out.Grow(len(b))
	lineStart := 0 // offset in out of the current line's start
	for i := 0; i < len(b); {
		c := b[i]
		switch {
		case c == 0x1b:
			i = skipEscape(b, i)
			continue
		case c == '\r':
			if i+1 < len(b) && b[i+1] == '\n' {
				i++ // CRLF: a plain newline
				continue
			}
			// A bare CR redraws the line: drop what was drawn so far.
			s := out.String()[:lineStart]
			out.Reset()
			out.WriteString(s)
			i++
			continue
		case c == '\n':
			out.WriteByte('\n')
			lineStart = out.Len()
			i++
			continue
		case c == '\t':
			out.WriteByte(c)
			i++
			continue
		case c < 0x20 || c == 0x7f:
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			out.WriteRune(utf8.RuneError)
			i++
			continue
		}
		if r >= 0x80 && r < 0xa0 { // C1 controls
			i += n
			continue
		}
		out.Write(b[i : i+n])
		i += n
	}
	return out.String()
}

// skipEscape returns the index after the escape sequence starting at
// b[i] == ESC.
func skipEscape(b []byte, i int) int {
	i++
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '[': // CSI: parameters and intermediates, then a final byte 0x40–0x7e
		for i++; i < len(b); i++ {
			if b[i] >= 0x40 && b[i] <= 0x7e {
				return i + 1
			}
		}
		return i
	case ']': // OSC: until BEL or ESC \
		for i++; i < len(b); i++ {
			if b[i] == 0x07 {
				return i + 1
			}
			if b[i] == 0x1b && i+1 < len(b) && b[i+1] == '\\' {
				return i + 2
			}
		}
		return i
	}
	return i + 1 // a two-byte escape
}
