package trace

import (
	"strconv"
	"strings"
)

// ANSI sequences gitlab-runner's logger writes.
const (
	ansiClear   = "\x1b[0K"
	ansiReset   = "\x1b[0;m"
	ansiGreen   = "\x1b[32;1m"
	ansiYellow  = "\x1b[0;33m"
	ansiRed     = "\x1b[31;1m"
	ansiCyan    = "\x1b[36;1m"
	ansiBoldYel = "\x1b[33;1m"
)

// Println writes a plain runner line: ESC[0K text ESC[0;m.
func (t *Trace) Println(text string) { t.runnerLine(ansiClear + text + ansiReset + "\n") }

// Infoln writes a green runner line.
func (t *Trace) Infoln(text string) { t.runnerLine(ansiGreen + text + ansiReset + "\n") }

// Warningln writes a yellow "WARNING: " runner line.
func (t *Trace) Warningln(text string) {
	t.runnerLine(ansiYellow + "WARNING: " + text + ansiReset + "\n")
}

// Errorln writes a red "ERROR: " runner line.
func (t *Trace) Errorln(text string) { t.runnerLine(ansiRed + "ERROR: " + text + ansiReset + "\n") }

// Title writes a stage title line: cyan text inside a plain line, as
// gitlab-runner writes it after section_start.
func (t *Trace) Title(text string) { t.Println(ansiCyan + text + ansiReset) }

func (t *Trace) runnerLine(s string) {
	// The runner stream never fails on its own; a writer error is kept in
	// Err for the caller to see.
	_, _ = t.Runner().Write([]byte(s))
}

// SectionOptions are the options gitlab-runner appends in brackets to a
// section name.
type SectionOptions struct {
	Collapsed    bool // [collapsed=true]
	HideDuration bool // [hide_duration=true]
}

func (o SectionOptions) suffix() string {
	var parts []string
	if o.HideDuration {
		parts = append(parts, "hide_duration=true")
	}
	if o.Collapsed {
		parts = append(parts, "collapsed=true")
	}
	if len(parts) == 0 {
		return ""
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// SectionStartMarker returns `section_start:<unix>:<name>[opts]\r\e[0K`.
func SectionStartMarker(unix int64, name string, o SectionOptions) string {
	return "section_start:" + strconv.FormatInt(unix, 10) + ":" + name + o.suffix() + "\r" + ansiClear
}

// SectionEndMarker returns `section_end:<unix>:<name>\r\e[0K`.
func SectionEndMarker(unix int64, name string) string {
	return "section_end:" + strconv.FormatInt(unix, 10) + ":" + name + "\r" + ansiClear
}

// SectionStart writes a section start marker on the runner stream when
// sections are on (TRACE-05).
func (t *Trace) SectionStart(name string, o SectionOptions) {
	if t.opts.Sections {
		t.runnerLine(SectionStartMarker(t.clk.Now().Unix(), name, o))
	}
}

// SectionEnd writes a section end marker on the runner stream when sections
// are on.
func (t *Trace) SectionEnd(name string) {
	if t.opts.Sections {
		t.runnerLine(SectionEndMarker(t.clk.Now().Unix(), name))
	}
}

// Sections reports whether section markers are written.
func (t *Trace) Sections() bool { return t.opts.Sections }

// Timestamps reports whether entries are stamped.
func (t *Trace) Timestamps() bool { return t.opts.Timestamps }
